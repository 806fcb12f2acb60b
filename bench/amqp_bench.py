#!/usr/bin/env python3
"""AMQP 0-9-1 throughput, broker CPU and latency with aio-pika on uvloop: logbus vs RabbitMQ.

Four workloads against one broker, each on fresh durable queues deleted at its end:

    publish   --messages persistent messages (delivery_mode 2) of --size bytes to a
              durable queue via the default exchange, publisher confirms, at most
              --window unconfirmed; msg/s and broker CPU us per confirmed message
    consume   those messages, manual ack (one basic.ack each), prefetch --prefetch;
              msg/s and broker CPU us per consumed+acked message (deletes the queue)
    fanout    --fanout-messages to a durable fanout exchange bound to --fanout-queues
              durable queues: one confirming publisher (same settings), one consumer
              per queue (manual ack, own connection); deliveries/s, CPU us per delivery
    latency   --latency-rate msg/s for --latency-seconds (after --latency-warmup
              seconds not counted), published as above, paced without drift; the body
              carries the monotonic send time and the consumer (manual ack) takes the
              latency on arrival; p50/p90/p99/max in ms

Broker CPU is user+system from /proc/<pid>/stat (for RabbitMQ: the beam.smp process).
The client's CPU is reported too: a Python client costs about as much per message as
the broker, so on a small machine msg/s is bounded by the client and CPU per message is
the figure that compares brokers. For that reason the fanout and latency consumers run
in a process of their own. Every workload has a deadline (--timeout) and fails with a
clear message instead of hanging; the broker closing a connection or channel fails it
at once.

    python bench/amqp_bench.py --url amqp://guest:guest@127.0.0.1:5672/ --broker-pid 1234
    python bench/amqp_bench.py --target rabbitmq   # a private node (bench/rabbitmq.py)
    python bench/amqp_bench.py --target logbus     # `logbus serve` with an AMQP listener
    python bench/amqp_bench.py --target both       # rabbitmq, then logbus, and ratios
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rabbitmq import RabbitMQ, RabbitMQError

T = TypeVar("T")
WORKLOADS = ("publish", "consume", "fanout", "latency")
# latency body head: sequence, time due, time sent (time.monotonic_ns)
LATENCY_HEAD = struct.Struct("<Qqq")
CLEANUP_TIMEOUT = 15.0
METHOD = {
    "queues": "durable, server-default type (RabbitMQ: classic), declared fresh per workload",
    "messages": "delivery_mode 2 (persistent), default exchange unless fanout, mandatory off",
    "publisher": "publisher confirms; --window publishes in flight, each awaiting its confirm",
    "consumers": "manual ack, one basic.ack per message, basic.qos prefetch_count --prefetch",
    "processes": "publish, consume: one client process; fanout, latency: the consumers in a "
                 "second process (spawned), the publisher in the first",
    "cpu": "broker: /proc/<pid>/stat utime+stime; client: getrusage of both client processes",
}


class BenchError(Exception):
    pass


# -- measuring ---------------------------------------------------------------------


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        raise BenchError(f"broker process {pid} is gone") from None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def proc_comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        raise BenchError(f"broker pid {pid}: no such process") from None


def self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Meter:
    """Wall time, broker CPU (user, system) and the client's CPU over one measured span."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.user0, self.sys0 = cpu_split(pid)
        self.client0 = self_cpu()
        self.t0 = time.perf_counter()

    def stop(self, count: int, unit: str, plural: str, child_cpu: float = 0.0) -> dict[str, Any]:
        """``child_cpu``: CPU seconds of the consumer process over the same span."""
        dt = time.perf_counter() - self.t0
        user1, sys1 = cpu_split(self.pid)
        client = self_cpu() - self.client0 + child_cpu
        user, system = user1 - self.user0, sys1 - self.sys0
        out = {
            plural: count, "seconds": dt, f"{plural}_per_s": count / dt,
            "broker_cpu_seconds": user + system,
            f"broker_cpu_us_per_{unit}": (user + system) / count * 1e6,
            f"broker_user_us_per_{unit}": user / count * 1e6,
            f"broker_system_us_per_{unit}": system / count * 1e6,
            "broker_cpu_percent": (user + system) / dt * 100,
            f"client_cpu_us_per_{unit}": client / count * 1e6,
        }
        if child_cpu:
            out[f"client_consumer_process_cpu_us_per_{unit}"] = child_cpu / count * 1e6
        return out


