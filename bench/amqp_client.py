"""The client side of bench/amqp_bench.py: measuring, AMQP plumbing with aio-pika, and
the consumers that run in a process of their own.

    (common.py: Meter, broker and client CPU over a measured span)
    Run                          one workload's connections, names and progress; fails at once
                                 when the broker closes a connection or channel
    ConfirmWindow, Drain         a confirming publisher with a bounded window; an acking consumer
    ConsumerProcess              consumers in a spawned process, talking over a pipe

Imported by name from bench/ (amqp_bench.py puts its own directory on sys.path), never
from amqp_bench itself: run as a script, that module is __main__, and a second copy of it
would bring a second BenchError that its ``except BenchError`` does not catch (the one is
common.BenchError).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aio_pika
import uvloop
from aio_pika.abc import (
    AbstractChannel,
    AbstractConnection,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
)
from common import BenchError, LatencyRecorder, end_process, quantile, self_cpu

T = TypeVar("T")
CLEANUP_TIMEOUT = 15.0


# -- measuring ---------------------------------------------------------------------


def proc_comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        raise BenchError(f"broker pid {pid}: no such process") from None


def percentiles_ms(values_ns: list[int]) -> dict[str, float]:
    """Nearest-rank percentiles of latencies given in ns, in ms."""
    s = sorted(values_ns)
    n = len(s)

    def rank(p: float) -> float:
        return quantile(s, p / 100) / 1e6

    return {"p50_ms": rank(50), "p90_ms": rank(90), "p99_ms": rank(99), "p999_ms": rank(99.9),
            "max_ms": s[-1] / 1e6, "mean_ms": sum(s) / n / 1e6}


# -- AMQP plumbing -----------------------------------------------------------------


class Run:
    """The connections, queue and exchange names and progress counters of one workload.
    The broker closing one of its connections or channels fails it at once (``until``,
    ``check``); ``close`` closes the connections and deletes the names."""

    def __init__(self, url: str, pid: int, args: argparse.Namespace) -> None:
        self.url, self.pid, self.args = url, pid, args
        self.prefix = f"amqp_bench.{os.getpid()}.{os.urandom(3).hex()}"
        self.connections: list[AbstractConnection] = []
        self.queues: list[str] = []
        self.exchanges: list[str] = []
        self.progress: dict[str, int] = {}
        self.closing = False
        self.failure: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def _on_close(self, what: str) -> Callable[[Any, BaseException | None], None]:
        def closed(_sender: Any, exc: BaseException | None = None) -> None:
            if not self.closing and not self.failure.done():
                self.failure.set_exception(BenchError(f"the broker closed a {what}: {exc!r}"))
        return closed

    async def connect(self) -> AbstractConnection:
        try:
            conn = await aio_pika.connect(self.url, timeout=self.args.connect_timeout)
        except Exception as exc:
            raise BenchError(f"cannot connect to {self.url}: {exc!r}") from exc
        self.connections.append(conn)
        conn.close_callbacks.add(self._on_close("connection"))
        return conn

    async def channel(self, conn: AbstractConnection, *, confirms: bool = False,
                      prefetch: int = 0) -> AbstractChannel:
        ch = await conn.channel(publisher_confirms=confirms)
        ch.close_callbacks.add(self._on_close("channel"))
        if prefetch:
            await ch.set_qos(prefetch_count=prefetch)
        return ch

    async def queue(self, ch: AbstractChannel, suffix: str) -> AbstractQueue:
        name = f"{self.prefix}.{suffix}"
        self.queues.append(name)
        return await ch.declare_queue(name, durable=True)

    async def until(self, aw: Awaitable[T]) -> T:
        """``aw``, unless the broker closes a connection or channel first."""
        task: asyncio.Future[T] = asyncio.ensure_future(aw)
        try:
            waits: list[asyncio.Future[Any]] = [task, self.failure]
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            self.failure.result()  # raises the BenchError
            raise AssertionError("unreachable")
        finally:
            task.cancel()

    def check(self) -> None:
        """Cheap enough per message: raise if the broker closed a connection or channel."""
        if self.failure.done():
            self.failure.result()

    async def close(self) -> None:
        self.closing = True
        if self.failure.done():
            self.failure.exception()  # retrieved: no "never retrieved" warning
        conns, self.connections = self.connections, []
        for conn in conns:
            try:
                async with asyncio.timeout(CLEANUP_TIMEOUT):
                    await conn.close()
            except Exception as exc:  # noqa: BLE001 -- best effort: report, go on
                print(f"amqp_bench: closing a connection: {exc!r}", file=sys.stderr)
        queues, exchanges = self.queues, self.exchanges
        self.queues, self.exchanges = [], []
        if not (queues or exchanges):
            return
        try:
            async with asyncio.timeout(CLEANUP_TIMEOUT):
                conn = await aio_pika.connect(self.url, timeout=self.args.connect_timeout)
                try:
                    ch = await conn.channel()
                    for q in queues:
                        await ch.queue_delete(q, if_unused=False, if_empty=False)
                    for x in exchanges:
                        await ch.exchange_delete(x, if_unused=False)
                finally:
                    await conn.close()
        except Exception as exc:  # noqa: BLE001 -- best effort: report, keep the real error
            print(f"amqp_bench: could not delete {queues + exchanges}: {exc!r}", file=sys.stderr)


def persistent(body: bytes) -> aio_pika.Message:
    return aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)


class ConfirmWindow:
    """Publishes with at most ``size`` messages unconfirmed; counts confirms in
    ``progress["confirmed"]``. A Message may be published again: aio-pika builds fresh
    properties for every publish."""

    def __init__(self, exchange: AbstractExchange, size: int, progress: dict[str, int]) -> None:
        self.exchange = exchange
        self.slots = asyncio.Semaphore(size)
        self.pending: set[asyncio.Task[Any]] = set()
        self.errors: list[BaseException] = []
        self.progress = progress
        progress["confirmed"] = 0

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.pending.discard(task)
        self.slots.release()
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.errors.append(exc)
        else:
            self.progress["confirmed"] += 1

    async def publish(self, message: aio_pika.Message, routing_key: str) -> None:
        await self.slots.acquire()
        if self.errors:
            raise BenchError(f"publish failed: {self.errors[0]!r}")
        publish = self.exchange.publish(message, routing_key, mandatory=False)
        task = asyncio.ensure_future(publish)
        self.pending.add(task)
        task.add_done_callback(self._done)

    async def drain(self) -> None:
        while self.pending:
            await asyncio.wait(set(self.pending))
        if self.errors:
            raise BenchError(f"publish failed: {self.errors[0]!r}")

    def cancel(self) -> None:
        for task in list(self.pending):
            task.cancel()


class Drain:
    """Consumer callback: hands the body to ``on_body``, acks, counts in
    ``progress[key]`` and sets ``done`` at ``expected``."""

    def __init__(self, expected: int, progress: dict[str, int], key: str,
                 on_body: Callable[[bytes], None] | None = None) -> None:
        self.expected = expected
        self.progress = progress
        self.key = key
        progress[key] = 0
        self.redelivered = 0
        self.on_body = on_body
        self.done = asyncio.Event()

    async def __call__(self, message: AbstractIncomingMessage) -> None:
        if self.on_body is not None:
            self.on_body(message.body)
        if message.redelivered:
            self.redelivered += 1
        await message.ack()
        self.progress[self.key] += 1
        if self.progress[self.key] >= self.expected:
            self.done.set()


async def round_trip(ch: AbstractChannel, queue: str) -> int:
    """A synchronous method after the acks, so the broker has read them all.
    Returns the queue's count of ready messages."""
    q = await ch.declare_queue(queue, passive=True)
    assert q.declaration_result is not None
    return q.declaration_result.message_count or 0


