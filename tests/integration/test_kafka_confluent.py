"""librdkafka (confluent-kafka) against the Kafka gateway: an idempotent producer's
batches in every compression codec are accepted, stored as sent and consumed; timestamps are found inside compressed batches."""

from __future__ import annotations

import glob
import os
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from logbus.core.log import batch as B
from logbus.core.log.recovery import scan_valid

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def consume(boot: str, topic: str, n: int) -> list[Any]:
    c = Consumer({"bootstrap.servers": boot, "group.id": "t", "enable.auto.commit": False, "log_level": 3})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[Any] = []
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m)
        return got
    finally:
        c.close()


@pytest.mark.parametrize("codec", list(CODECS))
def test_every_codec_is_stored_as_sent_and_consumed(logbus_server: Any, codec: str) -> None:
    server = logbus_server()
    boot = server.addresses["kafka"]
    topic = "c-" + codec
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": boot, "compression.type": codec, "acks": "all", "linger.ms": 20,
                  "enable.idempotence": True, "log_level": 3})
    for i in range(200):
        p.produce(topic, key=b"k%d" % i, value=b"value %d " % i + b"x" * 200, timestamp=2_000_000 + i,
                  on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(20) == 0 and errors == []
    got = consume(boot, topic, 200)
    assert [(m.offset(), m.key(), m.value()) for m in got] == [
        (i, b"k%d" % i, b"value %d " % i + b"x" * 200) for i in range(200)
    ]
    # stored as sent: every batch on disk carries the producer's codec
    seg = sorted(glob.glob(os.path.join(server.data_dir, "log", topic, "0", "*.log")))[0]
    with open(seg, "rb") as f:
        data = f.read()
    _, end, _ = scan_valid(seg, 0)  # a running broker's active segment may end in zeros (format.md 5)
    assert data[end:].count(0) == len(data) - end
    infos = B.split_validate(data[:end], 1 << 30)
    assert infos and {i.attributes & B.COMPRESSION_MASK for i in infos} == {CODECS[codec]}
    assert {i.producer_id >= 0 for i in infos} == {True}  # idempotent batches (InitProducerId)
    # offsets by time look inside compressed batches
    c = Consumer({"bootstrap.servers": boot, "group.id": "t2", "log_level": 3})
    try:
        found = c.offsets_for_times([TopicPartition(topic, 0, 2_000_150)], timeout=10)[0]
        assert found.offset == 150
    finally:
        c.close()
