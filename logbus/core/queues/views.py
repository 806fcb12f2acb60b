"""A queue's views: the ready entries each consumer filter takes (docs/decisions/0020).

A consumer with a filter (AMQP's ``x-filter-tag`` / ``x-filter-sql`` consumer arguments,
an MQTT shared subscription member's filter) takes from the ``View`` of its filter: a
heap of the ready seqs the filter takes, in the queue's take order (priority, then seq).
Consumers with the same filter share one view (``watch`` / ``unwatch`` count them).

- **Judged when ready.** An entry is judged for every view when it becomes ready
  (``Queue._push_ready``): at publish with the message in hand, on requeue, unstage and
  retry with the message from memory or the log.
- **The backlog.** A new view has to judge the entries ready when it is made. Doing that
  at once would stall the broker for seconds on a queue of millions, so the view keeps
  them as a backlog (their seqs, in seq order) that ``fill`` judges a bounded number at
  a time (the queue service calls it once per reactor turn). Until the backlog is done
  the view hands out nothing at or above its first unjudged seq, so the order holds.
- **Lazy removal.** An entry taken otherwise leaves the views' copies: a popped seq
  that is not ready any more is skipped. One taken through a view is marked removed in
  the queue's rows (``ready.py``) if it was never taken before; if it was (given back,
  it is in a main heap), it leaves that heap's copy behind: ``_stale`` counts such
  copies (so a queue without views never checks), and a heap holding more of them than
  ready entries (``slack`` beyond) is rebuilt.

A mixin of ``queue.Queue``: it uses the queue's entries, leases, rows and ready heaps.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar

if TYPE_CHECKING:
    from .queue import Entry
    from .ready import Entries, Rows


@dataclass(slots=True)
class View:
    """The ready entries one consumer filter takes: ``accept(entry, message or None)``
    judges an entry (the message when the caller has it at hand, else None)."""

    accept: Callable[[Entry, Any], bool]
    heap: list[tuple[int, int]] = field(default_factory=list)  # (-priority, seq); may hold stale seqs
    users: int = 1
    backlog: list[int] = field(default_factory=list)  # seqs ready when it was made, ascending
    judged: int = 0  # how many of the backlog are judged

    @property
    def filling(self) -> bool:
        return self.judged < len(self.backlog)


class Viewed:
    """The views of ``queue.Queue``."""

    slack: ClassVar[int] = 64  # stale seqs a heap may hold beyond what it must before it is rebuilt

    # the queue's own
    entries: Entries
    _objects: dict[int, Entry]
    _rows: dict[int, Rows]
    leases: dict[int, Any]
    views: dict[Any, View]
    ready_count: int
    _ready: dict[int, list[int]]
    _priorities: list[int]
    _stale: int
    _stale_seqs: set[int]

    def _object_ready(self, seq: int) -> bool:
        raise NotImplementedError  # the subclass's
    def _take_ready(self, seq: int) -> Entry:
        raise NotImplementedError  # the subclass's

    def watch(self, key: Any, accept: Callable[[Entry, Any], bool]) -> View:
        """The view of ``key`` (a consumer filter): made now, with every ready entry in
        its backlog (``fill``), or, if it exists, shared. ``unwatch`` once per ``watch``."""
        view = self.views.get(key)
        if view is not None:
            view.users += 1
            return view
        view = self.views[key] = View(accept)
        ready = [seq for seq in self._objects if self._object_ready(seq)]
        for rows in self._rows.values():
            ready += rows.ready_seqs()
        view.backlog = sorted(ready)
        return view

    def unwatch(self, key: Any) -> None:
        view = self.views.get(key)
        if view is not None:
            view.users -= 1
            if view.users <= 0:
                del self.views[key]

    def fill(self, view: View, budget: int) -> bool:
        """Judge up to ``budget`` entries of the view's backlog; True when none is left."""
        backlog, i = view.backlog, view.judged
        end = min(len(backlog), i + budget)
        heap, accept, entries = view.heap, view.accept, self.entries
        while i < end:
            seq = backlog[i]
            i += 1
            if self._is_ready(seq):
                e = entries[seq]  # (a copy, if never taken)
                if accept(e, None):
                    heapq.heappush(heap, (-e.priority, seq))
        view.judged = i
        if i < len(backlog):
            return False
        view.backlog, view.judged = [], 0
        return True

    def _judge(self, entry: Entry, message: Any) -> None:
        """``entry`` became ready: into every view whose filter takes it."""
        for view in self.views.values():
            if view.accept(entry, message):
                vh = view.heap
                heapq.heappush(vh, (-entry.priority, entry.seq))
                if len(vh) > 2 * self.ready_count + self.slack:  # mostly seqs taken by others: drop them
                    vh[:] = [item for item in vh if self._is_ready(item[1])]
                    heapq.heapify(vh)

    def _is_ready(self, seq: int) -> bool:
        return self._object_ready(seq) or (seq not in self._objects and self.entries.locate(seq) is not None)

    def _pop_view(self, view: View) -> Entry | None:
        if self._stale > self.slack and self._stale > self.ready_count:
            self._rebuild()
        heap = view.heap
        limit = view.backlog[view.judged] if view.filling else None  # the first seq not judged yet
        while heap:
            seq = heap[0][1]
            if not self._is_ready(seq):
                heapq.heappop(heap)  # taken or gone meanwhile
                continue
            if limit is not None and seq >= limit:
                return None  # what comes first may be in the backlog still
            heapq.heappop(heap)
            return self._take_ready(seq)
        return None

    def _rebuild(self) -> None:
        """The ready heaps again, without the seqs taken through views."""
        ready: dict[int, list[int]] = {pri: [] for pri in self._priorities}
        for seq, e in self._objects.items():
            if self._object_ready(seq):
                ready[e.priority].append(seq)
        for heap in ready.values():
            heapq.heapify(heap)
        self._ready = ready
        self._stale = 0
        self._stale_seqs.clear()
