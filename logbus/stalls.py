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
"""

from __future__ import annotations

import gc
import os
import time
from typing import IO, Any

ENV_PATH = "LOGBUS_STALL_TRACE"
ENV_MS = "LOGBUS_STALL_MS"


class StallTrace:
    def __init__(self, out: IO[str], threshold_ms: float) -> None:
        self.out = out
        self.threshold = int(threshold_ms * 1e6)
        self._gc_start = 0

    @classmethod
    def from_environment(cls) -> StallTrace | None:
        path = os.environ.get(ENV_PATH)
        if not path:
            return None
        return cls(open(path, "a", buffering=1), float(os.environ.get(ENV_MS, "1")))

    def note(self, start: int, kind: str, what: str, cpu_start: int = -1) -> None:
        """``start``: monotonic ns; ``cpu_start``: this thread's CPU ns then (-1: not
        known), so that a part the scheduler stretched shows as wall >> cpu."""
        took = time.monotonic_ns() - start
        if took >= self.threshold:
            cpu = (time.thread_time_ns() - cpu_start) / 1e6 if cpu_start >= 0 else -1.0
            self.out.write(f"{start / 1e9:.6f} {took / 1e6:.3f} {cpu:.3f} {kind} {what}\n")

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.monotonic_ns()
        else:
            self.note(self._gc_start, "gc", f"gen{info.get('generation')} collected={info.get('collected')}")

    def attach_gc(self) -> None:
        gc.callbacks.append(self.on_gc)
