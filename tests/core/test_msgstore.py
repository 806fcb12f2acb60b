"""core/queues/msgstore.py: messages kept in memory from publish until every queue settled
them (bounded), and read back from the log, a batch decoded once, after that."""

from __future__ import annotations

from typing import Callable

from logbus.core.log import LogManager
from logbus.core.message import Envelope, Message
from logbus.core.queues.msgstore import MESSAGE_OVERHEAD, MessageStore, log_batch_reader
from tests.core.conftest import topic_config
from tests.loop import LoopReactor


def msg(i: int) -> Message:
    return Message(b"k%d" % i, b"v%d" % i, 1000 + i, [("h", b"%d" % i)], Envelope(routing_key="r%d" % i))


def test_memory_until_released_then_the_log(open_log: Callable[..., LogManager], loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(), create=True).partition(0)
    loop.wait(p.append([msg(i).to_record() for i in range(10)]))  # one batch
    store = MessageStore(log_batch_reader(lm), max_bytes=10_000)
    store.remember("t", 0, 3, msg(3), 10, refs=2)
    assert store.get("t", 0, 3) == msg(3) and store.log_reads == 0
    store.release("t", 0, 3)
    assert store.live_bytes == 10 + MESSAGE_OVERHEAD  # one queue still holds it
    store.release("t", 0, 3)
    assert store.live_bytes == 0
    assert store.get("t", 0, 3) == msg(3) and store.log_reads == 1
    assert [store.get("t", 0, i) for i in range(10)] == [msg(i) for i in range(10)]
    assert store.log_reads == 1  # the batch was decoded once


def test_dropped_batches_are_decoded_again(open_log: Callable[..., LogManager], loop: LoopReactor) -> None:
    """What a quiet broker does (core/quiet.py): the decoded batches go, and a later
    read decodes its batch again."""
    lm = open_log()
    p = lm.open_topic("t", topic_config(), create=True).partition(0)
    loop.wait(p.append([msg(i).to_record() for i in range(10)]))
    store = MessageStore(log_batch_reader(lm))
    assert store.get("t", 0, 4) == msg(4) and store.log_reads == 1
    assert store.drop_batches() == 1 and store.drop_batches() == 0
    assert store.get("t", 0, 5) == msg(5) and store.log_reads == 2


def test_memory_is_bounded(open_log: Callable[..., LogManager], loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(), create=True).partition(0)
    for i in range(5):
        loop.wait(p.append([msg(i).to_record()]))  # five batches
    store = MessageStore(log_batch_reader(lm), max_bytes=2 * (10 + MESSAGE_OVERHEAD) + 5, cached_batches=2)
    for i in range(5):
        store.remember("t", 0, i, msg(i), 10, refs=1)
    assert store.live_bytes == 2 * (10 + MESSAGE_OVERHEAD)  # the oldest three were dropped
    assert [store.get("t", 0, i) for i in range(5)] == [msg(i) for i in range(5)]
    assert store.log_reads == 3


def test_the_bound_counts_what_a_message_costs_in_memory_not_only_its_value() -> None:
    """Small messages cost far more memory than their values (the Message, its envelope and
    headers, the store's own slot): 256 MiB of 100-byte values would be over a GiB. The
    bound counts a measured overhead per message, so it holds near what it says."""
    import tracemalloc

    n, size = 20_000, 100
    store = MessageStore(lambda *_: [], max_bytes=1 << 40)
    tracemalloc.start()
    try:
        for i in range(n):
            store.remember("t", 0, i, Message(b"k%d" % i, b"x" * size, 1000, [("h", b"v")], Envelope(routing_key="r")),
                           size, refs=1)
        used, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert store.live_bytes >= 0.8 * used, (store.live_bytes, used)


def test_the_cached_batches_are_bounded_by_their_records(open_log: Callable[..., LogManager],
                                                          loop: LoopReactor) -> None:
    """At most ``cached_records`` decoded records are kept (whole batches, the newest one
    always): a drain churning thousands of small objects leaves arenas held (decision 0027)."""
    lm = open_log()
    p = lm.open_topic("t", topic_config(), create=True).partition(0)
    for b in range(4):
        loop.wait(p.append([msg(i).to_record() for i in range(b * 10, b * 10 + 10)]))  # four batches of 10
    store = MessageStore(log_batch_reader(lm), cached_records=25)
    assert [store.get("t", 0, i) for i in range(40)] == [msg(i) for i in range(40)]
    assert store.log_reads == 4 and len(store._batches) == 2 and store._records == 20
    assert store.get("t", 0, 25) == msg(25) and store.log_reads == 4  # still cached
    assert store.get("t", 0, 5) == msg(5) and store.log_reads == 5  # dropped, decoded again
    tiny = MessageStore(log_batch_reader(lm), cached_records=1)
    assert tiny.get("t", 0, 3) == msg(3) and tiny.get("t", 0, 4) == msg(4) and tiny.log_reads == 1
    assert store.drop_batches() == 2 and store._records == 0
