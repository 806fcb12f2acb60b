"""Topic administration, a service the broker owns (``broker.topics``, ``ports.Topics``):
each topic's record in the state store (``TopicRecord`` in the ``metadata`` column family:
partition count, settings, log start offsets) and its partitions in the log, changed
together. ``TopicInfo`` and ``PartitionInfo`` are what it returns; ``TopicReaders`` is the
queue model's side of a deletion.

    topics = TopicService(defaults, forget=streams.forget_topic)
    topics.open(state, log)                  # every recorded topic opened in the log
    info = topics.create_topic("t", {"partitions": 3})
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .errors import (
    InvalidConfig,
    LogbusError,
    OffsetOutOfRange,
    RecordGone,
    TopicExists,
    TopicInUse,
    UnknownPartition,
    UnknownTopic,
)
from .log import LogManager
from .log.batch import now_ms
from .log.topic_config import TopicConfig, validate_topic_name
from .state import CF_METADATA, CF_TIMERS, TOPIC_PREFIX, StateStore, topic_key
from .state_pb2 import TimerRecord, TopicRecord

if TYPE_CHECKING:
    from .queues.journal import QueueStore
    from .queues.msgstore import MessageStore
    from .queues.service import QueueService
    from .queues.timers import Timers
    from .vhost import VHost

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    log_start_offset: int
    log_end_offset: int
    segments: int
    size_bytes: int
    records_appended: int = 0  # since start


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
                    "records_appended": p.records_appended,
                }
                for p in self.partitions
            ],
        }


class TopicReaders:
    """The queue model's side of a topic's deletion: what reads the topic (the queue
    services of the vhosts and the pop groups, the timers) and what holds its offsets
    (message stores, the journal's marks). Handed by the broker once its queue model is
    open: ``vhosts`` is the broker's dict of open vhosts, changed in place as vhosts come
    and go; ``messages`` the publish pipeline's message store."""

    def __init__(self, state: StateStore, vhosts: Mapping[str, VHost], pop: QueueService, queue_store: QueueStore,
                 timers: Timers, messages: MessageStore) -> None:
        self.state = state
        self.vhosts = vhosts
        self.pop = pop
        self.queue_store = queue_store
        self.timers = timers
        self.messages = messages

    def services(self) -> list[QueueService]:
        """Every queue service: each vhost's, and the pop groups'."""
        return [*(v.service for v in self.vhosts.values()), self.pop]

    def readers(self, name: str) -> list[str]:
        """What reads topic ``name`` now, for the refusal of its deletion: each queue,
        MQTT session queue or pop group holding messages in it, and the delayed or
        retried messages (timers) that point into it."""
        readers = []
        for service in self.services():
            for qs in service.queues.values():
                n = sum(1 for e in qs.queue.entries.values() if e.topic == name)
                if n:
                    readers.append(f"queue {qs.name!r} of vhost {service.vhost!r} ({n} messages)")
        timers = 0
        for _, raw in self.state.scan_prefix(CF_TIMERS, b""):
            if TimerRecord.FromString(raw).topic == name:
                timers += 1
        if timers:
            readers.append(f"{timers} delayed or retried messages")
        return readers

    def withdraw(self, name: str, partitions: int) -> int:
        """Every queue entry in topic ``name`` removed, in one write, and its timers
        forgotten (dropped when due); returns the entries removed."""
        why = RecordGone(f"topic {name!r} was deleted")
        removed = 0
        for service in self.services():
            for index in range(partitions):
                removed += service.withdraw(name, index, 0, 1 << 63, why, leased=True)
        self.queue_store.commit()
        self.timers.forget_topic(name)  # (its offsets will be given again)
        self.queue_store.commit()
        return removed

    def forget(self, name: str) -> None:
        """What the message stores cached of topic ``name`` goes (before its files)."""
        stores = {id(s.messages): s.messages for s in self.services()}
        stores[id(self.messages)] = self.messages
        for store in stores.values():
            store.forget_topic(name)

    def forget_marks(self, name: str) -> None:
        """The journal's marks of topic ``name`` go (after its files)."""
        self.queue_store.forget_marks(name)  # (its offsets will be given again)


class TopicService:
    """``ports.Topics``: create, grow, alter, describe and delete topics, and Kafka's
    DeleteRecords. Handed the state store and the log at ``open``; ``forget(topic)`` (the
    stream service's: producer states, committed offsets) and ``readers`` (the queue
    model's side, set once it is open) when a topic is deleted."""

    def __init__(self, topic_defaults: TopicConfig, forget: Callable[[str], object]) -> None:
        self.topic_defaults = topic_defaults
        self._forget = forget
        self.readers: TopicReaders | None = None
        self._state: StateStore | None = None
        self._log: LogManager | None = None

    def open(self, state: StateStore, log_manager: LogManager) -> None:
        """Open every recorded topic in ``log_manager``, at its recorded log start offsets."""
        self._state, self._log = state, log_manager
        for _, value in state.scan_prefix(CF_METADATA, TOPIC_PREFIX):
            rec = TopicRecord.FromString(value)
            topic = log_manager.open_topic(rec.name, self._config_of(rec))
            for p, start in zip(topic.partitions, rec.log_start_offsets):
                p.advance_start(start)

    def close(self) -> None:
        """The log and the state store are closed (the broker's)."""
        self._state = self._log = None
        self.readers = None

    @property
    def log(self) -> LogManager:
        if self._log is None:
            raise RuntimeError("broker is not started")
        return self._log

    @property
    def state(self) -> StateStore:
        if self._state is None:
            raise RuntimeError("broker is not started")
        return self._state

    def _config_of(self, rec: TopicRecord) -> TopicConfig:
        values: dict[str, Any] = dict(rec.config)
        values["partitions"] = rec.partitions
        return TopicConfig.from_mapping(values, base=self.topic_defaults)

    def create_topic(self, name: str, settings: Mapping[str, Any] | None = None) -> TopicInfo:
        validate_topic_name(name)
        config = TopicConfig.from_mapping(settings or {}, base=self.topic_defaults)
        lm = self.log
        lm.check_config(config)
        if name in lm.topics:
            raise TopicExists(f"topic {name!r} already exists")
        stored = {k: str(v) for k, v in config.to_mapping().items() if k != "partitions"}
        rec = TopicRecord(name=name, partitions=config.partitions, config=stored, created_ms=now_ms())
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
        lm = self.log
        topic = lm.topic(name)
        if partitions < len(topic.partitions):
            raise InvalidConfig(f"topic {name!r} has {len(topic.partitions)} partitions; it cannot shrink to {partitions}")
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
        lm = self.log
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
        lm.check_config(config)
        if validate_only:
            return TopicInfo(name, config.to_mapping(), self.describe_topic(name).partitions)
        rec = self._topic_record(name)
        rec.config.clear()
        rec.config.update({k: str(v) for k, v in config.to_mapping().items() if k != "partitions"})
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
        t = self.log.topic(topic)
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
            self.state.put(CF_METADATA, topic_key(topic), rec, sync=True)
            for index, target in moves.items():
                t.partitions[index].advance_start(target)
                log.info("records of %s/%d below offset %d deleted", topic, index, target)
        return {i: results[i] if i in results else t.partitions[i].log_start_offset for i in offsets}

    def _topic_record(self, name: str) -> TopicRecord:
        rec = self.state.get_msg(CF_METADATA, topic_key(name), TopicRecord)
        if rec is None:
            raise UnknownTopic(f"topic {name!r} has no metadata record")
        return rec

    def delete_topic(self, name: str, *, force: bool = False) -> int:
        """Delete a topic's files and record. A topic that queues read (``TopicReaders.readers``)
        is refused (TopicInUse, naming them) unless ``force``: then their entries go
        first, in one write, and are counted (returned); timers into it are dropped when
        due. Returns the queue entries removed."""
        lm = self.log
        topic = lm.topic(name)  # UnknownTopic
        queues = self.readers
        readers = queues.readers(name) if queues is not None else []
        removed = 0
        if queues is not None and readers:
            if not force:
                raise TopicInUse(f"topic {name!r} is read by {'; '.join(readers)}: "
                                 "delete those first, or delete the topic with force")
            removed = queues.withdraw(name, len(topic.partitions))
            log.warning("deleting topic %r with force: %d queue entries removed (%s)", name, removed,
                        "; ".join(readers))
        if queues is not None:
            queues.forget(name)
        # files first: a crash in between leaves the record of a topic with no files,
        # which opens empty, never files without a record, which no create may delete
        lm.delete_topic(name)
        if queues is not None:
            queues.forget_marks(name)
        self.state.delete(CF_METADATA, topic_key(name), sync=True)
        self._forget(name)  # producer states, committed offsets
        log.info("deleted topic %r", name)
        return removed

    def describe_topic(self, name: str) -> TopicInfo:
        t = self.log.topic(name)
        parts = [
            PartitionInfo(p.index, p.log_start_offset, p.log_end_offset, len(p.segments), p.size_bytes,
                          p.records_appended)
            for p in t.partitions
        ]
        return TopicInfo(t.name, t.config.to_mapping(), parts)

    def list_topics(self) -> list[TopicInfo]:
        return [self.describe_topic(n) for n in sorted(self.log.topics)]
