"""Kafka request handlers over the core's ports: each takes a decoded request and returns the
response object (or a Deferred of it). No sockets here; protocol.py moves the bytes.

KafkaHandlers answers ApiVersions, Metadata, Produce, Fetch, ListOffsets and
InitProducerId; the install() of groups.py, admin.py, configs.py and records_admin.py
registers more (``KafkaHandlers.register``; docs/kafka.md lists them all). A Fetch that
must wait for ``min_bytes`` is woken when a partition it asked for gets new readable
records (``Streams.watch``).

The handlers hold ports and nothing else of the core (core/ports.py): ``doors`` (logins,
the access check), ``streams`` (produce, reads, offsets, groups), ``topics`` (topic admin)
and ``acls`` (permissions as Kafka's ACLs); from ``logbus.core`` they import ``ports``,
``errors`` and ``types``. A Produce's checks, idempotence and routing are ``Streams.produce``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator

from aiokafka.record.memory_records import MemoryRecords
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse
from twisted.internet.defer import Deferred, DeferredList, succeed

from ...core.ports import Acls, Doors, Streams, Topics
from ...core.errors import AccessRefused, LogbusError, OffsetOutOfRange, Refused, StorageError
from ...core.types import HALF_TARGET_HEADER, HALVES_TOPIC, ConnectionRecord, FileSpan, Perm, topic_exchange
from . import errors as K
from .access import KafkaAccess
from .caller import Caller
from .codec import Chunks, FetchPartition, Request, encode_fetch_response, frame_response
from .operations import ALTER, DESCRIBE, READ, WRITE, authorized
from .topic_fields import Unmapped, outbound, rename_request, rename_response

log = logging.getLogger(__name__)
audit_log = logging.getLogger("logbus.audit")
# the Kafka requests that change what the broker holds beside records: one audit line each
# (CreateTopics, DeleteTopics, DeleteRecords, CreateAcls, DeleteAcls, AlterConfigs,
# CreatePartitions, DeleteGroups, IncrementalAlterConfigs)
AUDITED = frozenset({19, 20, 21, 30, 31, 33, 37, 42, 44})


def _subject(body: Any) -> str:
    """What an audited Kafka request names: its topics, resources, groups or ACLs."""
    for field in ("topics", "topic_names", "resources", "groups_names", "creations", "filters"):
        items = getattr(body, field, None)
        if items is not None:
            names = [i if isinstance(i, str) else getattr(i, "name", None) or getattr(i, "resource_name", None)
                     or getattr(i, "principal", None) or getattr(i, "principal_filter", None) or "?" for i in items]
            return f"{field} {names}"
    return ""


def _batches(records: bytes) -> Iterator[Any]:
    m = MemoryRecords(records)
    while (batch := m.next_batch()) is not None:
        yield batch

_OPERATION: dict[str, int] = {"read": READ, "write": WRITE, "configure": ALTER}  # a permission as Kafka's operation

EARLIEST, LATEST = -2, -1
READ_COMMITTED = 1  # a Fetch's or ListOffsets' isolation_level
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})  # Kafka's (Streams.internal_topics)


def _kafka_names(answer: Any) -> Any:
    if answer is None or isinstance(answer, Chunks):  # Chunks: Fetch, named as encoded
        return answer
    return rename_response(answer)


class KafkaHandlers:
    def __init__(self, doors: Doors, streams: Streams, topics: Topics, acls: Acls, reactor: Any, *,
                 node_id: int = 0, auto_create_topics: bool = True,
                 sasl_mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")) -> None:
        self.doors = doors
        self.streams = streams
        self.topics = topics
        self.acls = acls
        self.reactor = reactor
        self.sasl_mechanisms = sasl_mechanisms  # what SaslHandshake offers (sasl.py)
        self.node_id = node_id
        self.auto_create_topics = auto_create_topics
        # what each request's user (its Caller's: SASL, or the default user) may do in
        # Kafka's terms, from logbus's permissions (access.py)
        self.access = KafkaAccess(doors, acls)
        H = Callable[[Request, Caller], Any]
        self._table: dict[int, tuple[Any, Any, int, int, H]] = {
            18: (ApiVersionsRequest, ApiVersionsResponse, 0, 4, self.api_versions),
            3: (MetadataRequest, MetadataResponse, 0, 9, self.metadata),
            0: (ProduceRequest, ProduceResponse, 3, 9, self.produce),
            1: (FetchRequest, FetchResponse, 4, 11, self.fetch),
            2: (ListOffsetsRequest, ListOffsetsResponse, 1, 5, self.list_offsets),
            22: (InitProducerIdRequest, InitProducerIdResponse, 0, 4, self.init_producer_id),
        }
        # what codec.parse_request needs: api_key -> (request, response, min, max)
        self.supported = {k: v[:4] for k, v in self._table.items()}

    def allowed(self, user: str | None, action: Perm, topic: str) -> bool:
        """Whether ``user`` (a Caller's) may ``action`` (write, read, configure) on ``topic``."""
        return self.access.topic(user, _OPERATION[action], topic)

    def check(self, user: str | None, action: Perm, topic: str) -> None:
        """AccessRefused (TOPIC_AUTHORIZATION_FAILED) unless ``allowed``."""
        if not self.allowed(user, action, topic):
            raise AccessRefused(f"{action} access to topic {topic!r} refused for user {user!r}")

    def register(self, request_cls: Any, response_cls: Any, min_version: int, max_version: int,
                 handler: Callable[[Request, Caller], Any]) -> None:
        """Add an API (used by the install() functions of groups.py, admin.py, ...).
        ApiVersions then advertises exactly what is registered."""
        key = request_cls.API_KEY
        self._table[key] = (request_cls, response_cls, min_version, max_version, handler)
        self.supported[key] = (request_cls, response_cls, min_version, max_version)

    def handle(self, req: Request, caller: Caller) -> Any:
        """The response to ``req`` (an object or a Deferred), or None when the request
        expects no answer (Produce with acks=0). Handlers see logbus topic names: the
        request's Kafka names are renamed before, the response's after
        (topic_fields.py)."""
        rename_request(req.body)
        if req.api_key in AUDITED:
            audit_log.info("user %r from %s: Kafka %s %s", caller.user, caller.peer, req.body.name,
                           _subject(req.body))
        answer = self._table[req.api_key][4](req, caller)
        if isinstance(answer, Deferred):
            return answer.addCallback(_kafka_names)
        return _kafka_names(answer)

    # -- ApiVersions ------------------------------------------------------------------

    def _api_keys(self) -> list[Any]:
        AV = ApiVersionsResponse.ApiVersion
        return [AV(api_key=k, min_version=lo, max_version=hi) for k, (_, _, lo, hi, _) in sorted(self._table.items())]

    def api_versions(self, req: Request, caller: Caller) -> Any:
        name = getattr(req.body, "client_software_name", None)  # v3 and later (KIP-511)
        if name and caller.record is not None:
            caller.record.client_said(product=name, version=getattr(req.body, "client_software_version", None) or "")
        return ApiVersionsResponse(error_code=K.NONE, api_keys=self._api_keys(), throttle_time_ms=0)

    def unsupported_api_versions(self, correlation_id: int) -> bytes:
        """KIP-511: an ApiVersions request of a version we do not know is answered in v0
        with UNSUPPORTED_VERSION and the versions we do support."""
        resp = ApiVersionsResponse(error_code=K.UNSUPPORTED_VERSION, api_keys=self._api_keys())
        return frame_response(resp, 0, correlation_id)

    # -- Metadata ---------------------------------------------------------------------

    def metadata(self, req: Request, caller: Caller) -> Any:
        body = req.body
        streams = self.streams
        internal = streams.internal_topics()
        if body.topics is None or (req.api_version == 0 and not body.topics):
            names = streams.topic_names() + [n for n in internal if streams.partition_count(n) is None]
        else:
            names = [t.name for t in body.topics]
        every = body.topics is None or (req.api_version == 0 and not body.topics)
        allow_create = self.auto_create_topics and (req.api_version < 4 or body.allow_auto_topic_creation)
        v8 = req.api_version >= 8
        user, access = caller.user, self.access
        asked_topic_ops = v8 and body.include_topic_authorized_operations
        cluster_ops = authorized(access.cluster_operations(user), v8 and body.include_cluster_authorized_operations)
        T = MetadataResponse.MetadataResponseTopic
        P = T.MetadataResponsePartition
        node = self.node_id
        topics = []
        for name in names:
            unmapped = isinstance(name, Unmapped)
            if not unmapped and name and not access.topic(user, DESCRIBE, name):
                if not every:  # named, not to be described: refused, whether it exists or not (as Kafka)
                    topics.append(T(error_code=K.TOPIC_AUTHORIZATION_FAILED, name=name, is_internal=False,
                                    partitions=[], authorized_operations=authorized(frozenset(), asked_topic_ops)))
                continue  # every topic: only those the user may describe
            topic_ops = authorized(access.topic_operations(user, name), asked_topic_ops)
            if name in internal:  # Kafka's own: listed, read as empty, never written
                topics.append(T(error_code=K.NONE, name=name, is_internal=True, partitions=[
                    P(error_code=K.NONE, partition_index=index, leader_id=node, leader_epoch=0,
                      replica_nodes=[node], isr_nodes=[node], offline_replicas=[])
                    for index in range(internal[name])], authorized_operations=topic_ops))
                continue
            count = streams.partition_count(name)
            if count is None and allow_create and not unmapped and name and name not in INTERNAL_TOPICS:
                if not self.allowed(user, "configure", name):  # no CREATE on a topic it asked for: 29, as Kafka
                    topics.append(T(error_code=K.TOPIC_AUTHORIZATION_FAILED, name=name, is_internal=False,
                                    partitions=[], authorized_operations=topic_ops))
                    continue
                count = self._auto_create(name, user)
            if count is None:
                code = K.INVALID_TOPIC_EXCEPTION if unmapped or not name else K.UNKNOWN_TOPIC_OR_PARTITION
                topics.append(T(error_code=code, name=name, is_internal=False, partitions=[],
                                authorized_operations=topic_ops))
                continue
            parts = [
                P(error_code=K.NONE, partition_index=index, leader_id=node, leader_epoch=0,
                  replica_nodes=[node], isr_nodes=[node], offline_replicas=[])
                for index in range(count)
            ]
            topics.append(T(error_code=K.NONE, name=name, is_internal=False, partitions=parts,
                            authorized_operations=topic_ops))
        host, port = caller.advertised
        return MetadataResponse(
            throttle_time_ms=0,
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=node, host=host, port=port, rack=None)],
            cluster_id="logbus",
            controller_id=self.node_id,
            topics=topics,
            authorized_operations=cluster_ops,
        )

    def _auto_create(self, name: str, user: str | None) -> int | None:
        """Create topic ``name`` with the broker's defaults; its partition count, or None
        when it cannot be created (or Kafka clients may not configure it)."""
        if not self.allowed(user, "configure", name):
            log.info("not auto-creating topic %r: configure access refused for user %r", name, user)
            return None
        try:
            self.topics.create_topic(name)
        except LogbusError as e:
            log.info("not auto-creating topic %r: %s", name, e)
            return None
        return self.streams.partition_count(name)

    # -- Produce ----------------------------------------------------------------------

    def produce(self, req: Request, caller: Caller) -> Any:
        body = req.body
        streams = self.streams
        pending: list[Deferred[Any]] = []
        slots: list[tuple[str, int]] = []
        for td in body.topic_data:
            if not self.allowed(caller.user, "write", td.name):
                for pd in td.partition_data:
                    slots.append((td.name, pd.index))
                    pending.append(succeed(K.TOPIC_AUTHORIZATION_FAILED))
                continue
            if td.name in INTERNAL_TOPICS:  # as Kafka: no client appends to an internal topic
                for pd in td.partition_data:
                    slots.append((td.name, pd.index))
                    pending.append(succeed(K.INVALID_TOPIC_EXCEPTION))
                continue
            count = streams.partition_count(td.name)
            if count is None and self.auto_create_topics and not isinstance(td.name, Unmapped):
                count = self._auto_create(td.name, caller.user)
            vhost, exchange = topic_exchange(td.name)
            by_key = caller.user is not None and self.doors.topic_restricted(caller.user, vhost, exchange)
            for pd in td.partition_data:
                slots.append((td.name, pd.index))
                if count is None or not 0 <= pd.index < count:
                    pending.append(succeed(K.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                records = bytes(pd.records or b"")
                if by_key and not self._keys_allowed(caller.user, td.name, records):
                    pending.append(succeed(K.TOPIC_AUTHORIZATION_FAILED))
                    continue
                if td.name == HALVES_TOPIC and not self._half_targets_allowed(caller.user, records):
                    pending.append(succeed(K.TOPIC_AUTHORIZATION_FAILED))
                    continue
                pending.append(streams.produce(td.name, pd.index, records).addCallback(
                    _counted, caller.record, body.acks != 0))
        if body.acks == 0:
            for d in pending:
                d.addErrback(lambda f: log.info("acks=0 produce failed: %s", f.getErrorMessage()))
            return None

        T = ProduceResponse.TopicProduceResponse
        P = T.PartitionProduceResponse

        def build(results: list[tuple[bool, Any]]) -> Any:
            by_topic: dict[str, list[Any]] = {}
            for (name, index), (ok, value) in zip(slots, results):
                if not ok:
                    code, base, start = K.code_for(value.value), -1, -1
                    message = value.getErrorMessage()
                elif isinstance(value, int):
                    code, base, start, message = value, -1, -1, None
                else:
                    code, base, start, message = K.NONE, value.base_offset, value.log_start_offset, None
                by_topic.setdefault(name, []).append(
                    P(index=index, error_code=code, base_offset=base, log_append_time_ms=-1,
                      log_start_offset=start, record_errors=[], error_message=message)
                )
            topics = [T(name=name, partition_responses=parts) for name, parts in by_topic.items()]
            return ProduceResponse(responses=topics, throttle_time_ms=0)

        return DeferredList(pending, consumeErrors=True).addCallback(build)

    def _half_targets_allowed(self, user: str | None, records: bytes) -> bool:
        """Half messages sent as records of ``HALVES_TOPIC`` (docs/transactions.md): the
        producer must be allowed to write each one's target topic, where a commit
        publishes it."""
        try:
            targets = {v.decode("utf-8", "replace") for batch in _batches(records) for r in batch
                       for k, v in r.headers if k == HALF_TARGET_HEADER and v is not None}
        except Exception:  # noqa: BLE001 -- a batch that does not decode: Streams.produce says why
            return True
        refused = [t for t in targets if not self.allowed(user, "write", t)]
        if refused:
            log.info("kafka half message to %r refused for user %r: no write on it", refused[0], user)
        return not refused

    def _keys_allowed(self, user: str | None, topic: str, records: bytes) -> bool:
        """A user held to topic permissions on the topic's exchange (as an AMQP publisher
        to a topic exchange): each record's key is its routing key, and every one must
        be allowed, or nothing of the batch is appended."""
        if user is None:
            return False
        try:
            keys = {r.key or b"" for batch in _batches(records) for r in batch}
        except Exception:  # noqa: BLE001 -- a batch that does not decode: Streams.produce says why
            return True
        try:
            for key in keys:
                self.doors.authorize_topic(user, "write", topic, key.decode("utf-8", "replace"))
        except Refused:
            log.info("kafka produce to %r refused for user %r: a record key its topic permission does not allow",
                     topic, user)
            return False
        return True

    # -- InitProducerId -----------------------------------------------------------------

    def init_producer_id(self, req: Request, caller: Caller) -> Any:
        """An idempotent producer's id: a fresh one (or, KIP-360, the same id with the
        next epoch). Ids come from blocks reserved in the state store, so they never
        repeat across restarts. With a transactional id: transactions.py."""
        body = req.body
        pid = getattr(body, "producer_id", -1)
        epoch = getattr(body, "producer_epoch", -1)
        if pid is not None and pid >= 0 and epoch is not None and epoch >= 0:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=K.NONE, producer_id=pid,
                                          producer_epoch=epoch + 1)
        try:
            pid = self.streams.new_producer_id()
        except StorageError as e:  # no block of ids could be reserved: retriable
            log.warning("InitProducerId: no producer id, the state store refused a write: %s", e)
            return InitProducerIdResponse(throttle_time_ms=0, error_code=K.COORDINATOR_NOT_AVAILABLE,
                                          producer_id=-1, producer_epoch=-1)
        return InitProducerIdResponse(throttle_time_ms=0, error_code=K.NONE, producer_id=pid, producer_epoch=0)

    # -- Fetch ------------------------------------------------------------------------

    def fetch(self, req: Request, caller: Caller) -> Any:
        """Answer at once when ``min_bytes`` are there (or max_wait_ms is 0); otherwise
        wait, woken by every partition asked for when its high watermark moves, until
        ``min_bytes`` are there or ``max_wait_ms`` has passed."""
        body = req.body
        record = caller.record
        resp, size, records = self._read(req, caller.user)
        if size >= body.min_bytes or body.max_wait_ms <= 0:
            if record is not None:
                record.sent += records
            return resp
        d: Deferred[Any] = Deferred()

        def finish(answer: Any, records: int) -> None:
            if d.called:  # a read that drained an append woke this fetch and answered it
                return
            if timer.active():
                timer.cancel()
            unwatch()
            if record is not None:
                record.sent += records
            d.callback(answer)

        def wake() -> None:
            if d.called:
                return
            answer, got, records = self._read(req, caller.user)
            if got >= body.min_bytes:
                finish(answer, records)

        def expired() -> None:
            answer, _, records = self._read(req, caller.user)  # may drain appends, and so wake() first
            finish(answer, records)

        unwatch = self.streams.watch([(ft.topic, fp.partition) for ft in body.topics for fp in ft.partitions], wake)
        timer = self.reactor.callLater(body.max_wait_ms / 1000.0, expired)
        return d

    def _read(self, req: Request, user: str | None) -> tuple[Chunks, int, int]:
        """Read every partition asked for; the response is encoded at once as chunks in
        which the records are ranges of segment files, sent by the connection with
        sendfile (codec.encode_fetch_response, protocol.OutputQueue). Returns it, its
        record bytes and its records from the fetch offsets on (what the client takes:
        its messages out; a batch's records before the fetch offset are skipped by
        the client, and its end is known from the read without opening a header)."""
        body = req.body
        streams = self.streams
        committed = req.api_version >= 4 and body.isolation_level == READ_COMMITTED
        remaining = body.max_bytes if body.max_bytes > 0 else 1 << 30
        total = records = 0
        topics = []
        for ft in body.topics:
            count = streams.partition_count(ft.topic)
            parts = []
            refused = not self.allowed(user, "read", ft.topic)
            internal = streams.internal_topics() if ft.topic in INTERNAL_TOPICS else {}
            if ft.topic in internal and not refused:  # empty to a client
                parts = [FetchPartition(fp.partition, K.NONE if 0 <= fp.partition < internal[ft.topic]
                                        else K.UNKNOWN_TOPIC_OR_PARTITION, 0, 0, 0, b"") for fp in ft.partitions]
                topics.append((ft.topic, parts))
                continue
            for fp in ft.partitions:
                if refused:
                    parts.append(FetchPartition(fp.partition, K.TOPIC_AUTHORIZATION_FAILED, -1, -1, -1, b""))
                    continue
                if count is None or not 0 <= fp.partition < count:
                    parts.append(FetchPartition(fp.partition, K.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1, b""))
                    continue
                limit = min(fp.partition_max_bytes, remaining) if total else fp.partition_max_bytes
                spans: list[FileSpan]
                aborted: list[tuple[int, int]] = []
                try:
                    if limit > 0:
                        r = streams.read_spans(ft.topic, fp.partition, fp.fetch_offset, limit, committed)
                        spans, hw, start = r.spans, r.high_watermark, r.log_start_offset
                        if spans:
                            records += max(0, r.next_offset - fp.fetch_offset)
                            if committed:
                                aborted = [(a.producer_id, a.first_offset) for a in streams.aborted_transactions(
                                    ft.topic, fp.partition, r.first_offset, r.next_offset)]
                    else:
                        o = streams.offsets(ft.topic, fp.partition)
                        spans, hw, start = [], o.high_watermark, o.log_start_offset
                    lso = streams.last_stable_offset(ft.topic, fp.partition)
                except OffsetOutOfRange:
                    o = streams.offsets(ft.topic, fp.partition)
                    hw = o.high_watermark
                    parts.append(FetchPartition(fp.partition, K.OFFSET_OUT_OF_RANGE, hw, hw, o.log_start_offset, b""))
                    continue
                size = sum(s.size for s in spans)
                total += size
                remaining -= size
                parts.append(FetchPartition(fp.partition, K.NONE, hw, lso, start, spans, aborted))
            topics.append((outbound(ft.topic) or ft.topic, parts))
        return encode_fetch_response(req.api_version, req.correlation_id, K.NONE, topics), total, records

    # -- ListOffsets ------------------------------------------------------------------

    def list_offsets(self, req: Request, caller: Caller) -> Any:
        streams = self.streams
        T = ListOffsetsResponse.ListOffsetsTopicResponse
        P = T.ListOffsetsPartitionResponse
        topics = []
        for t in req.body.topics:
            internal = streams.internal_topics() if t.name in INTERNAL_TOPICS else {}
            parts = []
            described = self.access.topic(caller.user, DESCRIBE, t.name)
            for lp in t.partitions:
                if not described:
                    parts.append(P(partition_index=lp.partition_index, error_code=K.TOPIC_AUTHORIZATION_FAILED,
                                   old_style_offsets=[], timestamp=-1, offset=-1, leader_epoch=-1))
                    continue
                if t.name in internal and 0 <= lp.partition_index < internal[t.name]:  # empty
                    parts.append(P(partition_index=lp.partition_index, error_code=K.NONE,
                                   old_style_offsets=[0], timestamp=-1, offset=0, leader_epoch=0))
                    continue
                try:
                    o = streams.offsets(t.name, lp.partition_index)
                except LogbusError:
                    parts.append(P(partition_index=lp.partition_index, error_code=K.UNKNOWN_TOPIC_OR_PARTITION,
                                   old_style_offsets=[], timestamp=-1, offset=-1, leader_epoch=-1))
                    continue
                if lp.timestamp == LATEST:
                    committed = req.api_version >= 2 and req.body.isolation_level == READ_COMMITTED
                    ts, off = -1, streams.last_stable_offset(t.name, lp.partition_index) if committed \
                        else o.high_watermark
                elif lp.timestamp == EARLIEST:
                    ts, off = -1, o.log_start_offset
                else:
                    found = streams.offset_for_time(t.name, lp.partition_index, lp.timestamp)
                    off, ts = found if found is not None else (-1, -1)
                parts.append(P(partition_index=lp.partition_index, error_code=K.NONE,
                               old_style_offsets=[off], timestamp=ts, offset=off, leader_epoch=0))
            topics.append(T(name=t.name, partitions=parts))
        return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


class HandlerPart:
    """A group of API handlers kept in a module of its own (admin, configs): it reaches
    the ports through the KafkaHandlers that install it."""

    def __init__(self, handlers: KafkaHandlers) -> None:
        self.handlers = handlers
        self.streams = handlers.streams
        self.topics = handlers.topics


def _counted(result: Any, record: ConnectionRecord | None, confirmed: bool) -> Any:
    """A produce's records counted on its connection (received; confirmed with acks)."""
    if record is not None and hasattr(result, "last_offset"):
        n = result.last_offset - result.base_offset + 1
        record.received += n
        if confirmed:
            record.confirmed += n
    return result
