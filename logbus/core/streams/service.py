"""The stream model as a service the broker owns (``broker.streams``): what the Kafka
gateway calls (``ports.Streams``): topics as partitioned logs (produce, reads, offsets,
watchers, producer ids) and consumer groups, and the client state that expires as in Kafka.

It owns the producer registry, the group coordinator and the transaction coordinator
(transactions.py); it is handed the state store and the log at ``open`` and where produced
batches go on from the log at ``start`` (``route``: the pipeline's ``appended``, the
queues that read the topic; a committed transaction's records: ``committed``). The
coordinators' methods are its own, bound at construction, so a group or transaction
request is one call.

    streams = StreamService(reactor, metrics, topic_defaults=TopicConfig())
    streams.open(state, log)                             # producers, groups, transactions
    streams.start(pipeline.appended, pipeline.committed) # starts the expiry
    d = streams.produce("t", 0, batches)                 # Deferred[AppendResult]
    streams.stop()                                       # waiting joins fail, expiry stops
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Mapping

from twisted.internet.defer import Deferred, fail
from twisted.internet.task import LoopingCall

from ..errors import LogbusError, StorageError
from ..log import AppendResult, LogManager
from ..log.format import AbortedTxn
from ..log.partition import ReadResult
from ..log.topic_config import TopicConfig
from ..metrics import Metrics
from ..state import StateStore
from ..types import PartitionOffsets
from .group_model import Code, OffsetAndMetadata, TopicPartition
from .groups import GroupCoordinator
from .produce import Route
from .produce import produce as produce_batches
from .producers import ProducerRegistry
from .transactions import RouteCommitted, TransactionCoordinator

log = logging.getLogger(__name__)

PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms: 1 day
OFFSETS_RETENTION_MS = 7 * 86_400_000  # Kafka's offsets.retention.minutes: 7 days
CLIENT_EXPIRY_CHECK_MAX_S = 600.0  # Kafka's *.check.interval.ms: 10 minutes
CONSUMER_OFFSETS, TRANSACTION_STATE = "__consumer_offsets", "__transaction_state"  # Kafka's internal topics
INTERNAL_PARTITIONS = 50  # Kafka's offsets.topic.num.partitions and transaction.state.log.num.partitions


def client_expiry_interval(*expiry_ms: int) -> float:
    """How often expired client state is looked for (s): Kafka's 10 minutes, or half the
    shortest expiry when that is shorter (at least 50 ms)."""
    return max(0.05, min(CLIENT_EXPIRY_CHECK_MAX_S, min(expiry_ms) / 2000))


def _not_started(*args: object) -> int:
    raise RuntimeError("the stream service is not started")


class StreamService:
    """``ports.Streams``: produce, read and watch partitions, their offsets, producer ids,
    consumer groups (see the module's header)."""

    def __init__(self, reactor: Any, metrics: Metrics, *, topic_defaults: TopicConfig,
                 producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
                 offsets_retention_ms: int = OFFSETS_RETENTION_MS) -> None:
        self.reactor = reactor
        self.topic_defaults = topic_defaults
        self.producers = ProducerRegistry(None)  # replaced at start, with the store
        self.groups = GroupCoordinator(reactor)
        self.txns = TransactionCoordinator(reactor, metrics)
        self._log: LogManager | None = None
        self._route: Route = _not_started
        # per-client state that expires as in Kafka (expire_client_state)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.offsets_retention_ms = offsets_retention_ms
        self._client_expiry: LoopingCall | None = None
        self._coordinators_asked: set[str] = set()  # internal topics "created" (``coordinator_asked``)
        self._producers_expired = metrics.counter(
            "logbus_producer_states_expired",
            "Idempotent producers' states forgotten after producer.id.expiration.ms (per partition)")
        self._offsets_expired = metrics.counter(
            "logbus_group_offsets_expired",
            "Committed offsets of groups with no members deleted after offsets.retention.minutes")
        # consumer groups: the coordinator's own methods (one call per request)
        groups = self.groups
        self.join_group = groups.join
        self.sync_group = groups.sync
        self.heartbeat = groups.heartbeat
        self.leave_group = groups.leave
        self.commit_offsets = groups.commit_offsets
        self.fetch_offsets = groups.fetch_offsets
        self.list_groups = groups.list_groups
        self.describe_group = groups.describe
        self.delete_group = groups.delete_group
        # transactions: the coordinator's own methods too
        txns = self.txns
        self.init_transactional_producer = txns.init_producer_id
        self.add_partitions_to_txn = txns.add_partitions
        self.add_offsets_to_txn = txns.add_offsets
        self.end_txn = txns.end
        self.offsets_unstable = txns.unstable

    # -- lifecycle --------------------------------------------------------------------

    def open(self, state: StateStore, log_manager: LogManager) -> int:
        """Take the state store (producer states, committed offsets) and the log; returns
        the committed offsets loaded."""
        self.producers = ProducerRegistry(state)
        self._log = log_manager
        self.txns.open(state, log_manager, self.producers.new_producer_id)
        return self.groups.open(state)

    def start(self, route: Route, route_committed: RouteCommitted) -> None:
        """Serve: produced batches go on to ``route`` (the queues that read their topic),
        a committed transaction's to ``route_committed``; expired client state is looked
        for from now on, and transactions caught mid-commit are completed."""
        self._route = route
        self.txns.start(route_committed, self.groups.apply_offsets)
        self._client_expiry = LoopingCall(self.expire_client_state)
        self._client_expiry.clock = self.reactor
        self._client_expiry.start(client_expiry_interval(self.producer_id_expiration_ms, self.offsets_retention_ms),
                                  now=False)

    def stop(self) -> None:
        """Waiting joins and syncs fail (COORDINATOR_NOT_AVAILABLE); the expiry stops; the
        log and the state store are the broker's to close."""
        if self._client_expiry is not None and self._client_expiry.running:
            self._client_expiry.stop()
        self.groups.shutdown()
        self.txns.stop()
        self._log = None
        self._route = _not_started

    @property
    def log(self) -> LogManager:
        if self._log is None:
            raise RuntimeError("broker is not started")
        return self._log

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's producer states and committed offsets go."""
        self.producers.forget_topic(topic)
        self.groups.forget_topic(topic)
        self.txns.forget_topic(topic)

    # -- topics as partitioned logs -------------------------------------------------------

    def topic_names(self) -> list[str]:
        """Every topic's name, sorted."""
        return sorted(self.log.topics)

    def partition_count(self, topic: str) -> int | None:
        """How many partitions ``topic`` has; None when there is no such topic."""
        t = self.log.topics.get(topic)
        return None if t is None else len(t.partitions)

    def coordinator_asked(self, internal_topic: str) -> None:
        """A client looked for the coordinator of a group (``__consumer_offsets``) or of a
        transactional id (``__transaction_state``): Kafka creates that internal topic then,
        and lists it from then on (``internal_topics``)."""
        self._coordinators_asked.add(internal_topic)

    def internal_topics(self) -> dict[str, int]:
        """Kafka's internal topics as Kafka would list them here, with their partition
        counts: ``__consumer_offsets`` once groups are used, ``__transaction_state`` once
        transactions are. They hold nothing a client reads (the coordinators' state is in
        the state store)."""
        out = {}
        if self.groups.groups or CONSUMER_OFFSETS in self._coordinators_asked:
            out[CONSUMER_OFFSETS] = INTERNAL_PARTITIONS
        if self.txns.txns or TRANSACTION_STATE in self._coordinators_asked:
            out[TRANSACTION_STATE] = INTERNAL_PARTITIONS
        return out

    def txn_commit_offsets(self, transactional_id: str, group: str, producer_id: int, epoch: int,
                           offsets: Mapping[TopicPartition, OffsetAndMetadata], generation_id: int = -1,
                           member_id: str = "", instance_id: str | None = None) -> Code:
        """TxnOffsetCommit: with a member and generation (KIP-447), checked as OffsetCommit
        checks them first; then held with the transaction (transactions.py)."""
        if generation_id >= 0 or member_id:
            code = self.groups.check_member(group, generation_id, member_id, instance_id)
            if code is not Code.NONE:
                return code
        return self.txns.commit_offsets(transactional_id, group, producer_id, epoch, offsets)

    def topic_config(self, topic: str) -> TopicConfig:
        """``topic``'s settings (UnknownTopic)."""
        return self.log.topic(topic).config

    def produce(self, topic: str, partition: int, data: bytes) -> Deferred[AppendResult]:
        """Append record batches a client sent encoded (Kafka RecordBatch v2) to one
        partition: checked against the topic's limits and the reserved envelope header,
        with producer idempotence, routed to the queues that read the topic
        (core/streams/produce.py). Fires once durable per the topic's flush policy (a
        duplicate of an idempotent batch: once its first offsets are readable), or fails
        with a LogbusError (UnknownTopic, UnknownPartition, CorruptBatch, RecordTooLarge,
        InvalidRecord, OutOfOrderSequence, ProducerFenced, StorageError)."""
        try:
            p = self.log.partition(topic, partition)
        except LogbusError as e:
            return fail(e)
        return produce_batches(p, data, self.producers, self._route, self.txns)

    def new_producer_id(self) -> int:
        """A producer id never handed out before, across restarts too."""
        return self.producers.new_producer_id()

    def read_spans(self, topic: str, partition: int, offset: int, max_bytes: int,
                   committed: bool = False) -> ReadResult:
        """Whole batches from the one holding ``offset`` on, below the high watermark (or,
        ``committed``, the last stable offset), up to ``max_bytes`` (at least one batch),
        as ranges of segment files (``spans``; no bytes are read: a gateway sends them
        with sendfile). UnknownTopic, UnknownPartition; OffsetOutOfRange outside [log
        start, log end]."""
        p = self.log.partition(topic, partition)
        return p.read(offset, max_bytes, data=False, upto=self.txns.last_stable_offset(p) if committed else -1)

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """Where read_committed readers stop (the first offset of the earliest open
        transaction, or the high watermark); UnknownTopic, UnknownPartition."""
        return self.txns.last_stable_offset(self.log.partition(topic, partition))

    def aborted_transactions(self, topic: str, partition: int, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with records in [start, end) of the partition."""
        return self.txns.aborted(self.log.partition(topic, partition), start, end)

    def offsets(self, topic: str, partition: int) -> PartitionOffsets:
        """A partition's log start, log end and high watermark (UnknownTopic,
        UnknownPartition)."""
        p = self.log.partition(topic, partition)
        return PartitionOffsets(p.log_start_offset, p.log_end_offset, p.high_watermark)

    def offset_for_time(self, topic: str, partition: int, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first readable record whose timestamp is at least
        ``timestamp``, or None (UnknownTopic, UnknownPartition)."""
        return self.log.partition(topic, partition).offset_for_time(timestamp)

    def watch(self, partitions: Iterable[tuple[str, int]], callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` each time one of ``partitions`` (topic, index) gets new
        readable records (its high watermark moves), until the function returned is
        called. Partitions that do not exist are not watched."""
        watched = []
        topics = self.log.topics
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

    # -- client state that expires ------------------------------------------------------------

    def expire_client_state(self, now_ms: int | None = None) -> tuple[int, int]:
        """Forget idempotent producers idle past ``producer_id_expiration_ms`` and the
        committed offsets of groups with no members past ``offsets_retention_ms`` (Kafka's
        producer.id.expiration.ms and offsets.retention.minutes; counted in
        logbus_producer_states_expired_total and logbus_group_offsets_expired_total).
        Returns (producer states, offsets) expired. A failure is logged and tried again at
        the next check: it never stops the checks. O(producers + groups), every
        ``client_expiry_interval`` (10 minutes by default), not per tick."""
        producers = offsets = 0
        try:
            producers = self.producers.expire(self.producer_id_expiration_ms, now_ms)
            offsets = self.groups.expire_offsets(self.offsets_retention_ms, now_ms)
        except StorageError as e:
            log.warning("expiring producer states and group offsets failed; trying again at the next check: %s", e)
        except Exception:
            log.exception("expiring producer states and group offsets failed; trying again at the next check")
        if producers:
            self._producers_expired.inc(producers)
        if offsets:
            self._offsets_expired.inc(offsets)
        return producers, offsets
