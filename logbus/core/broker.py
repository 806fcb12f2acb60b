"""The facade every gateway calls. It owns the data directory (lock), the state store,
the log, the vhosts of the queue model and the metrics, and offers topic admin and publish.

    broker = Broker(Path("data"), reactor=reactor)
    broker.start()                      # lock, open state, recover the log
    info = broker.create_topic("t", {"partitions": 3, "flush": "sync"})
    d = broker.append("t", 0, [Record(b"k", b"v")])   # Deferred[AppendResult], fires when durable
    yield broker.stop()                 # flush everything, clean-shutdown marker, unlock
"""

from __future__ import annotations

import fcntl
import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import LoopingCall

from .errors import (  # noqa: F401  (re-exported)
    DataDirLocked,
    InvalidConfig,
    LogbusError,
    OffsetOutOfRange,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)
from .log import AppendResult, LogManager, Record
from .log.batch import BatchInfo, now_ms
from .log.topic_config import TopicConfig, validate_topic_name
from .metrics import Metrics
from .pressure import (
    DEFAULT_DISK_FREE_LIMIT,
    DEFAULT_MEMORY_HIGH_WATERMARK,
    AlarmCollector,
    ResourceMonitor,
)
from .access.auth import Access, AccessChange, InvalidAccess, VHostInfo, check_name
from .routing.log_topics import DEFAULT_EXCHANGE_TOPIC, key_partition, vhost_topic
from .routing.router import PREDECLARED
from .state import TOPIC_PREFIX, StateStore, topic_key, vhost_definitions_prefixes
from .state_pb2 import TopicRecord
from .streams.groups import GroupCoordinator
from ..retry.policy import POP_DEFAULT, RetryPolicy
from .message import Message
from .queues.journal import QueueStore
from .queues.msgstore import MessageStore, log_batch_reader
from .queues.pop import Popped, PopGroups, check_delay
from .queues.replay import DeadLetterReplay
from .queues.feed import Feed, VHostFactory, VHostModel
from .queues.timers import Timers
from .streams.producers import ProducerRegistry
from .streams.produce import produce as produce_batches
from .types import (
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

log = logging.getLogger(__name__)


CF_METADATA = "metadata"
EXCHANGE_TOPIC_SLACK = 1 << 20  # a record's envelope, headers and framing beside its body


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    log_start_offset: int
    log_end_offset: int
    segments: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    config: dict[str, Any]
    partitions: list[PartitionInfo] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "partitions": len(self.partitions),
            "config": self.config,
            "partition_detail": [
                {
                    "partition": p.partition,
                    "log_start_offset": p.log_start_offset,
                    "log_end_offset": p.log_end_offset,
                    "segments": p.segments,
                    "size_bytes": p.size_bytes,
                }
                for p in self.partitions
            ],
        }


HOUSEKEEPING_SECONDS = 10.0
EXPIRY_SECONDS = 0.1  # how often queues drop expired messages (x-message-ttl)
PRESSURE_SECONDS = 1.0  # how often memory and disk are checked against their limits