def percentiles_ms(values_ns: list[int]) -> dict[str, float]:
    """Nearest-rank percentiles of latencies given in ns, in ms."""
    s = sorted(values_ns)
    n = len(s)

    def rank(p: float) -> float:
        return s[max(0, min(n - 1, math.ceil(p / 100 * n) - 1))] / 1e6

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


class LatencyRecorder:
    """``on_body`` for Drain: the latency of each body that starts with LATENCY_HEAD."""

    def __init__(self, total: int, warmup: int) -> None:
        self.warmup = warmup
        self.seen = bytearray(total)
        self.duplicates = 0
        self.latencies: list[int] = []
        self.from_schedule: list[int] = []

    def __call__(self, body: bytes) -> None:
        now = time.monotonic_ns()
        seq, due, sent = LATENCY_HEAD.unpack_from(body)
        if self.seen[seq]:
            self.duplicates += 1
            return
        self.seen[seq] = 1
        if seq >= self.warmup:
            self.latencies.append(now - sent)
            self.from_schedule.append(now - due)


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
        return {"latencies": recorder.latencies, "from_schedule": recorder.from_schedule}
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
                 latency_warmup: int | None = None) -> None:
        ctx = multiprocessing.get_context("spawn")  # never fork a running event loop
        self.pipe, child_end = ctx.Pipe()
        self.progress = run.progress
        self.finished = False
        self.proc = ctx.Process(
            target=consumer_process_main, daemon=True,
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
        if self.finished:
            self.proc.join(CLEANUP_TIMEOUT)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.pipe.close()


# -- the workloads -----------------------------------------------------------------


async def w_publish(run: Run) -> dict[str, Any]:
    a = run.args
    ch = await run.channel(await run.connect(), confirms=True)
    q = await run.queue(ch, "work")
    message = persistent(os.urandom(a.size))
    window = ConfirmWindow(ch.default_exchange, a.window, run.progress)
    meter = Meter(run.pid)
    try:
        for _ in range(a.messages):
            run.check()
            await window.publish(message, q.name)
        await run.until(window.drain())
    finally:
        window.cancel()
    out = meter.stop(a.messages, "msg", "msgs")
    ready = await round_trip(ch, q.name)
    if ready != a.messages:
        raise BenchError(f"{a.messages} confirmed but the queue holds {ready}")
    return out


async def w_consume(run: Run, queue: str) -> dict[str, Any]:
    a = run.args
    run.queues.append(queue)  # deleted at the end of this workload
    ch = await run.channel(await run.connect(), prefetch=a.prefetch)
    q = await ch.declare_queue(queue, passive=True)
    drain = Drain(a.messages, run.progress, "acked")
    meter = Meter(run.pid)
    tag = await q.consume(drain, no_ack=False)
    await run.until(drain.done.wait())
    await round_trip(ch, queue)
    out = meter.stop(a.messages, "msg", "msgs")
    await q.cancel(tag)
    left = await round_trip(ch, queue)
    if left or drain.redelivered:
        raise BenchError(f"{left} messages left in the queue, {drain.redelivered} redelivered")
    return out


async def w_fanout(run: Run) -> dict[str, Any]:
    a = run.args
    sch = await run.channel(await run.connect())
    name = f"{run.prefix}.fanout"
    run.exchanges.append(name)
    exchange = await sch.declare_exchange(name, aio_pika.ExchangeType.FANOUT, durable=True)
    queues = []
    for i in range(a.fanout_queues):
        q = await run.queue(sch, f"fanout.{i}")
        await q.bind(exchange)
        queues.append(q.name)
    pch = await run.channel(await run.connect(), confirms=True)
    window = ConfirmWindow(await pch.get_exchange(name, ensure=False), a.window, run.progress)
    message = persistent(os.urandom(a.size))
    consumers = ConsumerProcess(run, queues, a.fanout_messages)
    try:
        await run.until(consumers.expect("ready"))
        meter = Meter(run.pid)
        try:
            for _ in range(a.fanout_messages):
                run.check()
                await window.publish(message, "")
            await run.until(window.drain())
        finally:
            window.cancel()
        published = time.perf_counter() - meter.t0
        child_cpu = await run.until(consumers.expect("drained"))
        out = meter.stop(a.fanout_messages * len(queues), "delivery", "deliveries", child_cpu)
        await run.until(consumers.expect("done"))
    finally:
        consumers.stop()
    out.update({"messages": a.fanout_messages, "queues": len(queues),
                "publish_seconds": published,
                "published_msgs_per_s": a.fanout_messages / published})
    return out


async def w_latency(run: Run) -> dict[str, Any]:
    a = run.args
    rate = a.latency_rate
    warmup = round(rate * a.latency_warmup)
    total = warmup + round(rate * a.latency_seconds)
    if total == warmup:
        raise BenchError("nothing to measure (--latency-rate x --latency-seconds < 1)")
    q = await run.queue(await run.channel(await run.connect()), "latency")
    pch = await run.channel(await run.connect(), confirms=True)
    window = ConfirmWindow(pch.default_exchange, a.window, run.progress)
    pad = bytes(max(0, a.size - LATENCY_HEAD.size))
    lag_max = 0
    consumer = ConsumerProcess(run, [q.name], total, warmup)
    try:
        await run.until(consumer.expect("ready"))
        meter = Meter(run.pid)
        # Paced without drift: message i is due at t0 + i/rate. After each wake-up every
        # message already due is sent, then we sleep until the next one is due.
        t0 = time.monotonic_ns()
        period_ns = 1e9 / rate
        sent = 0
        try:
            while sent < total:
                due_now = min(total, int((time.monotonic_ns() - t0) / period_ns) + 1)
                while sent < due_now:
                    due = t0 + round(sent * period_ns)
                    stamp = time.monotonic_ns()
                    lag_max = max(lag_max, stamp - due)
                    run.check()
                    body = LATENCY_HEAD.pack(sent, due, stamp) + pad
                    await window.publish(persistent(body), q.name)
                    sent += 1
                if sent < total:
                    next_due = t0 + sent * period_ns
                    await asyncio.sleep(max(0.0, (next_due - time.monotonic_ns()) / 1e9))
            send_seconds = (time.monotonic_ns() - t0) / 1e9
            await run.until(window.drain())
        finally:
            window.cancel()
        child_cpu = await run.until(consumer.expect("drained"))
        cpu = meter.stop(total, "msg", "msgs", child_cpu)
        result = await run.until(consumer.expect("done"))
    finally:
        consumer.stop()
    achieved = total / send_seconds
    return {
        "rate_per_s": rate, "seconds": a.latency_seconds, "warmup_seconds": a.latency_warmup,
        "measured_messages": len(result["latencies"]), "achieved_send_rate_per_s": achieved,
        "rate_kept": achieved >= 0.99 * rate,
        "latency": percentiles_ms(result["latencies"]),
        # from the time each message was due: adds whatever the sender fell behind
        "latency_from_schedule": percentiles_ms(result["from_schedule"]),
        "sender_max_lag_ms": lag_max / 1e6,
        "broker_cpu_us_per_msg": cpu["broker_cpu_us_per_msg"],
        "broker_cpu_percent": cpu["broker_cpu_percent"],
        "client_cpu_us_per_msg": cpu["client_cpu_us_per_msg"],
        "client_consumer_process_cpu_us_per_msg": cpu.get("client_consumer_process_cpu_us_per_msg"),
    }


def summary(name: str, r: dict[str, Any]) -> str:
    if name == "latency":
        lat = r["latency"]
        return (f"p50 {lat['p50_ms']:.2f} ms, p90 {lat['p90_ms']:.2f}, p99 {lat['p99_ms']:.2f}, "
                f"max {lat['max_ms']:.2f}, sent {r['achieved_send_rate_per_s']:,.0f}/s"
                f"{'' if r['rate_kept'] else ' (RATE NOT KEPT: the figures show a backlog)'}; "
                f"broker {r['broker_cpu_us_per_msg']:.1f} us/msg")
    unit, plural = ("delivery", "deliveries") if name == "fanout" else ("msg", "msgs")
    return (f"{r[plural + '_per_s']:,.0f} {plural}/s, "
            f"broker {r['broker_cpu_us_per_' + unit]:.1f} us/{unit}")


async def server_properties(url: str, args: argparse.Namespace) -> dict[str, Any]:
    try:
        conn = await aio_pika.connect(url, timeout=args.connect_timeout)
    except Exception as exc:
        raise BenchError(f"cannot connect to {url}: {exc!r}") from exc
    try:
        props = getattr(conn.transport, "connection", None)
        props = dict(getattr(props, "server_properties", None) or {})
    finally:
        await conn.close()
    return {k: v.decode(errors="replace") if isinstance(v, bytes) else v
            for k, v in props.items() if k in ("product", "version", "platform")}


async def run_workloads(url: str, pid: int, args: argparse.Namespace,
                        label: str) -> dict[str, Any]:
    """All the workloads against one broker. SIGTERM cancels them like Ctrl-C does, so
    connections close, queues are deleted and consumer processes end before we exit."""
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    terminated: list[bool] = []

    def on_sigterm() -> None:
        terminated.append(True)
        main_task.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        return await _run_workloads(url, pid, args, label)
    except asyncio.CancelledError:
        if terminated:
            raise BenchError(f"{label}: stopped by SIGTERM") from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, exit_on_sigterm)


