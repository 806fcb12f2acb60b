"""Streams.produce (broker.streams) and the reads beside it (core/streams/produce.py), on a temp dir: raw
record batches checked, appended, made idempotent; the refusals are the core's errors."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from twisted.python.failure import Failure

from logbus.core.broker import Broker
from logbus.core.errors import (
    CorruptBatch,
    InvalidRecord,
    OffsetOutOfRange,
    OutOfOrderSequence,
    ProducerFenced,
    UnknownPartition,
    UnknownTopic,
)
from logbus.core.message import ENVELOPE_HEADER
from logbus.core.types import AppendResult
from tests.loop import LoopReactor


@pytest.fixture
def broker(tmp_path: Any) -> Iterator[tuple[Broker, LoopReactor]]:
    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop)
    b.start()
    b.topics.create_topic("t", {"partitions": 2})  # flush sync: readable once durable
    yield b, loop
    b.stop()


def batch(*values: bytes, pid: int = -1, epoch: int = -1, seq: int = -1,
          headers: list[tuple[str, bytes]] | None = None) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, 0, pid, epoch, seq, 1 << 20)
    for i, v in enumerate(values):
        b.append(i, 1000 + i, None, v, headers or [])
    return bytes(b.build())


def outcome(loop: LoopReactor, d: Any) -> Any:
    """What ``d`` fires with: the result, or the failure's exception."""
    box: list[Any] = []
    d.addBoth(box.append)
    loop.run_until(lambda: bool(box))
    return box[0].value if isinstance(box[0], Failure) else box[0]


def test_a_batch_is_appended_and_read_back_as_file_spans(broker: tuple[Broker, LoopReactor]) -> None:
    b, loop = broker
    assert outcome(loop, b.streams.produce("t", 1, batch(b"a", b"b"))) == AppendResult(0, 1, 0)
    assert outcome(loop, b.streams.produce("t", 1, batch(b"c"))).base_offset == 2
    assert b.streams.offsets("t", 1) == (0, 3, 3) and b.streams.offsets("t", 0) == (0, 0, 0)
    r = b.streams.read_spans("t", 1, 0, 1 << 20)
    assert (r.next_offset, r.high_watermark, r.data) == (3, 3, b"") and sum(s.size for s in r.spans) > 0
    with pytest.raises(OffsetOutOfRange):
        b.streams.read_spans("t", 1, 4, 100)
    assert b.streams.offset_for_time("t", 1, 1001) == (1, 1001)
    assert (b.streams.topic_names(), b.streams.partition_count("t"), b.streams.partition_count("nope")) == (["t"], 2, None)


def test_refusals_are_the_cores_errors(broker: tuple[Broker, LoopReactor]) -> None:
    b, loop = broker
    assert isinstance(outcome(loop, b.streams.produce("nope", 0, batch(b"a"))), UnknownTopic)
    assert isinstance(outcome(loop, b.streams.produce("t", 2, batch(b"a"))), UnknownPartition)
    assert isinstance(outcome(loop, b.streams.produce("t", 0, batch(b"a")[:-1])), CorruptBatch)
    reserved = batch(b"a", headers=[(ENVELOPE_HEADER, b"x")])
    assert isinstance(outcome(loop, b.streams.produce("t", 0, reserved)), InvalidRecord)
    assert b.streams.offsets("t", 0).log_end_offset == 0  # nothing of them was appended


def test_an_idempotent_producers_retry_gap_and_old_epoch(broker: tuple[Broker, LoopReactor]) -> None:
    b, loop = broker
    pid = b.streams.new_producer_id()
    assert b.streams.new_producer_id() != pid
    first = outcome(loop, b.streams.produce("t", 0, batch(b"a", b"b", pid=pid, epoch=1, seq=0)))
    assert first == AppendResult(0, 1, 0)
    assert outcome(loop, b.streams.produce("t", 0, batch(b"a", b"b", pid=pid, epoch=1, seq=0))) == first  # a retry
    assert b.streams.offsets("t", 0).log_end_offset == 2  # not appended twice
    assert isinstance(outcome(loop, b.streams.produce("t", 0, batch(b"c", pid=pid, epoch=1, seq=5))), OutOfOrderSequence)
    assert isinstance(outcome(loop, b.streams.produce("t", 0, batch(b"c", pid=pid, epoch=0, seq=2))), ProducerFenced)
    assert outcome(loop, b.streams.produce("t", 0, batch(b"c", pid=pid, epoch=1, seq=2))).base_offset == 2


def test_watch_wakes_on_new_readable_records_until_unwatched(broker: tuple[Broker, LoopReactor]) -> None:
    b, loop = broker
    woken: list[int] = []
    unwatch = b.streams.watch([("t", 0), ("t", 7), ("nope", 0)], lambda: woken.append(b.streams.offsets("t", 0).high_watermark))
    outcome(loop, b.streams.produce("t", 0, batch(b"a")))
    assert woken and woken[-1] == 1
    unwatch()
    seen = len(woken)
    outcome(loop, b.streams.produce("t", 0, batch(b"b")))
    assert len(woken) == seen