# -- consumers in a process of their own -------------------------------------------
#
# In the fanout and latency workloads the consumers run in a spawned process: one
# Python process that publishes and consumes saturates a core before the broker does,
# and then latency measures the client's own backlog. time.monotonic_ns is
# CLOCK_MONOTONIC, system-wide on Linux, so the child can subtract the parent's stamps.
#
# The pipe carries ("ready", None), ("progress", {...}) about once a second,
# ("drained", the child's CPU seconds since ready), then ("done", result) or
# ("error", text).


async def child_consume(args: argparse.Namespace, url: str, queues: list[str], expected: int,
                        latency_warmup: int | None, pipe: Any) -> dict[str, Any]:
    run = Run(url, 0, args)
    try:
        recorder = None if latency_warmup is None else LatencyRecorder(expected, latency_warmup)
        consumers = []
        for i, name in enumerate(queues):
            ch = await run.channel(await run.connect(), prefetch=args.prefetch)
            q = await ch.declare_queue(name, passive=True)
            drain = Drain(expected, run.progress, f"acked.{i}", recorder)
            consumers.append((ch, q, drain, await q.consume(drain, no_ack=False)))
        pipe.send(("ready", None))
        cpu0 = self_cpu()
        for ch, q, drain, _tag in consumers:
            while not drain.done.is_set():
                try:
                    async with asyncio.timeout(1.0):
                        await run.until(drain.done.wait())
                except TimeoutError:
                    pipe.send(("progress", dict(run.progress)))
            await round_trip(ch, q.name)
        pipe.send(("drained", self_cpu() - cpu0))
        for ch, q, drain, tag in consumers:
            await q.cancel(tag)
            left = await round_trip(ch, q.name)
            if left or drain.redelivered:
                raise BenchError(f"{left} messages left in {q.name}, "
                                 f"{drain.redelivered} redelivered")
        if recorder is None:
            return {}
        if recorder.duplicates:
            raise BenchError(f"{recorder.duplicates} messages received twice")
        return recorder.result()
    finally:
        await run.close()