async def _run_workloads(url: str, pid: int, args: argparse.Namespace,
                         label: str) -> dict[str, Any]:
    props = await server_properties(url, args)
    comm = proc_comm(pid)
    if props.get("product") == "RabbitMQ" and comm != "beam.smp":
        raise BenchError(f"broker pid {pid} is {comm!r}: RabbitMQ's CPU is in beam.smp")
    out: dict[str, Any] = {"broker": {"url": url, "pid": pid, "process": comm, **props},
                           "client_event_loop": type(asyncio.get_running_loop()).__module__,
                           "loadavg_start": os.getloadavg()}
    if args.idle_seconds > 0:
        user0, sys0 = cpu_split(pid)
        await asyncio.sleep(args.idle_seconds)
        user1, sys1 = cpu_split(pid)
        out["broker_idle_cpu_percent"] = (user1 - user0 + sys1 - sys0) / args.idle_seconds * 100

    work_queue: str | None = None
    for name in args.workloads:
        run = Run(url, pid, args)
        limit = args.timeout
        if name == "latency":
            limit += args.latency_seconds + args.latency_warmup
        try:
            async with asyncio.timeout(limit):
                if name == "publish":
                    result = await w_publish(run)
                    if "consume" in args.workloads:  # consume drains and deletes its queue
                        work_queue = run.queues.pop()
                elif name == "consume":
                    if work_queue is None:
                        raise BenchError("consume needs the publish workload before it")
                    result = await w_consume(run, work_queue)
                elif name == "fanout":
                    result = await w_fanout(run)
                else:
                    result = await w_latency(run)
        except TimeoutError:
            raise BenchError(f"{label} {name}: not finished within {limit:g} s "
                             f"(progress {run.progress}); see --timeout") from None
        except BenchError as exc:
            raise BenchError(f"{label} {name}: {exc}") from None
        except Exception as exc:
            raise BenchError(f"{label} {name}: {exc!r} (progress {run.progress})") from exc
        finally:
            await run.close()
        out[name] = result
        print(f"amqp_bench: {label} {name}: {summary(name, result)}", file=sys.stderr)
    out["loadavg_end"] = os.getloadavg()
    return out


