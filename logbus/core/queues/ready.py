"""A queue's entries that are ready and were never taken, as rows of arrays (decision 0027).

Theory of operation. A message waiting in a queue costs the queue one entry until a
consumer takes it. As a Python object (``queue.Entry``, with its ints and its slots in a
dict and a heap) an entry costs about 180 bytes of small objects, which CPython's
allocator keeps in 1 MiB arenas; an arena goes back to the system only once every object
in it is gone, and the few objects made during a burst that live on (a session's counter,
a timer) are in nearly every arena the burst used: a million queued messages, drained,
left ~180 MB held for good. So a queue keeps the entries it was given and has not handed
out yet as rows of a few arrays (``Rows``, one per priority): no Python object per entry,
and buffers large enough that malloc takes them from, and gives them back to, its heap.

Layout: one ``array`` per field, row ``i`` of each is one entry.

    seqs        int64   the entry's seq; ascending (new entries get the next seq)
    topics      uint32  an index into ``names``, the topics this ``Rows`` has seen
    partitions  uint32
    offsets     int64
    sizes       int64   the message's size; ``REMOVED`` (-1): the row is no entry any more
    expires     int64   epoch ms after which it is dead; 0: never
    deliveries  uint32  a restored or retried entry may have been delivered before

Rows below ``head`` are taken. Entries leave at the head, in seq order (the queue's
take order within a priority); one taken out of order (through a consumer filter's view)
or dropped is marked ``REMOVED`` where it is and skipped when the head reaches it. A seq
is found by bisecting ``seqs``. The arrays give their memory back as rows go: emptied
when the head passes the last row (their buffers freed), the taken prefix cut off once it
is more than half of them and ``CUT_ROWS`` rows, and the removed rows squeezed out once
they outnumber the entries left (``slack`` beyond).

An entry taken becomes an ``Entry`` (``pop_head``, ``take``); the queue keeps it as an
object from then on (leased, given back, staged: ``queue.py``). ``Entries`` is the
mapping of seq to entry that the queue shows its callers: its objects, and an ``Entry``
made on the spot for a row (a copy: changing it changes nothing).
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from typing import ClassVar

from .entry import Entry

REMOVED = -1  # the size of a row that is no entry any more
CUT_ROWS = 4096  # taken rows worth cutting off the arrays' front


class Rows:
    """The ready entries of one priority not taken yet, in seq order (see the module)."""

    __slots__ = ("priority", "seqs", "topics", "partitions", "offsets", "sizes", "expires", "deliveries",
                 "names", "_name_index", "head", "live", "removed")
    slack: ClassVar[int] = 64  # removed rows beyond the live ones before they are squeezed out

    def __init__(self, priority: int) -> None:
        self.priority = priority
        self.seqs = array("q")
        self.topics = array("I")
        self.partitions = array("I")
        self.offsets = array("q")
        self.sizes = array("q")
        self.expires = array("q")
        self.deliveries = array("I")
        self.names: list[str] = []
        self._name_index: dict[str, int] = {}
        self.head = 0  # the first row not taken
        self.live = 0  # rows from ``head`` that are entries
        self.removed = 0  # rows from ``head`` marked REMOVED

    def append(self, seq: int, topic: str, partition: int, offset: int, size: int, expires_ms: int,
               deliveries: int) -> None:
        """A new entry: ``seq`` above every row's."""
        ix = self._name_index.get(topic)
        if ix is None:
            ix = self._name_index[topic] = len(self.names)
            self.names.append(topic)
        self.seqs.append(seq)
        self.topics.append(ix)
        self.partitions.append(partition)
        self.offsets.append(offset)
        self.sizes.append(size)
        self.expires.append(expires_ms)
        self.deliveries.append(deliveries)
        self.live += 1

    def first(self) -> int:
        """The row of the first entry (-1: none), the removed rows before it passed."""
        if not self.live:
            return -1
        row, sizes = self.head, self.sizes
        while sizes[row] == REMOVED:
            row += 1
        if row != self.head:
            self.removed -= row - self.head
            self.head = row
            self._cut()
        return self.head

    def entry(self, row: int) -> Entry:
        """The entry of ``row``, as an object (a copy)."""
        return Entry(self.seqs[row], self.names[self.topics[row]], self.partitions[row], self.offsets[row],
                           self.sizes[row], self.priority, self.expires[row], self.deliveries[row], 0)

    def pop_head(self) -> Entry:
        """Take the first entry (there is one: ``first() >= 0``)."""
        row = self.first()
        entry = self.entry(row)
        self.head = row + 1
        self.live -= 1
        self._shrink()
        return entry

    def find(self, seq: int) -> int:
        """The row of entry ``seq`` (-1: none)."""
        if not self.live:
            return -1
        seqs = self.seqs
        row = bisect_left(seqs, seq, self.head)
        if row < len(seqs) and seqs[row] == seq and self.sizes[row] != REMOVED:
            return row
        return -1

    def take(self, row: int) -> Entry:
        """Take the entry of ``row`` (from ``find`` or ``rows``), out of order."""
        entry = self.entry(row)
        self.sizes[row] = REMOVED
        self.live -= 1
        self.removed += 1
        self._shrink()
        return entry

    def rows(self) -> Iterator[int]:
        """The rows of the entries, in seq order (none may be taken meanwhile)."""
        sizes = self.sizes
        for row in range(self.head, len(sizes)):
            if sizes[row] != REMOVED:
                yield row

    def ready_seqs(self) -> list[int]:
        seqs = self.seqs
        return [seqs[row] for row in self.rows()]

    def _shrink(self) -> None:
        if not self.live:
            self.clear()
        elif self.removed > self.live + self.slack:
            self._squeeze()
        else:
            self._cut()

    def _cut(self) -> None:
        """The taken rows off the front, once they are more than half."""
        if self.head > CUT_ROWS and 2 * self.head > len(self.seqs):
            for col in self._columns():
                del col[: self.head]
            self.head = 0

    def _columns(self) -> tuple[array[int], ...]:
        return (self.seqs, self.topics, self.partitions, self.offsets, self.sizes, self.expires, self.deliveries)

    def _squeeze(self) -> None:
        """The arrays again, with only the entries' rows."""
        keep = list(self.rows())
        for col in self._columns():
            col[:] = array(col.typecode, [col[row] for row in keep])
        self.head = self.removed = 0

    def clear(self) -> None:
        """No entry left: the arrays give their buffers back."""
        for col in self._columns():
            del col[:]
        self.names.clear()
        self._name_index.clear()
        self.head = self.live = self.removed = 0


