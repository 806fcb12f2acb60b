"""The stall trace (logbus/stalls.py) and the reactor that writes it."""

from __future__ import annotations

import gc
import io
import socket
import time

from logbus.reactor import TracingReactor
from logbus.stalls import StallTrace


def test_a_part_over_the_threshold_is_written_with_its_cpu_time() -> None:
    out = io.StringIO()
    trace = StallTrace(out, threshold_ms=0)
    start, cpu = time.monotonic_ns(), time.thread_time_ns()
    sum(range(10_000))
    trace.note(start, "io", "Server/0x1", cpu)
    stamp, took, used, kind, what = out.getvalue().split()
    assert float(stamp) == start / 1e9 or abs(float(stamp) - start / 1e9) < 1e-5
    assert float(took) > 0 and float(used) >= 0
    assert (kind, what) == ("io", "Server/0x1")


def test_a_part_under_the_threshold_is_not_written() -> None:
    out = io.StringIO()
    trace = StallTrace(out, threshold_ms=60_000)
    trace.note(time.monotonic_ns(), "io", "Server/0x1", time.thread_time_ns())
    assert out.getvalue() == ""


def test_collections_are_timed() -> None:
    out = io.StringIO()
    trace = StallTrace(out, threshold_ms=0)
    trace.attach_gc()
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(trace.on_gc)
    assert any(line.split()[3] == "gc" for line in out.getvalue().splitlines())


def test_timed_calls_are_traced_beside_cancelled_ones() -> None:
    """A cancelled call stays in the reactor's heap without its function until the heap
    is cleaned: the trace must skip it (it once raised on every turn, and the reactor
    spun logging the error)."""
    out = io.StringIO()
    reactor = TracingReactor(StallTrace(out, threshold_ms=0))
    try:
        clock = [1000.0]
        reactor.seconds = lambda: clock[0]  # type: ignore[method-assign]
        ran: list[int] = []
        later = reactor.callLater(10, ran.append, 2)
        reactor.runUntilCurrent()  # not due: now in the heap
        later.cancel()
        reactor.callLater(10, ran.append, 1)
        clock[0] += 10
        reactor.runUntilCurrent()
        assert ran == [1]
        assert "timed list.append" in out.getvalue()
    finally:
        gc.callbacks.remove(reactor._trace.on_gc)
        reactor._poller.close()


def test_io_events_are_traced() -> None:
    out = io.StringIO()
    reactor = TracingReactor(StallTrace(out, threshold_ms=0))
    a, b = socket.socketpair()
    try:
        got: list[bytes] = []

        class Reader:
            def fileno(self) -> int:
                return a.fileno()

            def doRead(self) -> None:
                got.append(a.recv(10))

            def logPrefix(self) -> str:
                return "Reader"

            def connectionLost(self, reason: object) -> None:
                pass

        reader = Reader()
        reactor.addReader(reader)
        b.send(b"x")
        reactor.doPoll(1.0)
        reactor.removeReader(reader)
        assert got == [b"x"]
        assert " io Reader/0x1" in out.getvalue()
    finally:
        a.close()
        b.close()
        gc.callbacks.remove(reactor._trace.on_gc)
        reactor._poller.close()


def test_sampled_stacks_are_written_under_a_slow_part() -> None:
    out = io.StringIO()
    trace = StallTrace(out, threshold_ms=0)
    trace.start_sampling(100)
    try:
        start, cpu = time.monotonic_ns(), time.thread_time_ns()
        while not trace.samples or time.monotonic_ns() - start < 20_000_000:
            busy_for_the_sampler()
        trace.note(start, "io", "Server/0x1", cpu)
    finally:
        trace.stop_sampling()
    head, *stacks = out.getvalue().splitlines()
    assert head.split()[3:] == ["io", "Server/0x1"]
    assert stacks and all(line.startswith("    ") for line in stacks)
    assert any("busy_for_the_sampler" in line for line in stacks)


def busy_for_the_sampler() -> int:
    return sum(range(1000))
