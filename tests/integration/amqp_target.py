"""The broker the AMQP integration tests talk to: logbus, or a private RabbitMQ to prove
the tests right.

    from tests.integration import amqp_target
    from tests.integration.amqp_target import AmqpBroker, connect, run, unique

    amqp_broker = amqp_target.amqp_broker  # the fixture, by the name tests ask for
                                           # (an alias, not an import: no F401/F811)

    def test_x(amqp_broker: AmqpBroker) -> None:
        amqp_broker.url          # "amqp://guest:guest@127.0.0.1:PORT/"
        amqp_broker.host, amqp_broker.port, amqp_broker.target   # "logbus" | "rabbitmq"
        amqp_broker.restart()    # clean stop, start again: same port, same data
        amqp_broker.kill()       # SIGKILL, start again: same port, same data

Target ``logbus`` (the default): a fresh ``logbus serve`` per test, from the
``logbus_server`` fixture (every listener on an ephemeral loopback port, AMQP included);
a server whose ready file lists no "amqp" listener fails the test at once with "logbus has
no AMQP listener" instead of letting clients time out.

Target ``rabbitmq`` (``LOGBUS_TEST_AMQP_TARGET=rabbitmq``): one RabbitMQ node for the
whole pytest session (it takes ~13 s to boot), started by bench/rabbitmq.py on free
loopback ports, stopped when pytest exits. Tests share it, so every test names its queues
and exchanges with ``unique()``. restart() and kill() stop only the node's beam.smp (our
epmd stays up) and boot it again with the same node name, ports and mnesia directory, so
durable queues and persistent messages come back as they do after a real restart.

``run(coro)`` runs an async test body under ``asyncio.run`` with a deadline (no
pytest-asyncio here); every client call in these tests is bounded by it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import aio_pika
import pytest
from aio_pika.abc import (
    AbstractConnection,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
)
from pamqp.commands import Basic

from tests.serverproc import LogbusServer

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if TYPE_CHECKING:  # mypy sees bench/ as a namespace package; at run time, as the bench scripts do:
    from bench import rabbitmq
else:
    if str(BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(BENCH_DIR))
    import rabbitmq

TARGET_ENV = "LOGBUS_TEST_AMQP_TARGET"
Target = Literal["logbus", "rabbitmq"]
T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0  # one async test body, start to finish


def target() -> Target:
    value = os.environ.get(TARGET_ENV, "logbus").strip().lower() or "logbus"
    if value not in ("logbus", "rabbitmq"):
        raise pytest.UsageError(f"{TARGET_ENV}={value!r}: expected 'logbus' or 'rabbitmq'")
    return value  # type: ignore[return-value]


def unique(prefix: str) -> str:
    """A queue or exchange name no other test (or earlier run on a shared node) uses."""
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def run(body: Awaitable[T], timeout: float = DEFAULT_TIMEOUT) -> T:
    """Run an async test body to completion, failing (not hanging) after ``timeout``."""

    async def bounded() -> T:
        try:
            return await asyncio.wait_for(body, timeout)
        except TimeoutError:
            raise AssertionError(f"the test body did not finish within {timeout:g} s") from None

    return asyncio.run(bounded())


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


# -- aio-pika helpers ---------------------------------------------------------------


async def connect(broker: AmqpBroker, **kwargs: Any) -> AbstractConnection:
    return await aio_pika.connect(broker.url, timeout=10, **kwargs)


async def publish_confirmed(
    exchange: AbstractExchange, routing_key: str, bodies: list[bytes], **properties: Any
) -> None:
    """Publish on a confirming channel; every message must be acked by the broker."""
    results = await asyncio.gather(*(
        exchange.publish(aio_pika.Message(body, **properties), routing_key, mandatory=False, timeout=10)
        for body in bodies
    ))
    not_acked = [r for r in results if not isinstance(r, Basic.Ack)]
    assert not not_acked, f"publishes not confirmed with Basic.Ack: {not_acked}"


async def drain(queue: AbstractQueue, limit: int = 10_000) -> list[AbstractIncomingMessage]:
    """basic.get (auto-ack) until get-empty: whatever the queue holds, in order."""
    out: list[AbstractIncomingMessage] = []
    while len(out) < limit:
        message = await queue.get(no_ack=True, fail=False, timeout=10)
        if message is None:
            return out
        out.append(message)
    raise AssertionError(f"{queue.name} still not empty after {limit} messages")


async def drain_bodies(queue: AbstractQueue) -> list[bytes]:
    return [m.body for m in await drain(queue)]


# -- the two targets -----------------------------------------------------------------


class AmqpBroker:
    """What a test sees: where to connect, and how to restart or crash the broker."""

    target: Target
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/"

    def restart(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def log_text(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"<{self.target} AMQP broker at {self.host}:{self.port}>"


class LogbusAmqp(AmqpBroker):
    target: Target = "logbus"

    def __init__(self, server: LogbusServer) -> None:
        self.server = server
        if "amqp" not in server.addresses:
            pytest.fail(
                "logbus has no AMQP listener: `logbus serve` reported only "
                f"{sorted(server.addresses)} in its ready file (GATEWAYS['amqp'] in "
                "logbus/server.py is not built yet?)",
                pytrace=False,
            )
        self.host, self.port = server.host_port("amqp")

    def restart(self) -> None:
        self.server.restart(same_ports=True)
        self._check_same_port()

    def kill(self) -> None:
        self.server.kill()
        self.server.restart(same_ports=True)
        self._check_same_port()

    def _check_same_port(self) -> None:
        assert self.server.host_port("amqp") == (self.host, self.port), self.server.addresses

    def log_text(self) -> str:
        return self.server.log_text()


class RabbitNode(rabbitmq.RabbitMQ):
    """bench/rabbitmq.py's node, plus stopping and booting beam.smp again in place."""

    def __init__(self, directory: str | None = None) -> None:
        super().__init__(directory, start_timeout=90.0, stop_timeout=30.0)

    def restart(self) -> None:
        self._stop_beam(signal.SIGTERM)
        self._boot_again()

    def kill(self) -> None:
        self._stop_beam(signal.SIGKILL)
        self._boot_again()

    def answers(self) -> bool:
        return rabbitmq.amqp_answers(self.port)

    def _stop_beam(self, sig: int) -> None:
        script = self.script
        if script is None or not self.pid:
            raise RuntimeError("the RabbitMQ node is not running")
        me = ("beam.smp", script.pid)
        self._signal_if_ours(self.pid, me[0], me[1], sig)
        deadline = time.monotonic() + self.stop_timeout
        while rabbitmq.proc_stat(self.pid) == me:
            if time.monotonic() > deadline:
                self._signal_if_ours(self.pid, me[0], me[1], signal.SIGKILL)
                raise AssertionError(f"RabbitMQ did not stop within {self.stop_timeout:g} s of {sig}")
            time.sleep(0.05)
        script.wait(10)
        self.pid = 0

    def _boot_again(self) -> None:
        """Start the server script again: same env (node name, ports, mnesia dir)."""
        env = self._env()
        with open(os.path.join(self.workdir, "startup.log"), "ab") as log:
            self.script = subprocess.Popen(
                ["/bin/sh", rabbitmq.find_server_script()], stdin=subprocess.DEVNULL,
                stdout=log, stderr=log, env=env, cwd=self.workdir, start_new_session=True,
            )
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.script.poll() is not None:
                raise rabbitmq.RabbitMQError(
                    f"rabbitmq-server exited ({self.script.returncode}) on restart:\n" + self.logs()
                )
            if not self.pid:
                beams = rabbitmq.children_named(self.script.pid, "beam.smp")
                self.pid = beams[0] if beams else 0
            if self.pid and self.answers():
                return
            if time.monotonic() > deadline:
                raise rabbitmq.RabbitMQError(
                    f"RabbitMQ did not come back on port {self.port} within "
                    f"{self.start_timeout:g} s:\n" + self.logs()
                )
            time.sleep(0.2)