class Broker:
    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        reactor: Any = None,
        topic_defaults: TopicConfig | None = None,
        max_open_files: int = 1024,
        memory_high_watermark: float = DEFAULT_MEMORY_HIGH_WATERMARK,
        disk_free_limit: int = DEFAULT_DISK_FREE_LIMIT,
        default_user: str = "guest",
        default_pass: str = "guest",
        loopback_users: Sequence[str] = ("guest",),
        queue_max_message_bytes: int = 128 << 20,
        pop_retry: RetryPolicy = POP_DEFAULT,
        vhost_model: VHostFactory | None = None,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.data_dir = Path(data_dir)
        self.reactor = reactor
        self.metrics = Metrics()
        self.topic_defaults = topic_defaults or TopicConfig()
        self.max_open_files = max_open_files
        # the largest message a queue-model publish carries (the AMQP gateway's
        # max_message_size): topics created for exchanges take batches that large
        self.queue_max_message_bytes = queue_max_message_bytes
        self.pop_retry = pop_retry  # pop groups' backoff and delivery limit
        # how a vhost's queue model is made (the AMQP gateway's); None: no vhost is opened
        self.vhost_model = vhost_model
        # Made here, not at start, so gateways built before start can subscribe to it.
        self.pressure = ResourceMonitor(self.data_dir, memory_high_watermark=memory_high_watermark,
                                        disk_free_limit=disk_free_limit)
        self.metrics.registry.register(AlarmCollector(self.pressure))
        self._pressure: LoopingCall | None = None
        self.state: StateStore | None = None
        self.producers = ProducerRegistry(None)  # replaced at start, with the store
        self.groups = GroupCoordinator(reactor)  # consumer groups (the Kafka gateway's)
        self._dlq_replay = DeadLetterReplay(
            lambda: self._log, self.groups, lambda t, ms, p: self.publish(t, ms, partition=p),
            lambda g: any(name == g for name, _, _ in self.pop.groups()))
        # Users, vhosts, permissions: made here so gateways can subscribe before start.
        self.access = Access(loopback_users=loopback_users)
        self.default_user, self.default_pass = default_user, default_pass
        # The queue model (AMQP), one VHost per stored vhost, opened at start. Always THIS
        # dict: connections look their vhost up in it, so it is changed in place.
        self.vhosts: dict[str, VHostModel] = {}
        self._expiry: LoopingCall | None = None
        self.log: LogManager | None = None
        self._lock_fd: int | None = None
        self._housekeeping: LoopingCall | None = None

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Lock the data directory, open the state store and recover every topic."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            self.state = StateStore(self.data_dir / "state")
            self.producers = ProducerRegistry(self.state)
            offsets = self.groups.open(self.state)
            self.log = LogManager(
                self.data_dir,
                self.reactor,
                max_open_files=self.max_open_files,
                metrics=self.metrics,
            )
            for _, value in self.state.scan_prefix(CF_METADATA, TOPIC_PREFIX):
                rec = TopicRecord.FromString(value)
                topic = self.log.open_topic(rec.name, self._config_of(rec))
                for p, start in zip(topic.partitions, rec.log_start_offsets):
                    p.advance_start(start)
        except BaseException:
            self._close_all()
            raise
        self._open_vhosts()
        self._housekeeping = LoopingCall(self.housekeeping)
        self._housekeeping.clock = self.reactor
        self._housekeeping.start(HOUSEKEEPING_SECONDS, now=False)
        self._expiry = LoopingCall(self._expire)
        self._expiry.clock = self.reactor
        self._expiry.start(EXPIRY_SECONDS, now=False)
        self._pressure = LoopingCall(self.pressure.check)
        self._pressure.clock = self.reactor
        self._pressure.start(PRESSURE_SECONDS, now=True)  # alarms are known before any listener
        log.info(
            "broker started on %s: %d topics, %d committed group offsets (%s)",
            self.data_dir,
            len(self.log.topics),
            offsets,
            "new data directory" if self.log.fresh
            else "clean restart" if self.log.clean_start
            else "recovered after an unclean stop",
        )

    def _open_vhosts(self) -> None:
        """Every stored vhost, with its durable exchanges, queues and bindings; on a fresh
        data directory (RabbitMQ's first boot) vhost "/" and the default user first."""
        assert self.log is not None and self.state is not None
        self.queue_store = QueueStore(self.state, self.reactor)
        self.timers = Timers(self.queue_store, self.state, self._clock, self.reactor)
        self.access.open(self.state)
        self.access.seed(self.default_user, self.default_pass)
        self.vhosts.clear()
        self.pop = PopGroups(self.state, self.queue_store, self.timers, MessageStore(log_batch_reader(self.log)),
                             clock=self._clock, dead_letter=self._append_dead_letter, retry=self.pop_retry)
        self.pop.load()
        self.feed = Feed(self.vhosts, self.pop, self.timers, MessageStore(log_batch_reader(self.log)), self._clock)
        for name in self.access.vhosts:
            self._open_vhost(name)
        self.timers.arm(self.feed.timers_due)

    def _clock(self) -> int:
        return int(self.reactor.seconds() * 1000)

    def _hook(self, vhost: VHostModel) -> None:
        vhost.watches = self.pop.watches
        vhost.appended = self.pop.appended
        vhost.delay = self.feed.delay

    def delay(self, topic: str, partition: int, offset: int, due_ms: int, **where: str) -> None:
        """Route the record at ``offset`` when ``due_ms`` comes (``Feed.delay``)."""
        self.feed.delay(topic, partition, offset, due_ms, **where)

    def route_appended(self, topic: str, partition: int, base: int, data: bytes, infos: list[BatchInfo]) -> int:
        """Kafka-produced batches just appended at ``base``, to the queues that read
        ``topic`` (``Feed.route_appended``): the append stands whatever happens there."""
        return self.feed.route_appended(topic, partition, base, data, infos)

    def _open_vhost(self, name: str) -> VHostModel | None:
        assert self.log is not None
        if self.vhost_model is None:
            return None
        vhost = self.vhost_model(name, self.log, self._create_exchange_topic, self.queue_store,
                      clock=self._clock, store=self.state, topic_owner=self._topic_owner, timers=self.timers)
        self._hook(vhost)
        vhost.load()
        self.vhosts[name] = vhost
        return vhost

    def _create_exchange_topic(self, topic: str) -> TopicInfo:
        """The topic behind an exchange, created on first use: its max.message.bytes fits
        the largest queue-model message with its envelope and record framing."""
        largest = self.queue_max_message_bytes + EXCHANGE_TOPIC_SLACK
        return self.create_topic(topic, {"max.message.bytes": max(largest, self.topic_defaults.max_message_bytes)})

    def _topic_owner(self, topic: str) -> str | None:
        """Which exchange, in any vhost, ``topic`` backs (vhost "/" exchange names may hold
        the ``@`` that other vhosts' topic names use)."""
        for vhost in self.vhosts.values():
            ex = vhost.router.exchange_for_topic(topic)
            if ex is not None:
                return f"exchange '{ex.name}' in vhost '{vhost.name}'"
        return None

    # -- vhosts ---------------------------------------------------------------------------

    def create_vhost(self, name: str, description: str = "", tags: Any = None) -> bool:
        """Create (and open) a vhost, or update its description and tags; True when new.
        Refused (InvalidAccess) when its exchanges' log topics could not be named."""
        check_name("vhost", name)
        for topic in [vhost_topic(name, DEFAULT_EXCHANGE_TOPIC), *(vhost_topic(name, x) for x in PREDECLARED)]:
            try:
                validate_topic_name(topic)
            except LogbusError as exc:
                raise InvalidAccess(f"vhost name {name!r} cannot name its log topics ({topic!r}: {exc})") from None
        new = self.access.put_vhost(name, description, tags)
        if new and self.log is not None:
            self._open_vhost(name)
            log.info("created vhost %r", name)
        return new

    def delete_vhost(self, name: str) -> None:
        """Delete a vhost: its connections are closed (gateways hear of it first), then its
        exchanges, queues, bindings, queue entries and permissions are deleted from the
        state store in one batch. Its log topics stay, with their data."""
        self.access.vhost(name)  # UnknownVHost
        self.access.announce(AccessChange("vhost_deleted", name))
        self.vhosts.pop(name, None)
        assert self.state is not None
        self.queue_store.commit()  # what closing connections wrote, before it is deleted
        with self.state.batch(sync=True) as b:
            for cf, prefix in vhost_definitions_prefixes(name):
                for key, _ in self.state.scan_prefix(cf, prefix):
                    b.delete(cf, key)
            self.access.forget_vhost(name, b)
        log.info("deleted vhost %r (its log topics are kept)", name)

    def vhost(self, name: str) -> VHostModel | None:
        """The open vhost ``name``'s model (the AMQP room's ``VHost``), None if none."""
        return self.vhosts.get(name)

    def list_vhosts(self) -> list[VHostInfo]:
        return [self.access.vhosts[n] for n in sorted(self.access.vhosts)]

    def housekeeping(self, now_ms: int | None = None) -> int:
        """The log's segment rolling and retention, guarded: a segment any queue entry or
        pending timer (a delayed message, a retry) points into is kept, however old (a
        queue's message is never lost to retention).
        The queues are scanned only when some segment is due, once per pass."""
        floors: dict[tuple[str, int], int] | None = None

        def keep_from(topic: str, partition: int) -> int | None:
            nonlocal floors
            if floors is None:
                floors = {}
                for vhost in self.vhosts.values():
                    vhost.queue_floors(floors)
                self.pop.service.floors(floors)
                self.timers.floors(floors)  # delayed messages and retries wait in the log too
            return floors.get((topic, partition))

        return self._log.housekeeping(now_ms, keep_from)

    def _expire(self) -> None:
        for vhost in self.vhosts.values():
            vhost.expire()
        self.pop.service.tick()

    def stop(self) -> Deferred[None]:
        """Flush everything, mark the shutdown clean and release the data directory."""
        for call in (self._housekeeping, self._expiry, self._pressure):
            if call is not None and call.running:
                call.stop()
        if self.vhosts:
            self.timers.disarm()
            for vhost in self.vhosts.values():
                vhost.service.stop()
            self.pop.service.stop()
            self.queue_store.commit()
            self.vhosts.clear()
        self._close_all()
        return succeed(None)

    def _close_all(self) -> None:
        self.groups.shutdown()  # waiting joins and syncs: COORDINATOR_NOT_AVAILABLE
        if self.log is not None:
            self.log.close()
            self.log = None
        if self.state is not None:
            self.state.close()
            self.state = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _lock(self) -> None:
        path = self.data_dir / "LOCK"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataDirLocked(
                f"data directory {self.data_dir} is in use by another logbus (pid {holder}); "
                "stop it or choose another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    @property
    def _log(self) -> LogManager:
        if self.log is None:
            raise RuntimeError("broker is not started")
        return self.log

    # -- topics ---------------------------------------------------------------------

    def _config_of(self, rec: Any) -> TopicConfig:
        values: dict[str, Any] = dict(rec.config)
        values["partitions"] = rec.partitions
        return TopicConfig.from_mapping(values, base=self.topic_defaults)

    def create_topic(self, name: str, settings: Mapping[str, Any] | None = None) -> TopicInfo:
        validate_topic_name(name)
        config = TopicConfig.from_mapping(settings or {}, base=self.topic_defaults)
        lm = self._log
        if name in lm.topics:
            raise TopicExists(f"topic {name!r} already exists")
        stored = {k: str(v) for k, v in config.to_mapping().items() if k != "partitions"}
        rec = TopicRecord(name=name, partitions=config.partitions, config=stored, created_ms=now_ms())
        assert self.state is not None
        self.state.put(CF_METADATA, topic_key(name), rec, sync=True)
        try:
            lm.open_topic(name, config, create=True)
        except BaseException:
            self.state.delete(CF_METADATA, topic_key(name), sync=True)
            raise
        log.info("created topic %r with %d partitions", name, config.partitions)
        return self.describe_topic(name)

    def grow_topic(self, name: str, partitions: int) -> TopicInfo:
        """Add partitions to a topic (never fewer): the new count is recorded first, then
        the partitions are opened; if opening fails the old record is put back."""
        lm = self._log
        topic = lm.topic(name)
        if partitions < len(topic.partitions):
            raise InvalidConfig(f"topic {name!r} has {len(topic.partitions)} partitions; it cannot shrink to {partitions}")
        assert self.state is not None
        key = topic_key(name)
        old = self.state.get_msg(CF_METADATA, key, TopicRecord)
        if old is None:
            raise UnknownTopic(f"topic {name!r} has no metadata record")
        new = TopicRecord()
        new.CopyFrom(old)
        new.partitions = partitions
        self.state.put(CF_METADATA, key, new, sync=True)
        try:
            lm.open_topic(name, replace(topic.config, partitions=partitions))
        except BaseException:
            self.state.put(CF_METADATA, key, old, sync=True)
            raise
        log.info("topic %r now has %d partitions", name, partitions)
        return self.describe_topic(name)

    def alter_topic(self, name: str, settings: Mapping[str, Any], *, validate_only: bool = False) -> TopicInfo:
        """Change a topic's settings: each one named is set, or put back to the broker's
        default when its value is None; the others stay. The partition count is not
        changed here (``grow_topic``). The new settings are recorded first, then applied
        to the live partitions; ``validate_only`` stops after the checks."""
        lm = self._log
        topic = lm.topic(name)
        defaults = self.topic_defaults.to_mapping()
        values: dict[str, Any] = {}
        for key, value in settings.items():
            if value is None:
                if key not in defaults:
                    raise InvalidConfig(f"unknown topic setting {key!r} (known: {', '.join(sorted(defaults))})")
                value = defaults[key]
            values[key] = value
        config = TopicConfig.from_mapping(values, base=topic.config)
        if config.partitions != len(topic.partitions):
            raise InvalidConfig(f"topic {name!r} has {len(topic.partitions)} partitions: the count is changed "
                                "by adding partitions (Kafka CreatePartitions), not by a setting")
        if validate_only:
            return TopicInfo(name, config.to_mapping(), self.describe_topic(name).partitions)
        rec = self._topic_record(name)
        rec.config.clear()
        rec.config.update({k: str(v) for k, v in config.to_mapping().items() if k != "partitions"})
        assert self.state is not None
        self.state.put(CF_METADATA, topic_key(name), rec, sync=True)
        lm.reconfigure(name, config)
        log.info("topic %r settings changed: %s", name, ", ".join(f"{k}={v}" for k, v in sorted(values.items())))
        return self.describe_topic(name)

    def delete_records(self, topic: str, offsets: Mapping[int, int]) -> dict[int, int | LogbusError]:
        """Kafka's DeleteRecords: move each partition's log start offset forward to the
        given offset (-1: the high watermark). Per partition, the new log start offset or
        the error (UnknownPartition; OffsetOutOfRange past the high watermark). The new
        starts are recorded (one synced put) before readers see them; whole segments
        below them are deleted by housekeeping."""
        t = self._log.topic(topic)
        results: dict[int, int | LogbusError] = {}
        moves: dict[int, int] = {}
        for index, offset in offsets.items():
            if not 0 <= index < len(t.partitions):
                results[index] = UnknownPartition(f"topic {topic!r} has no partition {index}")
                continue
            p = t.partitions[index]
            hw = p.high_watermark
            target = hw if offset == -1 else offset
            if not 0 <= target <= hw:
                results[index] = OffsetOutOfRange(f"offset {offset} is not in [0, {hw}] (the high watermark) "
                                                  f"of {topic}/{index}")
            elif target > p.log_start_offset:
                moves[index] = target
        if moves:
            rec = self._topic_record(topic)
            starts = list(rec.log_start_offsets) + [0] * (len(t.partitions) - len(rec.log_start_offsets))
            for index, target in moves.items():
                starts[index] = target
            del rec.log_start_offsets[:]
            rec.log_start_offsets.extend(starts)
            assert self.state is not None
            self.state.put(CF_METADATA, topic_key(topic), rec, sync=True)
            for index, target in moves.items():
                t.partitions[index].advance_start(target)
                log.info("records of %s/%d below offset %d deleted", topic, index, target)
        return {i: results[i] if i in results else t.partitions[i].log_start_offset for i in offsets}

    def _topic_record(self, name: str) -> TopicRecord:
        assert self.state is not None
        rec = self.state.get_msg(CF_METADATA, topic_key(name), TopicRecord)
        if rec is None:
            raise UnknownTopic(f"topic {name!r} has no metadata record")
        return rec

    def delete_topic(self, name: str) -> None:
        lm = self._log
        lm.topic(name)  # UnknownTopic
        assert self.state is not None
        # files first: a crash in between leaves the record of a topic with no files,
        # which opens empty, never files without a record, which no create may delete
        lm.delete_topic(name)
        self.state.delete(CF_METADATA, topic_key(name), sync=True)
        self.producers.forget_topic(name)
        self.groups.forget_topic(name)
        log.info("deleted topic %r", name)

    def describe_topic(self, name: str) -> TopicInfo:
        t = self._log.topic(name)
        parts = [
            PartitionInfo(p.index, p.log_start_offset, p.log_end_offset, len(p.segments), p.size_bytes)
            for p in t.partitions
        ]
        return TopicInfo(t.name, t.config.to_mapping(), parts)

    def list_topics(self) -> list[TopicInfo]:
        return [self.describe_topic(n) for n in sorted(self._log.topics)]

    # -- data -----------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: Sequence[Record]) -> Deferred[AppendResult]:
        """Append ``records`` to one partition; fires once durable per the flush policy."""
        d = self._log.partition(topic, partition).append(records)
        assert d is not None  # without a callback, append returns its Deferred
        return d

    # -- publish (HTTP) and pop ------------------------------------------------------------

    def publish(self, topic: str, messages: Sequence[Message], *, partition: int | None = None) -> Deferred[list[int]]:
        """Append ``messages`` to ``topic`` (one partition: ``partition``, else chosen by
        the first message's key) and hand them to the queues that read the topic (at
        their deliver-at time if in the future). Fires with their offsets once durable
        per the topic's flush policy."""
        t = self._log.topic(topic)
        n = len(t.partitions)
        if partition is None:
            partition = key_partition(messages[0].key if messages else None, n)
        if not 0 <= partition < n:
            raise UnknownPartition(f"topic {topic!r} has no partition {partition}")
        now = self._clock()
        for m in messages:
            if m.envelope.deliver_at_ms:
                check_delay(max(0, m.envelope.deliver_at_ms - now))
        p = t.partitions[partition]
        base = p.next_offset
        d = p.append([m.to_record() for m in messages])
        assert d is not None
        for i, m in enumerate(messages):
            due = m.envelope.deliver_at_ms
            if due > now:
                self.feed.delay(topic, partition, base + i, due)
            else:
                self.feed.record(topic, partition, base + i, m)
        return d.addCallback(lambda _: list(range(base, base + len(messages))))

    def partition_for(self, topic: str, key: bytes | None) -> int:
        """The partition ``publish`` picks for a first message with ``key``."""
        return key_partition(key, len(self._log.topic(topic).partitions))

    def pop_receive(self, group: str, topic: str, member: str, n: int, invisible_ms: int) -> list[Popped]:
        """Pop: up to ``n`` messages of ``topic`` for ``group``, invisible to the group's
        other members for ``invisible_ms`` unless acked or changed. The group is created
        on first use and gets what is appended from then on."""
        self._log.topic(topic)  # UnknownTopic
        return self.pop.receive(group, topic, member, n, invisible_ms)

    def pop_receive_wait(self, group: str, topic: str, member: str, n: int, invisible_ms: int,
                         wait_ms: int) -> Deferred[list[Popped]]:
        """``pop_receive``, waiting up to ``wait_ms`` for a first message (long polling)."""
        self._log.topic(topic)  # UnknownTopic
        return self.pop.receive_wait(group, topic, member, n, invisible_ms, wait_ms, self.reactor.callLater)

    def pop_ack(self, group: str, topic: str, handle: str) -> None:
        self.pop.ack(group, topic, handle)

    def pop_nack(self, group: str, topic: str, handle: str) -> None:
        self.pop.nack(group, topic, handle)

    def pop_change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> None:
        self.pop.change_invisible(group, topic, handle, invisible_ms)

    def pop_groups(self) -> list[dict[str, Any]]:
        return [{"group": g, "topic": t, "ready": qs.queue.message_count, "invisible": qs.queue.unacked_count}
                for g, t, qs in self.pop.groups()]

    def _append_dead_letter(self, topic: str, message: Message) -> None:
        """A dead-lettered copy to ``topic`` (a pop group's ``%DLQ%<group>``), created on
        first use with the broker's defaults."""
        lm = self._log
        if topic not in lm.topics:
            self.create_topic(topic, {"partitions": 1})
        try:
            self.publish(topic, [message], partition=0).addErrback(
                lambda f: log.warning("dead letter to %r failed: %s", topic, f.value))
        except LogbusError as e:
            log.warning("dead letter to %r refused: %s", topic, e)

    def dlq_replay(self, group: str, topic: str | None = None, max: int | None = None) -> Deferred[dict[str, Any]]:
        """Publish ``group``'s dead letters (topic ``%DLQ%<group>``) not yet replayed
        again to the topics they died in (only ``topic`` if given; at most ``max``, else
        ``queues.replay.MAX_REPLAY``), as new messages that every queue reading those
        topics gets. Fires with the counts once they are durable and the group's replay
        cursor is committed (core/queues/replay.py)."""
        return self._dlq_replay.run(group, topic, max)

    # -- the stream model: produce, read, offsets, producer ids, consumer groups -----------
    #
    # What a gateway of the stream model (Kafka) needs, so that it holds only the broker:
    # the log, the producer registry and the group coordinator stay behind these methods.
    # Value types: core/types.py.

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