# -- brokers -----------------------------------------------------------------------


def tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def start_logbus(workdir: str, timeout: float) -> tuple[subprocess.Popen[bytes], str]:
    """`logbus serve` listening for AMQP (and HTTP) only; the AMQP address from its ready
    file, as start_broker() in kafka_bench.py does for Kafka."""
    ready = os.path.join(workdir, "ready.json")
    log = os.path.join(workdir, "broker.log")
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "logbus", "serve", "--data-dir", os.path.join(workdir, "data"),
             "--amqp", "tcp:0:interface=127.0.0.1", "--kafka", "off", "--mqtt", "off",
             "--http", "tcp:0:interface=127.0.0.1", "--ready-file", ready],
            stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
        )
    deadline = time.monotonic() + timeout
    while not os.path.exists(ready):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_logbus(proc)
            raise BenchError(f"logbus did not start (exit code {proc.returncode}); "
                             f"its log:\n{tail(log)}")
        time.sleep(0.05)
    with open(ready) as f:
        addresses = json.load(f)
    if "amqp" not in addresses:
        stop_logbus(proc)
        raise BenchError(
            f"logbus started but is not listening for AMQP (its ready file lists "
            f"{sorted(addresses)}): no AMQP gateway in this build. Its log:\n{tail(log)}")
    return proc, addresses["amqp"]


