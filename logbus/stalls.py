"""Where the reactor thread spends its milliseconds: a diagnostic, off unless the
environment asks for it.

``LOGBUS_STALL_TRACE=/path/file`` makes ``logbus serve`` write one line per reactor
turn part that held the thread longer than ``LOGBUS_STALL_MS`` (default 1): an I/O
event (the descriptor's class), the timed calls run together (their functions), a
garbage collection (its generation), each with its start on CLOCK_MONOTONIC (seconds),
its duration and the thread's CPU time in it (milliseconds; -1 where not taken): a part
that took far more time than CPU waited for a core or for a lock. The latency benches stamp messages with the same clock, so a
slow delivery can be matched with what the broker was doing then.

    LOGBUS_STALL_TRACE=/tmp/stalls.txt LOGBUS_STALL_MS=1 logbus serve ...

``LOGBUS_STALL_SAMPLE_US=N`` also samples the reactor thread's Python stack every N µs
of wall-clock time (SIGALRM; the CPU-time timers count in scheduler ticks, 4 ms here);
under each line of a part over the threshold, the stacks sampled during it follow,
indented, with their counts (innermost function last). A call blocked in the kernel
(a write, a lock) is sampled where it was made; a thread that waited for a core is
sampled where it was when it resumed. Each sample costs a few µs and wakes the thread.
"""

from __future__ import annotations

import collections
import gc
import os
import signal
import time
from types import FrameType
from typing import IO, Any

ENV_PATH = "LOGBUS_STALL_TRACE"
ENV_MS = "LOGBUS_STALL_MS"
ENV_SAMPLE = "LOGBUS_STALL_SAMPLE_US"
STACK_DEPTH = 12  # innermost frames kept per sample


class StallTrace:
    def __init__(self, out: IO[str], threshold_ms: float) -> None:
        self.out = out
        self.threshold = int(threshold_ms * 1e6)
        self._gc_start = 0
        # (monotonic ns, (code, line, code, line, ...) innermost first): formatted only
        # when written, so that a sample costs little more than the walk
        self.samples: collections.deque[tuple[int, tuple[Any, ...]]] = collections.deque(maxlen=20_000)

    @classmethod
    def from_environment(cls) -> StallTrace | None:
        path = os.environ.get(ENV_PATH)
        if not path:
            return None
        trace = cls(open(path, "a", buffering=1), float(os.environ.get(ENV_MS, "1")))
        every = int(os.environ.get(ENV_SAMPLE, "0"))
        if every > 0:
            trace.start_sampling(every)
        return trace

    def start_sampling(self, every_us: int) -> None:
        """Sample the main thread's stack every ``every_us`` µs of wall-clock time."""
        signal.signal(signal.SIGALRM, self._sample)
        signal.setitimer(signal.ITIMER_REAL, every_us / 1e6, every_us / 1e6)

    def stop_sampling(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    def _sample(self, _signum: int, frame: FrameType | None) -> None:
        stack: list[Any] = []
        while frame is not None and len(stack) < 2 * STACK_DEPTH:
            stack += (frame.f_code, frame.f_lineno)
            frame = frame.f_back
        self.samples.append((time.monotonic_ns(), tuple(stack)))

    def note(self, start: int, kind: str, what: str, cpu_start: int = -1) -> None:
        """``start``: monotonic ns; ``cpu_start``: this thread's CPU ns then (-1: not
        known), so that a part the scheduler stretched shows as wall >> cpu."""
        took = time.monotonic_ns() - start
        if took >= self.threshold:
            cpu = (time.thread_time_ns() - cpu_start) / 1e6 if cpu_start >= 0 else -1.0
            self.out.write(f"{start / 1e9:.6f} {took / 1e6:.3f} {cpu:.3f} {kind} {what}\n")
            if self.samples:
                self._write_samples(start, start + took)

    def _write_samples(self, start: int, end: int) -> None:
        stacks: collections.Counter[tuple[Any, ...]] = collections.Counter()
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])  # no sample while they are read
        try:
            for t, names in reversed(self.samples):  # newest first, back to the part's start
                if t < start:
                    break
                if t <= end:
                    stacks[names] += 1
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
        for stack, count in stacks.most_common():
            names = [f"{stack[i].co_qualname}:{stack[i + 1]}" for i in range(len(stack) - 2, -1, -2)]
            self.out.write(f"    {count} {';'.join(names)}\n")

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.monotonic_ns()
        else:
            self.note(self._gc_start, "gc", f"gen{info.get('generation')} collected={info.get('collected')}")

    def attach_gc(self) -> None:
        gc.callbacks.append(self.on_gc)
