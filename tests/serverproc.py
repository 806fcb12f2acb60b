"""Run a real ``logbus serve`` in a subprocess, for integration and fault tests.

    factory = ServerFactory(tmp_dir)
    server = factory.start()                      # every listener on tcp:0 (loopback)
    server.http_url, server.ports["http"]         # from the server's --ready-file
    server.stop()                                 # SIGTERM, wait: returns the exit code
    server.kill(); server.restart()               # kill -9, then again on the same data dir
    factory.cleanup()                             # stops whatever is still running, by pid
    factory.start(anonymous_admin=False)          # clients without credentials as the shipped default

The server binds port 0 and reports the ports it got in its ready file, so tests never
guess free ports. Its stdout and stderr go to ``server.log_path`` (a file, not a pipe
nobody reads); a start that fails or times out raises ServerStartError with that log.

Unless told ``anonymous_admin=False``, a server is started with the operator's explicit
``--anonymous-user guest``: MQTT and Kafka clients without credentials act as the
administrator, which the tests written before decision 0039 rely on. Tests of anonymous
access itself, and the docs' examples, run with the shipped default (user ``anonymous``).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

REPO_ROOT = Path(__file__).resolve().parent.parent
LOOPBACK_ANY_PORT = "tcp:0:interface=127.0.0.1"
LISTENERS = ("amqp", "mqtt", "kafka", "http")
READY_TIMEOUT = 60.0  # a deadline, not a speed: a loaded machine starts a server slowly
# HTTP Basic credentials of the first boot's administrator (guest/guest): every API
# endpoint but /healthz asks for a user (docs/security.md)
ADMIN_AUTH = {"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="}
STOP_TIMEOUT = 30.0
ANONYMOUS_ADMIN = ("--anonymous-user", "guest")  # an operator's choice, still supported (decision 0039)


class ServerStartError(RuntimeError):
    pass


def logbus_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a logbus subprocess: ours without LOGBUS_* (a developer's own
    settings must not leak into tests), the repository importable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGBUS_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def logbus_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "logbus", *args]


def run_logbus(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60.0, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one ``logbus ...`` command to completion, capturing stdout and stderr."""
    return subprocess.run(
        logbus_command(*args),
        env=logbus_env(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def serve_args(
    data_dir: Path, listeners: Mapping[str, str], ready_file: Path | None, extra: Sequence[str]
) -> list[str]:
    args = ["serve", "--data-dir", str(data_dir)]
    for name, endpoint in listeners.items():
        args += [f"--{name.replace('_', '-')}", endpoint]
    if ready_file is not None:
        args += ["--ready-file", str(ready_file)]
    return [*args, *extra]


class LogbusServer:
    """One ``logbus serve`` process (and its restarts, on the same data directory)."""

    def __init__(
        self,
        workdir: Path,
        *,
        listeners: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        ready_timeout: float = READY_TIMEOUT,
        anonymous_admin: bool = True,
    ) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.ready_file = workdir / "ready.json"
        self.log_path = workdir / "server.log"
        self.listeners = {name: LOOPBACK_ANY_PORT for name in LISTENERS}
        self.listeners.update(listeners or {})
        self.args = [*(ANONYMOUS_ADMIN if anonymous_admin and "--anonymous-user" not in args else ()), *args]
        self.env = dict(env or {})
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.addresses: dict[str, str] = {}  # listener -> "host:port", as the server reported
        self.ports: dict[str, int] = {}  # listener -> port

    # -- facts about the running server ---------------------------------------------------

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("server is not started")
        return self.proc.pid

    @property
    def http_url(self) -> str:
        if "http" not in self.addresses:
            raise RuntimeError("the http listener is off")
        return f"http://{self.addresses['http']}"

    def host_port(self, listener: str) -> tuple[str, int]:
        host, _, port = self.addresses[listener].rpartition(":")
        return host.strip("[]"), int(port)

    def metric(self, name: str, *, required: bool = False) -> float:
        """A sample of ``name`` (no labels) from the server's /metrics; 0.0 if absent
        (``required``: an AssertionError)."""
        host, port = self.host_port("http")
        conn = http.client.HTTPConnection(host, port, timeout=10)
        try:
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
        found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        assert found or not required, f"{name} missing from /metrics"
        return float(found.group(1)) if found else 0.0

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, max_chars: int = 30_000) -> str:
        text = self.log_text()
        return text if len(text) <= max_chars else "[...]\n" + text[-max_chars:]

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> LogbusServer:
        """Start and wait until every listener is bound (the ready file appears)."""
        if self.running():
            raise RuntimeError(f"server pid {self.pid} is already running")
        self.ready_file.unlink(missing_ok=True)
        self.addresses, self.ports = {}, {}
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"--- {' '.join(self.command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                env=logbus_env(self.env),
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # a ^C to pytest does not hit the server directly
            )
        self._wait_ready()
        return self

    def command(self) -> list[str]:
        args = serve_args(self.data_dir, self.listeners, self.ready_file, self.args)
        return logbus_command(*args)

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if self.ready_file.exists():
                ready = json.loads(self.ready_file.read_text())
                if ready.get("pid") == self.proc.pid:
                    break
            code = self.proc.poll()
            if code is not None:
                raise ServerStartError(
                    f"logbus serve exited with code {code} before it was ready:\n{self.log_text()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise ServerStartError(
                    f"logbus serve was not ready after {self.ready_timeout:.0f} s:\n"
                    f"{self.log_text()}"
                )
            time.sleep(0.02)
        self.addresses = {k: v for k, v in ready.items() if k != "pid"}
        self.ports = {k: int(v.rpartition(":")[2]) for k, v in self.addresses.items() if ":" in v}

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait; return the exit code (SIGKILL and raise if it does not stop)."""
        if self.proc is None:
            raise RuntimeError("server is not started")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(
                    f"logbus serve did not stop within {timeout} s of SIGTERM:\n{self.log_text()}"
                ) from None
        return self.proc.returncode

    def kill(self) -> int:
        """SIGKILL (a crash) and reap; return the exit code (-9)."""
        if self.proc is None:
            raise RuntimeError("server is not started")
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.wait()

    def restart(self, *, same_ports: bool = False) -> LogbusServer:
        """Stop (if running) and start again on the same data directory. With
        ``same_ports`` the listeners bind the ports of the previous run, so clients can
        reconnect to the address they had; otherwise they get new ports (see .ports)."""
        if self.running():
            code = self.stop()
            if code != 0:
                raise AssertionError(f"logbus serve exited {code} on SIGTERM:\n{self.log_text()}")
        if same_ports:
            for name in self.ports:
                host, port = self.host_port(name)
                if ":" not in host:  # IPv4; other address families keep their endpoint
                    self.listeners[name] = f"tcp:{port}:interface={host}"
        return self.start()

    def cleanup(self) -> None:
        """Stop gracefully if possible, else kill; never leaves a process behind."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.stop(timeout=10.0)
        except AssertionError:
            pass  # stop() already killed it


