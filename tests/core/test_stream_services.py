"""The stream and topic services (core/streams/service.py, core/topics.py; decision 0051)
on a real state store and log with no Broker: they own or are handed their parts, and
a deleted topic's producer states and committed offsets go through the hand-over."""

from __future__ import annotations

from pathlib import Path


from logbus.core.errors import ProducerFenced
from logbus.core.log import LogManager, TopicConfig
from logbus.core.metrics import Metrics
from logbus.core.state import StateStore
from logbus.core.streams.service import StreamService
from logbus.core.topics import TopicService
from logbus.core.types import AppendResult, Code, OffsetAndMetadata
from tests.core.test_produce import batch, outcome
from tests.loop import LoopReactor


class Services:
    def __init__(self, path: Path) -> None:
        self.loop = LoopReactor()
        self.state = StateStore(path / "state")
        self.log = LogManager(path, self.loop)
        self.metrics = Metrics()
        self.streams = StreamService(self.loop, self.metrics, topic_defaults=TopicConfig(flush="none"))
        self.topics = TopicService(self.streams.topic_defaults, self.streams.forget_topic)
        self.routed: list[tuple[str, int, int]] = []
        self.streams.open(self.state, self.log)
        self.topics.open(self.state, self.log)
        self.committed: list[tuple[str, int, int, int, int]] = []
        self.streams.start(lambda topic, partition, base, data, infos: self.routed.append((topic, partition, base)),
                           lambda *committed: self.committed.append(committed))

    def close(self) -> None:
        self.streams.stop()
        self.topics.close()
        self.log.close()
        self.state.close()


def test_produce_is_routed_and_a_deleted_topic_takes_its_client_state(tmp_path: Path) -> None:
    s = Services(tmp_path)
    try:
        s.topics.create_topic("t", {"partitions": 2})
        assert outcome(s.loop, s.streams.produce("t", 1, batch(b"a"))) == AppendResult(0, 0, 0)
        assert s.routed == [("t", 1, 0)]  # on to the queues that read the topic, handed at start
        pid = s.streams.new_producer_id()
        assert outcome(s.loop, s.streams.produce("t", 0, batch(b"b", pid=pid, epoch=1, seq=0))).base_offset == 0
        assert isinstance(outcome(s.loop, s.streams.produce("t", 0, batch(b"c", pid=pid, epoch=0, seq=1))), ProducerFenced)
        assert s.streams.commit_offsets("g", -1, "", {("t", 0): OffsetAndMetadata(1)})[0] is Code.NONE
        assert s.topics.delete_topic("t") == 0  # no queue model here: nothing reads it
        assert s.streams.fetch_offsets("g", None) == {} and s.streams.partition_count("t") is None
        s.topics.create_topic("t", {"partitions": 1})
        assert outcome(s.loop, s.streams.produce("t", 0, batch(b"d"))).base_offset == 0  # as far as the old log
        # the producer's epoch 1 went with the topic (in the store too): an older epoch is a new producer's
        assert outcome(s.loop, s.streams.produce("t", 0, batch(b"e", pid=pid, epoch=0, seq=0))).base_offset == 1
        s.topics.create_topic("kept", {"partitions": 3})
    finally:
        s.close()
    again = Services(tmp_path)
    try:
        assert again.streams.topic_names() == ["kept", "t"] and again.streams.partition_count("kept") == 3
    finally:
        again.close()