def stop_logbus(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def check_logbus(args: argparse.Namespace) -> None:
    """Start and stop logbus once: fail before a long RabbitMQ run if it cannot serve AMQP."""
    workdir = tempfile.mkdtemp(prefix="logbus-abench-", dir=args.dir)
    try:
        stop_logbus(start_logbus(workdir, args.start_timeout)[0])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def bench_rabbitmq(args: argparse.Namespace) -> dict[str, Any]:
    try:
        with RabbitMQ(args.dir, args.start_timeout) as rmq:
            out = uvloop.run(run_workloads(rmq.url, rmq.pid, args, "rabbitmq"))
            out["broker"]["nodename"] = rmq.nodename
            return out
    except RabbitMQError as exc:
        raise BenchError(f"rabbitmq: {exc}") from None


def bench_logbus(args: argparse.Namespace) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="logbus-abench-", dir=args.dir)
    proc = None
    try:
        proc, address = start_logbus(workdir, args.start_timeout)
        url = f"amqp://guest:guest@{address}/"
        return uvloop.run(run_workloads(url, proc.pid, args, "logbus"))
    finally:
        if proc is not None:
            stop_logbus(proc)
        shutil.rmtree(workdir, ignore_errors=True)


RATIO_KEYS = {
    "publish": ["msgs_per_s", "broker_cpu_us_per_msg"],
    "consume": ["msgs_per_s", "broker_cpu_us_per_msg"],
    "fanout": ["deliveries_per_s", "broker_cpu_us_per_delivery"],
    "latency": ["p50_ms", "p90_ms", "p99_ms", "max_ms", "broker_cpu_us_per_msg"],
}


