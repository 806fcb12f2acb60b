"""A minimal real event loop for core tests: it runs the log's ``callLater`` and
``callFromThread`` work in the test's thread, so a test can append, wait for the
flusher thread's durability callbacks and assert, without a global Twisted reactor.
``ReaderLoop`` also watches readers (``addReader``), as the log's io_uring sync ring needs."""

from __future__ import annotations

import heapq
import itertools
import queue
import select
import time
from typing import Any, Callable


class Timer:
    """What callLater returns: cancel() and active(), like Twisted's DelayedCall."""

    def __init__(self, f: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._f, self._args = f, args
        self._state = "pending"

    def fire(self) -> None:
        if self._state == "pending":
            self._state = "called"
            self._f(*self._args)

    def cancel(self) -> None:
        if self._state != "pending":
            raise RuntimeError(f"timer already {self._state}")
        self._state = "cancelled"

    def active(self) -> bool:
        return self._state == "pending"


class LoopReactor:
    def __init__(self) -> None:
        self._timers: list[tuple[float, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._from_threads: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
        self._skew = 0.0  # added by advance(): the loop's clock runs ahead of the machine's

    def seconds(self) -> float:
        return time.monotonic() + self._skew

    def advance(self, seconds: float) -> None:
        """Move the loop's clock forward: what was due within ``seconds`` is due now (a test
        of a delay waits for no wall clock, so it cannot race a busy machine)."""
        self._skew += seconds

    def callLater(self, delay: float, f: Callable[..., Any], *args: Any) -> "Timer":
        timer = Timer(f, args)
        heapq.heappush(self._timers, (self.seconds() + delay, next(self._seq), timer.fire, ()))
        return timer

    def callFromThread(self, f: Callable[..., Any], *args: Any) -> None:
        self._from_threads.put((f, args))

    def run_once(self, block: float = 0.0) -> bool:
        """Run what is due; wait up to ``block`` seconds for thread work. True if ran any."""
        ran = False
        now = self.seconds()
        while self._timers and self._timers[0][0] <= now:
            _, _, f, args = heapq.heappop(self._timers)
            f(*args)
            ran = True
        try:
            f, args = self._from_threads.get(timeout=block) if block and not ran else self._from_threads.get_nowait()
        except queue.Empty:
            return ran
        f(*args)
        return True

    def run_until(self, done: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError("condition not reached in time")
            self.run_once(block=0.01)

    def wait(self, d: Any, timeout: float = 10.0) -> Any:
        """Run until Deferred ``d`` fires; return its result (or raise its failure)."""
        out: list[Any] = []
        d.addBoth(out.append)
        self.run_until(lambda: bool(out), timeout)
        from twisted.python.failure import Failure

        if isinstance(out[0], Failure):
            out[0].raiseException()
        return out[0]


class ReaderLoop(LoopReactor):
    """A LoopReactor that also calls ``doRead`` of readers whose descriptor is readable."""

    def __init__(self) -> None:
        super().__init__()
        self._readers: list[Any] = []

    def addReader(self, reader: Any) -> None:
        self._readers.append(reader)

    def removeReader(self, reader: Any) -> None:
        self._readers.remove(reader)

    def run_once(self, block: float = 0.0) -> bool:
        ready = select.select(self._readers, [], [], 0)[0] if self._readers else []
        for r in ready:
            r.doRead()
        return super().run_once(0.0 if ready else block) or bool(ready)