class ServerFactory:
    """Starts servers in fresh directories under ``base_dir``; cleanup() stops them all.
    ``ServerFactory.live`` holds the factories not yet cleaned up, so a failed test's
    report can carry the logs of the servers it talked to (tests/conftest.py)."""

    live: ClassVar[list[ServerFactory]] = []

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.servers: list[LogbusServer] = []
        ServerFactory.live.append(self)

    def start(
        self,
        *,
        listeners: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        ready_timeout: float = READY_TIMEOUT,
        anonymous_admin: bool = True,
    ) -> LogbusServer:
        """Start ``logbus serve`` with every listener on an ephemeral loopback port, except
        those overridden in ``listeners`` (name -> endpoint or "off"); ``args`` are extra
        ``serve`` flags, ``env`` extra environment variables; ``anonymous_admin``: add
        ``--anonymous-user guest`` (the module's docstring)."""
        workdir = self.base_dir / f"server{len(self.servers)}"
        server = LogbusServer(
            workdir, listeners=listeners, args=args, env=env, ready_timeout=ready_timeout,
            anonymous_admin=anonymous_admin,
        )
        self.servers.append(server)
        return server.start()

    def cleanup(self) -> None:
        for server in reversed(self.servers):
            server.cleanup()
        if self in ServerFactory.live:
            ServerFactory.live.remove(self)


def module_server(tmp_path_factory: Any, name: str, **kwargs: Any) -> Iterator[LogbusServer]:
    """The body of a module-scoped fixture: one server for the module, stopped after it.

        @pytest.fixture(scope="module")
        def server(tmp_path_factory): yield from module_server(tmp_path_factory, "cli")
    """
    factory = ServerFactory(tmp_path_factory.mktemp(name))
    try:
        yield factory.start(**kwargs)
    finally:
        factory.cleanup()
