"""Memory freed by clients given back to the system, without a restart (decision 0024).

Theory of operation. `serve` keeps freed memory in the process on purpose
(``server.tune_malloc``, decision 0005: a 512 MiB trim threshold and a 64 MiB mmap
threshold, so ~1 MiB produce buffers do not fault in fresh pages each time). The price
was that memory freed in the middle of glibc's heap is never returned: 8 abandoned
90 MiB AMQP bodies left the broker at 341 MB of RSS against 77 MB idle, and the memory
alarm, which measures RSS, could stay set with nothing left to free.

``MemoryReturn.tick()`` runs once a second (``server.py``). It reads how much of
malloc's heaps is free (``mallinfo2``: ``fordblks``, in every arena) and, when that is
at least ``min_free`` bytes and a quarter of the resident set, calls ``malloc_trim(0)``,
which hands whole free pages back to the kernel wherever they are in the heap
(``madvise(MADV_DONTNEED)``), not only at its top. So a broker under steady load, whose
free heap is the working set of its next requests, keeps it (decision 0005's gain), and
a broker whose clients went away returns it within a second or two. At most one trim
per ``interval`` seconds, unless the memory alarm is set, when every tick may trim.

Python's own garbage: objects in reference cycles wait for a collection, which
``server.tune_gc`` makes rare (``gc.freeze``, a young threshold of 10,000). While the
memory alarm is set, a full collection runs first (at most once per ``interval``): what
it frees is then trimmed in the same tick. Gateways free what a closed connection held
(unfinished frames and bodies) when it closes, without waiting for a collection.

The cost is measured in decision 0024; ``mallinfo2`` walks malloc's free lists, a trim
its free chunks. Where the C library is not glibc (no ``mallinfo2``), nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

MIN_FREE = 64 << 20  # bytes free in malloc's heaps worth a trim
INTERVAL = 10.0  # seconds between two trims (or full collections) without the memory alarm


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


class Allocator:
    """glibc's ``mallinfo2`` and ``malloc_trim``; ``Allocator.load()`` is None elsewhere."""

    def __init__(self, libc: Any) -> None:
        self._mallinfo2 = libc.mallinfo2
        self._mallinfo2.restype = _Mallinfo2
        self._trim = libc.malloc_trim
        self._trim.argtypes = [ctypes.c_size_t]
        self._trim.restype = ctypes.c_int

    @classmethod
    def load(cls) -> Allocator | None:
        name = ctypes.util.find_library("c")
        if name is None:
            return None
        try:
            return cls(ctypes.CDLL(name))
        except (OSError, AttributeError):  # not glibc, or glibc before 2.33
            return None

    def free_bytes(self) -> int:
        """Bytes free in malloc's heaps (every arena), held by the process."""
        return int(self._mallinfo2().fordblks)

    def trim(self) -> None:
        self._trim(0)


class MemoryReturn:
    """See the module's docstring. ``resident`` reads the RSS now, ``memory_alarm`` says
    whether the memory alarm is set (core/pressure.py)."""

    def __init__(self, allocator: Allocator, resident: Callable[[], int], memory_alarm: Callable[[], bool], *,
                 min_free: int = MIN_FREE, interval: float = INTERVAL,
                 clock: Callable[[], float] = time.monotonic, count: Callable[[str, float], None] | None = None,
                 ) -> None:
        self.allocator = allocator
        self.resident = resident
        self.memory_alarm = memory_alarm
        self.min_free = min_free
        self.interval = interval
        self.clock = clock
        self.count = count or (lambda what, amount: None)  # ("trims" | "returned_bytes" | "collections", amount)
        self._last_trim = self._last_collect = -interval

    def tick(self) -> None:
        now = self.clock()
        alarm = self.memory_alarm()
        if alarm and now - self._last_collect >= self.interval:
            self._last_collect = now
            started = time.perf_counter()
            found = gc.collect()
            self.count("collections", 1)
            log.debug("memory alarm: full collection, %d objects unreachable, %.1f ms", found,
                      (time.perf_counter() - started) * 1000)
        if not alarm and now - self._last_trim < self.interval:
            return
        free = self.allocator.free_bytes()
        rss = self.resident()
        if free < self.min_free or free * 4 < rss:
            return
        self._last_trim = now
        started = time.perf_counter()
        self.allocator.trim()
        returned = max(0, rss - self.resident())
        self.count("trims", 1)
        self.count("returned_bytes", returned)
        log.log(logging.INFO if returned >= self.min_free else logging.DEBUG,
                "memory: %d bytes of malloc's heaps were free, %d returned to the system (%.1f ms)", free,
                returned, (time.perf_counter() - started) * 1000)
