"""Half messages (core/halves.py) in a real broker on a temp dir: a half is stored and in
no topic, queue or pop group until its producer commits it; a rollback drops it; an
unsettled one is checked back with its producer group (a request on ``%CHECK%<group>``,
which a pop group reads) and rolled back after the group's max checks; halves and their
outcomes survive a restart."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from logbus.core.broker import Broker
from logbus.core.halves import (
    COMMITTED,
    H_COMMIT,
    H_GROUP,
    H_ROLLBACK,
    H_TOPIC,
    HALVES_TOPIC,
    ROLLED_BACK,
    HalfSettled,
    UnknownHalf,
    check_topic,
)
from logbus.core.message import Message
from tests.core.test_produce import outcome
from tests.loop import LoopReactor


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[Broker, LoopReactor]]:
    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop)
    b.start()
    b.topics.create_topic("orders", {"partitions": 1})
    yield b, loop
    b.stop()


def log_values(b: Broker, topic: str) -> list[bytes | None]:
    p = b.log.partition(topic, 0) if b.log is not None else None
    assert p is not None
    return [r.value for r in p.read_records(0)]


def test_a_half_is_published_only_when_committed(broker: tuple[Broker, LoopReactor]) -> None:
    b, loop = broker
    assert b.pop_service.receive("billing", "orders", "m", 10, 60_000) == []  # the pop group reads from now
    hid = b.halves.send("shop", "orders", Message(b"o-1", b"order one", headers=[("k", b"v")]))
    assert log_values(b, "orders") == [] and b.pop_service.receive("billing", "orders", "m", 10, 60_000) == []
    assert b.halves.describe(hid)["state"] == "unsettled"
    offsets = outcome(loop, b.halves.commit(hid))
    assert offsets == [0] and log_values(b, "orders") == [b"order one"]
    got = b.pop_service.receive("billing", "orders", "m", 10, 60_000)
    assert [(m.message.key, m.message.value, m.message.headers) for m in got] == [(b"o-1", b"order one", [("k", b"v")])]
    assert b.halves.describe(hid)["state"] == COMMITTED
    assert outcome(loop, b.halves.commit(hid)) == [0]  # again: the same answer, published once
    with pytest.raises(HalfSettled):
        b.halves.rollback(hid)
    assert log_values(b, "orders") == [b"order one"]
    assert b.metrics.registry.get_sample_value("logbus_half_messages_committed_total") == 1
    assert b.metrics.registry.get_sample_value("logbus_half_messages_sent_total") == 1


def test_a_rolled_back_half_is_never_published(broker: tuple[Broker, LoopReactor]) -> None:
    b, loop = broker
    hid = b.halves.send("shop", "orders", Message(b"o-2", b"never"))
    b.halves.rollback(hid)
    b.halves.rollback(hid)  # again: nothing more happens
    assert isinstance(outcome(loop, b.halves.commit(hid)), HalfSettled)
    assert b.halves.describe(hid)["state"] == ROLLED_BACK and log_values(b, "orders") == []
    with pytest.raises(UnknownHalf):
        b.halves.rollback("no-such-half")
    assert isinstance(outcome(loop, b.halves.commit("no-such-half")), UnknownHalf)


def test_an_unsettled_half_is_checked_back_then_rolled_back(broker: tuple[Broker, LoopReactor]) -> None:
    b, loop = broker
    b.halves.set_group("shop", check_interval_ms=1000, max_checks=2)
    hid = b.halves.send("shop", "orders", Message(b"o-3", b"undecided"))
    created = b.halves.halves[hid].created_ms
    assert b.halves.check(created + 999) == 0  # not due yet
    assert b.halves.check(created + 1000) == 1
    assert b.halves.check(created + 2000) == 1
    loop.run_until(lambda: b.log is not None and check_topic("shop") in b.log.topics
                   and len(log_values(b, check_topic("shop"))) == 2)
    requests = [json.loads(v or b"") for v in log_values(b, check_topic("shop"))]
    assert [(r["id"], r["check"], r["max_checks"], r["topic"], r["key"]) for r in requests] == [
        (hid, 1, 2, "orders", "o-3"), (hid, 2, 2, "orders", "o-3")]
    assert b.halves.describe(hid)["checks"] == 2
    assert b.halves.check(created + 3000) == 1  # past max_checks: rolled back
    d = b.halves.describe(hid)
    assert (d["state"], d["reason"]) == (ROLLED_BACK, "unsettled after 2 checks")
    assert log_values(b, "orders") == []
    assert b.metrics.registry.get_sample_value("logbus_half_message_checks_total") == 2
    assert b.metrics.registry.get_sample_value("logbus_half_messages_rolled_back_total") == 1


def test_halves_and_outcomes_survive_a_restart(tmp_path: Path) -> None:
    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop)
    b.start()
    b.topics.create_topic("orders", {"partitions": 1})
    b.halves.set_group("shop", check_interval_ms=5000, max_checks=3)
    kept = b.halves.send("shop", "orders", Message(b"k", b"kept"))
    dropped = b.halves.send("shop", "orders", Message(b"d", b"dropped"))
    b.halves.rollback(dropped)
    b.stop()
    b = Broker(tmp_path, reactor=loop)
    b.start()
    try:
        assert [h["id"] for h in b.halves.unsettled("shop")] == [kept]
        assert b.halves.describe(dropped)["state"] == ROLLED_BACK
        assert b.halves.settings("shop").max_checks == 3
        assert outcome(loop, b.halves.commit(kept)) == [0]
        assert log_values(b, "orders") == [b"kept"]
    finally:
        b.stop()


def kafka_batch(key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    b.append(0, 1000, key, value, headers)
    return bytes(b.build())


def test_kafka_records_of_the_halves_topic_send_commit_and_roll_back(broker: tuple[Broker, LoopReactor]) -> None:
    b, loop = broker
    b.halves.set_group("shop", check_interval_ms=60_000, max_checks=3)  # makes logbus.halves
    send = [(H_GROUP, b"shop"), (H_TOPIC, b"orders")]
    first = outcome(loop, b.streams.produce(HALVES_TOPIC, 0, kafka_batch(b"o-1", b"one", [*send, ("h", b"x")])))
    second = outcome(loop, b.streams.produce(HALVES_TOPIC, 0, kafka_batch(b"o-2", b"two", send)))
    ids = [f"0-{first.base_offset}", f"0-{second.base_offset}"]
    assert [h["id"] for h in b.halves.unsettled("shop")] == ids and log_values(b, "orders") == []
    outcome(loop, b.streams.produce(HALVES_TOPIC, 0, kafka_batch(b"", b"", [(H_COMMIT, ids[0].encode())])))
    outcome(loop, b.streams.produce(HALVES_TOPIC, 0, kafka_batch(b"", b"", [(H_ROLLBACK, ids[1].encode())])))
    loop.run_until(lambda: not b.halves.unsettled("shop") and log_values(b, "orders") == [b"one"])
    [record] = b.log.partition("orders", 0).read_records(0) if b.log is not None else []
    assert (record.key, record.value) == (b"o-1", b"one")
    assert [h for h in record.headers if not h[0].startswith("logbus.")] == [("h", b"x")]  # its own headers, no half's
    assert b.halves.describe(ids[0])["state"] == COMMITTED and b.halves.describe(ids[1])["state"] == ROLLED_BACK
