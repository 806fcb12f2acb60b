"""Idempotent producers' sequence state kept in RocksDB (core/txn.ProducerRegistry):
stored as batches become durable, loaded as snapshot plus replay of the log tail,
never trusted past the log's end, dropped with the topic; producer ids never repeat."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from logbus.core.log import LogManager
from logbus.core.log import batch as B
from logbus.core.state import CF_PRODUCERS, StateStore, producer_key
from logbus.core.streams.producers import APPEND, DUPLICATE, OUT_OF_ORDER, ProducerRegistry
from tests.core.conftest import topic_config
from tests.loop import LoopReactor

PID = 7


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Callable[[], StateStore]]:
    opened: list[StateStore] = []

    def make() -> StateStore:
        s = StateStore(tmp_path / "state")
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def partition(open_log: Callable[..., LogManager]) -> Any:
    return open_log().open_topic("t", topic_config(), create=True).partition(0)


def produce(loop: LoopReactor, reg: ProducerRegistry, p: Any, seq: int, n: int, store: bool = True) -> tuple[str, int]:
    """One idempotent batch of ``n`` records through the registry, as the Kafka gateway
    does it: check, append, record, store when durable (unless ``store`` is False)."""
    b = DefaultRecordBatchBuilder(2, 0, 0, PID, 0, seq, 1 << 20)
    for i in range(n):
        b.append(i, 1000 + i, None, b"v%d" % (seq + i), [])
    data = bytearray(b.build())
    infos = B.split_validate(bytes(data), 1 << 20)
    states = reg.states("t", p)
    verdict = states.check(PID, 0, seq, n)
    if verdict.kind != APPEND:
        return verdict.kind, verdict.base_offset
    base = p.next_offset
    d = p.append_batches(data, infos)
    states.record(PID, 0, seq, n, base)
    rec = reg.snapshot("t", p, PID)
    loop.wait(d)
    if store:
        reg.store_durable("t", p.index, PID, rec, p.next_offset)
    return APPEND, base


@pytest.mark.pure_only
def test_states_survive_restart_as_snapshot_plus_log_tail(partition: Any, loop: LoopReactor, store: Callable[[], StateStore]) -> None:
    p = partition
    s = store()
    reg = ProducerRegistry(s)
    assert produce(loop, reg, p, 0, 3) == (APPEND, 0)
    assert produce(loop, reg, p, 3, 2) == (APPEND, 3)
    assert produce(loop, reg, p, 5, 4, store=False) == (APPEND, 5)  # "crashed" before storing

    # a new registry (as after a restart) replays only what the snapshot lacks
    fresh = ProducerRegistry(s)
    replayed: list[int] = []
    real = p.batch_headers
    p.batch_headers = lambda start=0: (replayed.append(start), real(start))[1]  # type: ignore[method-assign]
    states = fresh.states("t", p)
    assert replayed == [5]
    assert states.check(PID, 0, 5, 4).kind == DUPLICATE  # the unstored batch, from the log
    assert states.check(PID, 0, 3, 2).kind == DUPLICATE  # a stored one
    assert states.check(PID, 0, 9, 1).kind == APPEND
    assert states.check(PID, 0, 11, 1).kind == OUT_OF_ORDER


def test_a_snapshot_past_the_log_end_is_ignored(partition: Any, loop: LoopReactor, store: Callable[[], StateStore]) -> None:
    p = partition
    s = store()
    reg = ProducerRegistry(s)
    produce(loop, reg, p, 0, 3)
    lost = ProducerRegistry(s).states("t", p)  # a state that claims a batch the log lost
    lost.record(PID, 0, 3, 2, 3)
    reg.store_durable("t", 0, PID, lost.to_record(PID), 5)
    states = ProducerRegistry(s).states("t", p)
    # a retry of the lost batch must be appended again, not acknowledged at offset 3
    assert states.check(PID, 0, 3, 2).kind == APPEND
    assert states.check(PID, 0, 0, 3).kind == DUPLICATE


def test_forget_topic_and_recreate(
    open_log: Callable[..., LogManager], loop: LoopReactor, store: Callable[[], StateStore]
) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(), create=True).partition(0)
    s = store()
    reg = ProducerRegistry(s)
    produce(loop, reg, p, 0, 3)
    reg.forget_topic("t")
    assert list(s.scan_prefix("producers", b"")) == []
    lm.delete_topic("t")
    p2 = lm.open_topic("t", topic_config(), create=True).partition(0)
    assert reg.states("t", p2).check(PID, 0, 0, 3).kind == APPEND  # no state: not a duplicate any more


def test_producer_ids_never_repeat_across_restarts(store: Callable[[], StateStore]) -> None:
    s = store()
    first = ProducerRegistry(s)
    a = [first.new_producer_id() for _ in range(1500)]
    b = [ProducerRegistry(s).new_producer_id() for _ in range(3)]
    assert len(set(a + b)) == len(a) + len(b)
    assert ProducerRegistry(None).new_producer_id() == 0


def test_expired_producer_states_are_forgotten_here_and_in_the_store(
        partition: Any, loop: LoopReactor, store: Callable[[], StateStore]) -> None:
    """producer.id.expiration.ms: a producer idle that long loses its state (a retry of
    its last batch is no longer a duplicate; its next batch is taken at any sequence),
    in the store too; one that appended since is kept."""
    p = partition
    s = store()
    reg = ProducerRegistry(s)
    produce(loop, reg, p, 0, 3)
    now = B.now_ms()
    assert reg.expire(60_000, now) == 0  # appended just now
    assert s.get(CF_PRODUCERS, producer_key("t", 0, PID)) is not None
    assert reg.states("t", p).check(PID, 0, 0, 3).kind == DUPLICATE
    assert reg.expire(60_000, now + 60_001) == 1
    assert reg.states("t", p).check(PID, 0, 0, 3).kind == APPEND  # forgotten
    assert reg.states("t", p).check(PID, 0, 7, 1).kind == APPEND  # any sequence
    assert s.get(CF_PRODUCERS, producer_key("t", 0, PID)) is None
    # a restart does not bring it back from the store (the snapshot end is after its batch)
    assert ProducerRegistry(s).states("t", p).check(PID, 0, 0, 3).kind == APPEND
