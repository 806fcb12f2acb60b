"""What a queue keeps in memory (core/queues/queue.py, ``Queue._emptied``; ready.py): an
offline MQTT session's queue that held 1,000 entries and was then drained holds no more
than a new queue, not the tables its dicts or the arrays its rows grew to; and a queued
message makes no Python object of its own (issue 30, decision 0027)."""

from __future__ import annotations

import sys
import tracemalloc

from logbus.core.queues.queue import FREE_TABLES_AFTER, Outcome, Queue
from logbus.retry.policy import RetryPolicy


def fill(q: Queue, n: int) -> None:
    for i in range(n):
        entry, _ = q.publish("t", 0, i, 100)
        assert entry is not None


def dict_bytes(q: Queue) -> int:
    """The queue's dicts and its rows' arrays, with the buffers they hold."""
    arrays = sum(sys.getsizeof(col) for rows in q._rows.values() for col in rows._columns())
    return sys.getsizeof(q._objects) + sys.getsizeof(q.leases) + arrays


def test_a_drained_queue_gives_back_its_tables() -> None:
    q = Queue("q")
    empty = dict_bytes(q)
    fill(q, 1000)
    assert dict_bytes(q) > empty + 1000 * 40  # the rows' arrays at their largest
    taken = []
    for _ in range(1000):
        d, _ = q.take("owner")
        assert d is not None
        taken.append(d)
    assert dict_bytes(q) > 30_000  # both tables at their largest
    for d in taken:
        q.settle(d, Outcome.ACK)
    assert not q.entries and not q.leases and q.next_deadline == 0
    assert dict_bytes(q) == empty and not q._rows and not q._ready and not q._priorities
    assert q.floor == q.next_seq == 1000 and q.settled(999)


def test_dropped_and_retried_entries_empty_it_too() -> None:
    q = Queue("q", retry=RetryPolicy(levels_ms=(1000,)))
    fill(q, 200)
    q.drop(list(q.entries.values())[:100])
    for _ in range(100):
        d, _ = q.take("owner", deadline_ms=5)
        assert d is not None
    returned = q.lapse(10)  # each lease lapses: scheduled for a retry, out of the queue
    assert len(returned.scheduled) == 100
    assert not q.entries and not q._rows and dict_bytes(q) == 2 * sys.getsizeof({})


def test_a_queue_emptied_after_each_message_keeps_its_tables() -> None:
    """Freed at most once per FREE_TABLES_AFTER entries, not per message; the dicts are the
    queue's own throughout (cleared, not made anew in the middle of a drain)."""
    q = Queue("q")
    objects, leases = q._objects, q.leases
    frees = 0
    for i in range(10 * FREE_TABLES_AFTER):
        q.publish("t", 0, i, 100)
        d, _ = q.take("owner")
        assert d is not None
        table = sys.getsizeof(q._objects)
        q.ack(d)
        frees += sys.getsizeof(q._objects) < table
    assert 1 <= frees <= 10
    assert q._objects is objects and q.leases is leases


def test_a_queued_message_makes_no_object() -> None:
    """10,000 messages queued: the queue's rows grow, a handful of buffers, not an
    object (an Entry, its ints) per message, which would pin the allocator's arenas."""
    q = Queue("q")
    fill(q, 10)  # the rows made
    offsets = list(range(10**9, 10**9 + 10_000))  # (the caller's ints, made before)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i in offsets:
            q.publish("t", 0, i, 100, expires_ms=10**12 + i)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(max(0, d.count_diff) for d in after.compare_to(before, "filename"))
    assert q.message_count == 10_010
    assert grown < 100


def test_entries_taken_and_given_back_are_objects_until_settled() -> None:
    q = Queue("q")
    fill(q, 300)
    leased = [q.take("owner")[0] for _ in range(200)]
    assert len(q._objects) == 200 and q._rows[0].live == 100
    q.release("owner")  # back to ready, in their old places: objects in the heap
    assert q.message_count == 300 and len(q._objects) == 200
    order = [q.take("other")[0] for _ in range(300)]
    assert [d.entry.seq for d in order if d is not None] == list(range(300))
    assert [d.delivery for d in order if d is not None] == [2] * 200 + [1] * 100
    for d in order:
        assert d is not None
        q.settle(d, Outcome.ACK)
    assert not q.entries and not q._objects and not q._rows and len(leased) == 200
