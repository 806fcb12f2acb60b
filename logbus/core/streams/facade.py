"""The stream model's methods of the broker facade: what a gateway of the stream model
(Kafka) needs, so that it holds only the broker. The log, the producer registry and the
group coordinator stay behind these methods; their value types are in core/types.py.

``StreamModel`` (topics as partitioned logs: produce, reads, offsets, watchers, producer
ids) and ``ConsumerGroups`` (the group coordinator's requests, core/streams/groups.py)
are mixins of ``core.broker.Broker``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

from twisted.internet.defer import Deferred, fail

from ..errors import LogbusError
from ..log import AppendResult, LogManager
from ..log.batch import BatchInfo
from ..log.topic_config import TopicConfig
from ..types import (
    Code,
    GroupDescription,
    GroupListing,
    JoinGroup,
    JoinResult,
    OffsetAndMetadata,
    PartitionOffsets,
    ReadResult,
    SyncResult,
    TopicPartition,
)
from .groups import GroupCoordinator
from .produce import produce as produce_batches
from .producers import ProducerRegistry


class StreamModel:
    """Produce, read and watch partitions, their offsets, producer ids. Needs of the
    broker: its producer registry, ``_log`` (the started broker's log) and
    ``route_appended`` (produced batches to the queues that read their topic)."""

    producers: ProducerRegistry

    if TYPE_CHECKING:
        @property
        def _log(self) -> LogManager: ...

        def route_appended(self, topic: str, partition: int, base: int, data: bytes,
                           infos: list[BatchInfo]) -> int: ...

    def topic_names(self) -> list[str]:
        """Every topic's name, sorted."""
        return sorted(self._log.topics)

    def partition_count(self, topic: str) -> int | None:
        """How many partitions ``topic`` has; None when there is no such topic."""
        t = self._log.topics.get(topic)
        return None if t is None else len(t.partitions)

    def topic_config(self, topic: str) -> TopicConfig:
        """``topic``'s settings (UnknownTopic)."""
        return self._log.topic(topic).config

    def produce(self, topic: str, partition: int, data: bytes) -> Deferred[AppendResult]:
        """Append record batches a client sent encoded (Kafka RecordBatch v2) to one
        partition: checked against the topic's limits and the reserved envelope header,
        with producer idempotence, routed to the queues that read the topic
        (core/streams/produce.py). Fires once durable per the topic's flush policy (a
        duplicate of an idempotent batch: once its first offsets are readable), or fails
        with a LogbusError (UnknownTopic, UnknownPartition, CorruptBatch, RecordTooLarge,
        InvalidRecord, OutOfOrderSequence, ProducerFenced, StorageError)."""
        try:
            p = self._log.partition(topic, partition)
        except LogbusError as e:
            return fail(e)
        return produce_batches(p, data, self.producers, self.route_appended)

    def new_producer_id(self) -> int:
        """A producer id never handed out before, across restarts too."""
        return self.producers.new_producer_id()

    def read_spans(self, topic: str, partition: int, offset: int, max_bytes: int) -> ReadResult:
        """Whole batches from the one holding ``offset`` on, below the high watermark, up
        to ``max_bytes`` (at least one batch), as ranges of segment files (``spans``; no
        bytes are read: a gateway sends them with sendfile). UnknownTopic,
        UnknownPartition; OffsetOutOfRange outside [log start, log end]."""
        return self._log.partition(topic, partition).read(offset, max_bytes, data=False)

    def offsets(self, topic: str, partition: int) -> PartitionOffsets:
        """A partition's log start, log end and high watermark (UnknownTopic,
        UnknownPartition)."""
        p = self._log.partition(topic, partition)
        return PartitionOffsets(p.log_start_offset, p.log_end_offset, p.high_watermark)

    def offset_for_time(self, topic: str, partition: int, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first readable record whose timestamp is at least
        ``timestamp``, or None (UnknownTopic, UnknownPartition)."""
        return self._log.partition(topic, partition).offset_for_time(timestamp)

    def watch(self, partitions: Iterable[tuple[str, int]], callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` each time one of ``partitions`` (topic, index) gets new
        readable records (its high watermark moves), until the function returned is
        called. Partitions that do not exist are not watched."""
        watched = []
        topics = self._log.topics
        for topic, index in partitions:
            t = topics.get(topic)
            if t is not None and 0 <= index < len(t.partitions):
                p = t.partitions[index]
                p.watch(callback)
                watched.append(p)

        def unwatch() -> None:
            for p in watched:
                p.unwatch(callback)

        return unwatch


class ConsumerGroups:
    """Consumer groups: each method is one request to the broker's group coordinator."""

    groups: GroupCoordinator

    def join_group(self, request: JoinGroup) -> Deferred[JoinResult]:
        """A member joins a consumer group (core/streams/groups.py, Kafka's classic group
        protocol); fires when the group's rebalance completes."""
        return self.groups.join(request)

    def sync_group(self, group_id: str, generation_id: int, member_id: str, assignments: Mapping[str, bytes],
                   protocol_type: str | None = None, protocol_name: str | None = None,
                   instance_id: str | None = None) -> Deferred[SyncResult]:
        """The leader's assignments in, each member's assignment out."""
        return self.groups.sync(group_id, generation_id, member_id, assignments, protocol_type=protocol_type,
                                protocol_name=protocol_name, instance_id=instance_id)

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None = None) -> Code:
        return self.groups.heartbeat(group_id, generation_id, member_id, instance_id)

    def leave_group(self, group_id: str, member_ids: Sequence[str],
                    instance_ids: Sequence[str | None] | None = None) -> list[Code]:
        """One code per member, in order."""
        return self.groups.leave(group_id, member_ids, instance_ids)

    def commit_offsets(self, group_id: str, generation_id: int, member_id: str,
                       offsets: Mapping[TopicPartition, OffsetAndMetadata],
                       instance_id: str | None = None) -> tuple[Code, dict[TopicPartition, Code]]:
        """(the request's code, the per-partition codes); stored before it returns."""
        return self.groups.commit_offsets(group_id, generation_id, member_id, offsets, instance_id)

    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None
                      ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The committed offsets of ``partitions`` (None: every committed one)."""
        return self.groups.fetch_offsets(group_id, partitions)

    def list_groups(self) -> list[GroupListing]:
        return self.groups.list_groups()

    def describe_group(self, group_id: str) -> GroupDescription | None:
        """None: no such group."""
        return self.groups.describe(group_id)

    def delete_group(self, group_id: str) -> Code:
        """An Empty group, with its committed offsets."""
        return self.groups.delete_group(group_id)