def consumer_process_main(args: argparse.Namespace, url: str, queues: list[str], expected: int,
                          latency_warmup: int | None, pipe: Any) -> None:
    try:
        result = uvloop.run(child_consume(args, url, queues, expected, latency_warmup, pipe))
        pipe.send(("done", result))
    except BaseException as exc:  # noqa: BLE001 -- whatever it is, the parent reports it
        pipe.send(("error", str(exc) if isinstance(exc, BenchError) else repr(exc)))
    finally:
        pipe.close()


class ConsumerProcess:
    """Parent side: start the child; read its messages without blocking the event loop."""

    def __init__(self, run: Run, queues: list[str], expected: int,
                 latency_warmup: int | None = None, main: Callable[..., None] | None = None) -> None:
        ctx = multiprocessing.get_context("spawn")  # never fork a running event loop
        self.pipe, child_end = ctx.Pipe()
        self.progress = run.progress
        self.finished = False
        self.proc = ctx.Process(
            target=main or consumer_process_main, daemon=True,
            args=(run.args, run.url, queues, expected, latency_warmup, child_end))
        self.proc.start()
        child_end.close()

    async def _recv(self) -> tuple[str, Any]:
        if not self.pipe.poll():
            loop = asyncio.get_running_loop()
            readable: asyncio.Future[None] = loop.create_future()
            fd = self.pipe.fileno()

            def wake() -> None:
                if not readable.done():
                    readable.set_result(None)

            loop.add_reader(fd, wake)
            try:
                await readable
            finally:
                loop.remove_reader(fd)
                os.set_blocking(fd, True)  # uvloop made it non-blocking; recv() needs blocking
        try:
            msg: tuple[str, Any] = self.pipe.recv()
        except EOFError:
            self.proc.join(5)
            raise BenchError(f"consumer process exited (code {self.proc.exitcode})") from None
        return msg

    async def expect(self, kind: str) -> Any:
        while True:
            what, value = await self._recv()
            if what == "progress":
                self.progress.update(value)
            elif what == "error":
                raise BenchError(f"consumer process: {value}")
            elif what != kind:
                raise BenchError(f"consumer process said {what!r}, expected {kind!r}")
            else:
                self.finished = kind == "done"
                return value

    def stop(self) -> None:
        """Our own child, by its handle: let it exit if it is done, else end it."""
        end_process(self.proc, self.finished, CLEANUP_TIMEOUT)
        self.pipe.close()
