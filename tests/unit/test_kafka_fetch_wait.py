"""A long-polling Fetch on a real broker (no sockets): answered exactly once, also when
the read at the end of the wait drains an append that wakes the same fetch."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kafka.protocol.consumer import FetchRequest

from logbus.core.broker import Broker
from logbus.core.log import Record, TopicConfig
from logbus.gateway.kafka.caller import Caller
from logbus.gateway.kafka.handlers import KafkaHandlers
from tests.loop import LoopReactor

ADDR = ("127.0.0.1", 9092)


def fetch_request(wait_ms: int) -> Any:
    T = FetchRequest.FetchTopic
    req = FetchRequest(replica_id=-1, max_wait_ms=wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                       topics=[T(topic="t", partitions=[T.FetchPartition(partition=0, fetch_offset=0,
                                                                          partition_max_bytes=1 << 20)])])
    req.API_VERSION = 4
    req.with_header(correlation_id=1, client_id="t")
    return req


def test_the_wait_ends_once_when_its_last_read_wakes_it(tmp_path: Path) -> None:
    loop = LoopReactor()
    broker = Broker(tmp_path, reactor=loop, topic_defaults=TopicConfig(flush="sync"))
    broker.start()
    try:
        broker.topics.create_topic("t")
        handlers = KafkaHandlers(broker.doors, broker.streams, broker.topics, broker.access, loop)
        req = fetch_request(30)
        from logbus.gateway.kafka.codec import parse_request

        d = handlers.handle(parse_request(bytes(req.encode(header=True)), handlers.supported), Caller(ADDR, "guest"))
        answers: list[Any] = []
        d.addCallback(answers.append)
        time.sleep(0.05)  # the wait is over ...
        broker.log.partition("t", 0).append([Record(b"k", b"v")])  # ... and an append is not drained yet
        deadline = time.monotonic() + 2
        while not answers and time.monotonic() < deadline:
            loop.run_once(block=0.01)  # the wait's timer first: its read drains the append
        assert len(answers) == 1
    finally:
        broker.stop()
