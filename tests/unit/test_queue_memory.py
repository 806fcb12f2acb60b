"""What a drained queue keeps in memory (core/queues/queue.py, ``Queue._emptied``): an
offline MQTT session's queue that held 1,000 entries and was then drained holds no more
than a new queue, not the tables its dicts grew to (issue 30)."""

from __future__ import annotations

import sys

from logbus.core.queues.queue import FREE_TABLES_AFTER, Outcome, Queue, receipt
from logbus.retry.policy import RetryPolicy


def fill(q: Queue, n: int) -> None:
    for i in range(n):
        entry, _ = q.publish("t", 0, i, 100)
        assert entry is not None


def dict_bytes(q: Queue) -> int:
    return sys.getsizeof(q.entries) + sys.getsizeof(q.leases)


def test_a_drained_queue_gives_back_its_tables() -> None:
    q = Queue("q")
    empty = dict_bytes(q)
    fill(q, 1000)
    taken = []
    for _ in range(1000):
        entry, _ = q.take("owner")
        assert entry is not None
        taken.append(receipt(entry))
    assert dict_bytes(q) > 30_000  # both tables at their largest
    for r in taken:
        q.settle(r, Outcome.ACK)
    assert not q.entries and not q.leases and q.next_deadline == 0
    assert dict_bytes(q) == empty
    assert q.floor == q.next_seq == 1000 and q.settled(999)


def test_dropped_and_retried_entries_empty_it_too() -> None:
    q = Queue("q", retry=RetryPolicy(levels_ms=(1000,)))
    fill(q, 200)
    q.drop(list(q.entries.values())[:100])
    for _ in range(100):
        entry, _ = q.take("owner", deadline_ms=5)
        assert entry is not None
    returned = q.lapse(10)  # each lease lapses: scheduled for a retry, out of the queue
    assert len(returned.scheduled) == 100
    assert not q.entries and dict_bytes(q) == 2 * sys.getsizeof({})


def test_a_queue_emptied_after_each_message_keeps_its_tables() -> None:
    """Freed at most once per FREE_TABLES_AFTER entries, not per message; the dicts are the
    queue's own throughout (cleared, not made anew in the middle of a drain)."""
    q = Queue("q")
    entries, leases = q.entries, q.leases
    frees = 0
    for i in range(10 * FREE_TABLES_AFTER):
        q.publish("t", 0, i, 100)
        entry, _ = q.take("owner")
        assert entry is not None
        table = sys.getsizeof(q.entries)
        q.settle(receipt(entry), Outcome.ACK)
        frees += sys.getsizeof(q.entries) < table
    assert 1 <= frees <= 10
    assert q.entries is entries and q.leases is leases