class RabbitAmqp(AmqpBroker):
    target: Target = "rabbitmq"

    def __init__(self, node: RabbitNode) -> None:
        self.node = node
        self.host, self.port = "127.0.0.1", node.port

    def restart(self) -> None:
        self.node.restart()

    def kill(self) -> None:
        self.node.kill()

    def log_text(self) -> str:
        return self.node.logs()


_RABBIT_NODE = pytest.StashKey[RabbitNode]()


def shared_rabbit_node(config: pytest.Config) -> RabbitNode:
    """The session's RabbitMQ node: started on first use, stopped when pytest exits (a
    stash on the config rather than a session fixture: a fixture imported into several
    test modules would be a separate fixture, and a separate node, in each)."""
    node = config.stash.get(_RABBIT_NODE, None)
    if node is None:
        node = RabbitNode()
        try:
            node.start()
        except BaseException:
            node.stop()
            raise
        config.stash[_RABBIT_NODE] = node
        config.add_cleanup(node.stop)
    elif not node.answers():  # a test left it down (a failed restart): boot it again
        if node.pid:
            node.kill()
        else:
            node._boot_again()
    return node


@pytest.fixture
def amqp_broker(request: pytest.FixtureRequest) -> Iterator[AmqpBroker]:
    if target() == "rabbitmq":
        yield RabbitAmqp(shared_rabbit_node(request.config))
        return
    start: Callable[..., LogbusServer] = request.getfixturevalue("logbus_server")
    yield LogbusAmqp(start())