def ratios(logbus: dict[str, Any], rabbit: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """logbus / rabbitmq for each headline figure."""
    out: dict[str, dict[str, float | None]] = {}
    for name, keys in RATIO_KEYS.items():
        if name not in logbus or name not in rabbit:
            continue
        lb, rb = logbus[name], rabbit[name]
        if name == "latency":
            lb, rb = {**lb, **lb["latency"]}, {**rb, **rb["latency"]}
        out[name] = {k: (lb[k] / rb[k] if rb[k] else None) for k in keys}
    return out


def exit_on_sigterm(_signum: int, _frame: Any) -> None:
    """Outside the event loop (a broker starting, say): exit through the finally blocks."""
    sys.exit(143)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=["rabbitmq", "logbus", "both"],
                    help="start the broker(s) here; otherwise give --url and --broker-pid")
    ap.add_argument("--url", help="AMQP URL of a broker started elsewhere")
    ap.add_argument("--broker-pid", type=int,
                    help="its pid, for CPU from /proc (RabbitMQ: the beam.smp process)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="comma-separated subset of %(default)s (consume needs publish)")
    ap.add_argument("--messages", type=int, default=50_000, help="publish and consume")
    ap.add_argument("--size", type=int, default=256, help="message body bytes")
    ap.add_argument("--window", type=int, default=1000, help="unconfirmed publishes in flight")
    ap.add_argument("--prefetch", type=int, default=500, help="consumer prefetch (basic.qos)")
    ap.add_argument("--fanout-messages", type=int, default=20_000)
    ap.add_argument("--fanout-queues", type=int, default=4)
    ap.add_argument("--latency-rate", type=float, default=2000.0, help="messages per second")
    ap.add_argument("--latency-seconds", type=float, default=10.0, help="measured, after warm-up")
    ap.add_argument("--latency-warmup", type=float, default=1.0,
                    help="seconds sent first, at the same rate, and not counted")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="seconds each workload may take (latency: plus its paced duration)")
    ap.add_argument("--connect-timeout", type=float, default=10.0)
    ap.add_argument("--start-timeout", type=float, default=90.0,
                    help="seconds a broker started here may take to accept connections")
    ap.add_argument("--idle-seconds", type=float, default=2.0,
                    help="broker CPU measured idle before the workloads")
    ap.add_argument("--dir", default=None, help="parent of the brokers' temp dirs")
    ap.add_argument("--note", default="", help="free text kept in the JSON (machine state...)")
    args = ap.parse_args()
    chosen = {w.strip() for w in args.workloads.split(",") if w.strip()}
    if chosen - set(WORKLOADS) or not chosen:
        ap.error(f"--workloads: choose from {','.join(WORKLOADS)}")
    args.workloads = [w for w in WORKLOADS if w in chosen]
    if args.target is None and (args.url is None or args.broker_pid is None):
        ap.error("give --target, or --url and --broker-pid")
    if args.target is not None and (args.url or args.broker_pid):
        ap.error("--url and --broker-pid are for a broker started elsewhere, not with --target")
    if args.size < LATENCY_HEAD.size and "latency" in args.workloads:
        ap.error(f"--size must be at least {LATENCY_HEAD.size} for the latency workload")
    signal.signal(signal.SIGTERM, exit_on_sigterm)

    out: dict[str, Any] = {
        "bench": "amqp_bench", "args": vars(args), "method": METHOD,
        "client": {"aio_pika": aio_pika.__version__, "uvloop": uvloop.__version__,
                   "python": sys.version.split()[0]},
        "machine": {"cpus": os.cpu_count()},
    }
    try:
        if args.target is None:
            out["external"] = uvloop.run(run_workloads(args.url, args.broker_pid, args, "broker"))
        else:
            if args.target == "both":
                check_logbus(args)
            if args.target in ("rabbitmq", "both"):
                out["rabbitmq"] = bench_rabbitmq(args)
            if args.target in ("logbus", "both"):
                out["logbus"] = bench_logbus(args)
            if args.target == "both":
                out["ratios_logbus_over_rabbitmq"] = ratios(out["logbus"], out["rabbitmq"])
    except BenchError as exc:
        raise SystemExit(f"amqp_bench: {exc}") from None
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