class Entries:
    """A queue's unsettled entries by seq, read-only: ``objects`` (taken, given back,
    staged) and the entries of ``rows`` (priority -> Rows), made objects on the spot.
    Iterated in seq order."""

    __slots__ = ("objects", "rows")

    def __init__(self, objects: dict[int, Entry], rows: dict[int, Rows]) -> None:
        self.objects = objects
        self.rows = rows

    def locate(self, seq: int) -> tuple[Rows, int] | None:
        """The rows and row holding entry ``seq`` (None: not in rows)."""
        for rows in self.rows.values():
            row = rows.find(seq)
            if row >= 0:
                return rows, row
        return None

    def get(self, seq: int) -> Entry | None:
        e = self.objects.get(seq)
        if e is not None:
            return e
        found = self.locate(seq)
        return None if found is None else found[0].entry(found[1])

    def __getitem__(self, seq: int) -> Entry:
        e = self.get(seq)
        if e is None:
            raise KeyError(seq)
        return e

    def __contains__(self, seq: object) -> bool:
        return seq in self.objects or (isinstance(seq, int) and self.locate(seq) is not None)

    def __len__(self) -> int:
        return len(self.objects) + sum(rows.live for rows in self.rows.values())

    def __bool__(self) -> bool:
        return bool(self.objects) or any(rows.live for rows in self.rows.values())

    def values(self) -> Iterator[Entry]:
        """Every entry, in seq order."""
        runs: list[Iterator[tuple[int, Entry]]] = [iter(sorted(self.objects.items()))]
        runs += [_entries_of(rows) for rows in self.rows.values() if rows.live]
        for _, e in heapq.merge(*runs, key=lambda item: item[0]):
            yield e

    def items(self) -> Iterator[tuple[int, Entry]]:
        for e in self.values():
            yield e.seq, e

    def __iter__(self) -> Iterator[int]:
        for e in self.values():
            yield e.seq


def _entries_of(rows: Rows) -> Iterator[tuple[int, Entry]]:
    for row in list(rows.rows()):
        yield rows.seqs[row], rows.entry(row)
