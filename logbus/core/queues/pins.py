"""Pins: the lowest log offset still pointed at, per (topic, partition), kept up to date.

Retention must keep every segment a queue entry or a pending timer points into
(``Broker.housekeeping``). Finding that offset by walking every entry and every timer
costs O(entries) per housekeeping pass, on the reactor, and while retention is held
back by one old entry it is paid on every pass. Instead each holder (a queue service's
queues, the timer index) counts what it points at as entries come and go, and a pass
asks ``floor`` once per partition: O(partitions), whatever the number of entries.

Theory of operation. Per (topic, partition) a ``_Partition`` keeps ``counts``, how
many holders point at each key (an offset, or with ``shift`` a block of ``1 << shift``
offsets), and ``heap``, a min-heap of keys that were counted, cleaned lazily: ``floor``
pops the keys no longer counted off its top. A key is pushed when its count goes from
0 to 1, so adding costs a dict update and, for a new key, a push (O(1) for offsets that
only grow, the common case). Removing costs a dict update; the heap is rebuilt from the
counts when it holds more than twice as many keys as are counted, so its size stays
bounded by what is pinned, not by what went through (a stuck lowest entry does not
make it grow with traffic). With ``shift``, ``floor`` is the start of the lowest
block: never above the true lowest offset (retention may keep a little more, never
less). The slow, obvious version is ``min`` over a multiset; tests/unit/test_pins.py
checks this one against it.
"""

from __future__ import annotations

import heapq

_COMPACT_SLACK = 64  # heap keys beyond 2x the counted ones before a rebuild
# queue entries' pins count blocks of 64 offsets: a key per 64 offsets, not per entry
# (a million queued messages would hold a million ints and dict slots; decision 0027)
QUEUE_SHIFT = 6


class _Partition:
    __slots__ = ("counts", "heap")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.heap: list[int] = []


class OffsetPins:
    """What one holder points at in the log. ``shift``: count blocks of ``1 << shift``
    offsets, not offsets (less memory for holders with many pins, such as timers)."""

    def __init__(self, shift: int = 0) -> None:
        self.shift = shift
        self._parts: dict[tuple[str, int], _Partition] = {}

    def add(self, topic: str, partition: int, offset: int) -> None:
        """One more pin at ``offset``; a negative one (an entry whose record is gone,
        ``queue.GONE``) pins nothing."""
        if offset < 0:
            return
        part = self._parts.get((topic, partition))
        if part is None:
            part = self._parts[(topic, partition)] = _Partition()
        shift = self.shift
        key = offset >> shift if shift else offset  # (``>> 0`` makes a new int: one per pin)
        counts = part.counts
        n = counts.get(key)
        if n is None:
            counts[key] = 1
            heapq.heappush(part.heap, key)
        else:
            counts[key] = n + 1

    def remove(self, topic: str, partition: int, offset: int) -> None:
        """One pin at ``offset`` is gone (one not counted is ignored)."""
        part = self._parts.get((topic, partition))
        if part is None:
            return
        shift = self.shift
        key = offset >> shift if shift else offset
        counts = part.counts
        n = counts.get(key)
        if n is None:
            return
        if n > 1:
            counts[key] = n - 1
            return
        del counts[key]
        if not counts:
            del self._parts[(topic, partition)]
        elif len(part.heap) > 2 * len(counts) + _COMPACT_SLACK:
            part.heap = list(counts)
            heapq.heapify(part.heap)

    def floor(self, topic: str, partition: int) -> int | None:
        """The lowest offset pinned in (topic, partition) (None: nothing is)."""
        part = self._parts.get((topic, partition))
        if part is None:
            return None
        heap, counts = part.heap, part.counts
        while heap[0] not in counts:
            heapq.heappop(heap)
        return heap[0] << self.shift

    def forget_topic(self, topic: str) -> None:
        """A deleted topic: nothing pins it any more."""
        for key in [k for k in self._parts if k[0] == topic]:
            del self._parts[key]

    def partitions(self) -> list[tuple[str, int]]:
        """The (topic, partition) pairs with a pin."""
        return list(self._parts)

    def clear(self) -> None:
        self._parts.clear()


def lowest(*floors: int | None) -> int | None:
    """The lowest of some floors (None: none pins anything)."""
    out: int | None = None
    for f in floors:
        if f is not None and (out is None or f < out):
            out = f
    return out
