"""The facade every gateway calls. It owns the data directory (lock), the state store,
the log, the vhosts of the queue model and the metrics, and offers topic admin
(core/topics.py), publish, pop and the stream model (core/streams/facade.py).

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
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from google.protobuf.message import Message as ProtoMessage

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import LoopingCall

from .errors import (
    DataDirLocked,
    LogbusError,
    StorageError,
)
from .log import AppendResult, LogManager, Record
from .log.batch import BatchInfo
from .log.topic_config import TopicConfig, validate_topic_name
from .metrics import Metrics
from .pressure import (
    DEFAULT_DISK_FREE_LIMIT,
    DEFAULT_MEMORY_HIGH_WATERMARK,
    AlarmCollector,
    ResourceMonitor,
)
from .access.doors import Doors
from .access.passwords import PasswordWorker
from .tick import tick_of
from .access.auth import ANONYMOUS_USER, Access, AccessChange, InvalidAccess, VHostInfo, check_name
from .connections import ConnectionRecord, Connections
from .definitions import LegacyTranslation
from .definitions import upgrade as upgrade_definitions
from .routing.log_topics import DEFAULT_EXCHANGE_TOPIC, key_partition, vhost_topic
from .routing.router import PREDECLARED
from .faults import FaultCollector, StorageFaults
from .inventory import Inventory
from .inventory_metrics import OperatorCollector, PerObjectCollector
from .quiet import Leftovers, QuietSpell
from .retained import RetainedStore
from .sessions import SessionRecords
from .state import StateStore, vhost_definitions_prefixes
from .streams.facade import ConsumerGroups, StreamModel
from .streams.groups import GroupCoordinator
from ..retry.policy import POP_DEFAULT, RetryPolicy
from .message import Message
from .queues.journal import QueueStore, forget_from
from .queues.lateness import Lateness
from .queues.msgstore import MessageStore, log_batch_reader
from .queues.pins import lowest
from .queues.pop import Popped, PopGroups
from .queues.redo import Redone, redo
from .queues.replay import DeadLetterReplay
from .forms import NEUTRAL, Forms
from .vhost import VHost
from .pipeline import Pipeline
from .queues.timers import Timers
from .streams.producers import ProducerRegistry
from .topics import TopicAdmin, TopicInfo
from .search import KeyForms, MessageSearch

log = logging.getLogger(__name__)

EXCHANGE_TOPIC_SLACK = 1 << 20  # a record's envelope, headers and framing beside its body
HOUSEKEEPING_SECONDS = 10.0
EXPIRY_SECONDS = 0.1  # how often queues drop expired messages (a message TTL)
PRESSURE_SECONDS = 1.0  # how often memory and disk are checked against their limits
PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms: 1 day
OFFSETS_RETENTION_MS = 7 * 86_400_000  # Kafka's offsets.retention.minutes: 7 days
CLIENT_EXPIRY_CHECK_MAX_S = 600.0  # Kafka's *.check.interval.ms: 10 minutes


def client_expiry_interval(*expiry_ms: int) -> float:
    """How often expired client state is looked for (s): Kafka's 10 minutes, or half the
    shortest expiry when that is shorter (at least 50 ms)."""
    return max(0.05, min(CLIENT_EXPIRY_CHECK_MAX_S, min(expiry_ms) / 2000))


class Broker(TopicAdmin, StreamModel, ConsumerGroups, Inventory, MessageSearch):
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
        anonymous_user: str = ANONYMOUS_USER,
        loopback_users: Sequence[str] = ("guest",),
        queue_max_message_bytes: int = 128 << 20,
        pop_retry: RetryPolicy = POP_DEFAULT,
        forms: Forms = NEUTRAL,
        legacy: LegacyTranslation | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
        offsets_retention_ms: int = OFFSETS_RETENTION_MS,
        queue_max_pinned_ms: int = 0,
        queue_max_pinned_bytes: int = 0,
        key_forms: Mapping[str, KeyForms] | None = None,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.data_dir = Path(data_dir)
        self.reactor = reactor
        self.started_at = time.time()
        self.metrics = Metrics()
        self.topic_defaults = topic_defaults or TopicConfig()
        self.max_open_files = max_open_files
        # the largest message a queue-model publish carries (the AMQP gateway's
        # max_message_size): topics created for exchanges take batches that large
        self.queue_max_message_bytes = queue_max_message_bytes
        self.pop_retry = pop_retry  # pop groups' backoff and delivery limit
        # what the protocols add to the neutral model: typed headers, dead-letter copies
        # (core/forms.py; the server hands the AMQP gateway's)
        self.forms = forms
        # how definitions stored in the form before the neutral one read (the AMQP
        # gateway's): they are rewritten at start (core/definitions.upgrade)
        self.legacy = legacy
        # per log topic, the forms a record key may have there, which a message search
        # looks up (core/search.py; the server hands the MQTT gateway's for amq.topic)
        self.key_forms: Mapping[str, KeyForms] = dict(key_forms or {})
        # per-client state of the stream model that expires as in Kafka (expire_client_state)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.offsets_retention_ms = offsets_retention_ms
        # how far queue entries may hold a topic's log past its retention (0: no bound)
        self.queue_max_pinned_ms = queue_max_pinned_ms
        self.queue_max_pinned_bytes = queue_max_pinned_bytes
        self._pins_evicted = self.metrics.counter(
            "logbus_queue_pinned_evicted", "Queue messages dead-lettered or dropped because they held a topic's "
            "log past queue_max_pinned_ms / queue_max_pinned_bytes")
        self._client_expiry: LoopingCall | None = None
        self._producers_expired = self.metrics.counter(
            "logbus_producer_states_expired",
            "Idempotent producers' states forgotten after producer.id.expiration.ms (per partition)")
        self._offsets_expired = self.metrics.counter(
            "logbus_group_offsets_expired",
            "Committed offsets of groups with no members deleted after offsets.retention.minutes")
        # Made here, not at start, so gateways built before start can subscribe to it.
        self.pressure = ResourceMonitor(self.data_dir, memory_high_watermark=memory_high_watermark,
                                        disk_free_limit=disk_free_limit)
        self.metrics.registry.register(AlarmCollector(self.pressure))
        self._pressure: LoopingCall | None = None
        # storage faults lived through without a restart (core/faults.py)
        self.faults = StorageFaults(self._queue_services)
        self.metrics.registry.register(FaultCollector(self.faults, self._queue_services))
        # how late delayed messages and retries became ready (core/queues/lateness.py)
        self.release_lateness = Lateness()
        self.metrics.registry.register(self.release_lateness)
        self.metrics.registry.register(OperatorCollector(self))  # queues, connections, groups
        self.metrics.per_object.register(PerObjectCollector(self))
        # what a burst left behind, given back once quiet (core/quiet.py)
        leftovers = Leftovers(lambda: self.state, self._message_stores, lambda: self.connections.closes,
                              lambda: [v.router for v in self.vhosts.values()])
        self.quiet = QuietSpell(self._activity, leftovers.release)
        # listeners that are not serving (the server's): name -> why, for /healthz
        self.listener_problems: dict[str, str] = {}
        self.state: StateStore | None = None
        self.producers = ProducerRegistry(None)  # replaced at start, with the store
        self.groups = GroupCoordinator(reactor)  # consumer groups (the Kafka gateway's)
        self._dlq_replay = DeadLetterReplay(
            lambda: self._log, self.groups, lambda t, ms, p: self.publish(t, ms, partition=p),
            lambda g: any(name == g for name, _, _ in self.pop.groups()))
        # Users, vhosts, permissions: made here so gateways can subscribe before start.
        self.access = Access(loopback_users=loopback_users)
        self.password_worker: PasswordWorker[Any] = PasswordWorker(reactor.callFromThread)  # the KDF's thread
        self.default_user, self.default_pass = default_user, default_pass
        self.anonymous_user = anonymous_user  # made on first boot beside the default user (access/auth.py)
        # every client connection of every protocol (core/connections.py)
        self.connections = Connections(self._clock)
        # every gateway's way in: connections, logins, the access check, alarms (ports.Doors)
        self.doors = Doors(self.access, self.connections, self.pressure, self.password_worker,
                           anonymous_user=anonymous_user)
        # The vhost model, one VHost per stored vhost, opened at start. Always THIS dict:
        # connections look their vhost up in it, so it is changed in place.
        self.vhosts: dict[str, VHost] = {}
        self._expiry: LoopingCall | None = None
        self._expiry_failing: set[str | None] = set()  # vhosts (None: pop groups) whose expiry fails, logged
        # the protocol rooms gateways keep (the MQTT sessions: "mqtt"), for the CLI and HTTP API
        self.rooms: dict[str, Any] = {}
        # run at start once the vhosts are loaded, before the journal's redo and before
        # anything serves: what takes up the queues that are no stored definitions (the
        # MQTT room's stored sessions, with their bindings), so that redo routes to them
        self.at_start: list[Callable[[], object]] = []
        self.log: LogManager | None = None
        self.redone = Redone()  # what start-up routed again (queues/redo.py)
        self._lock_fd: int | None = None
        self._housekeeping: LoopingCall | None = None
        # retained messages by topic (MQTT's), loaded at start
        self.retained = RetainedStore(None, self._clock)

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Lock the data directory, open the state store and recover every topic."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            self.state = StateStore(self.data_dir / "state")
            if self.legacy is not None:
                n = upgrade_definitions(self.state, self.legacy)
                if n:
                    log.info("%d stored definitions rewritten in the neutral form", n)
            self.producers = ProducerRegistry(self.state)
            offsets = self.groups.open(self.state)
            self.log = LogManager(
                self.data_dir,
                self.reactor,
                max_open_files=self.max_open_files,
                metrics=self.metrics,
            )
            self._open_topics()
            self._forget_cut()
            self._open_vhosts()
            self.sessions = SessionRecords(self.state)
            for take_up in self.at_start:  # the queues that are no stored definitions
                take_up()
            # what a power loss took from the queue journal, from the log, before anything serves
            self.redone = redo(self.log, self.queue_store, self.vhosts, self.pop, self.pipeline, self._clock)
            self.faults.attach(self.log, self.state, self.queue_store,
                               [self.sessions.write_kept, self._write_kept_definitions])
            # each turn's appends mark their partitions in the queue journal's batch
            self.log.before_drain = self.queue_store.commit
        except BaseException:
            self._close_all()
            raise
        self._housekeeping = LoopingCall(self.housekeeping)
        self._housekeeping.clock = self.reactor
        self._housekeeping.start(HOUSEKEEPING_SECONDS, now=False)
        self._expiry = LoopingCall(self._expire)
        self._expiry.clock = self.reactor
        self._expiry.start(EXPIRY_SECONDS, now=False)
        self._client_expiry = LoopingCall(self.expire_client_state)
        self._client_expiry.clock = self.reactor
        self._client_expiry.start(client_expiry_interval(self.producer_id_expiration_ms, self.offsets_retention_ms),
                                  now=False)
        self._pressure = LoopingCall(self._check_resources)
        self._pressure.clock = self.reactor
        self._pressure.start(PRESSURE_SECONDS, now=True)  # alarms are known before any listener
        log.info(
            "broker started on %s: %d topics, %d committed group offsets (%s)",
            self.data_dir,
            len(self.log.topics),
            offsets,
            "new data directory" if self.log.fresh
            else "clean restart" if self.log.clean_start and not self.log.reports
            else f"stopped cleanly, but {len(self.log.reports)} partitions needed repair" if self.log.clean_start
            else "recovered after an unclean stop",
        )

    def _write_kept_definitions(self) -> None:
        """The deletions of definitions the state store refused, made now."""
        for vhost in self.vhosts.values():
            vhost.defs.write_kept()

    def _forget_cut(self) -> None:
        """Where recovery cut a partition's log, the queue entries and timers pointing
        past the cut go before queues load (those offsets will be given again)."""
        assert self.log is not None and self.state is not None
        for r in self.log.reports:
            if r.cut_offset is None:
                continue
            entries, timers = forget_from(self.state, r.topic, r.partition, r.cut_offset)
            dropped = (f"records {r.dropped[0]}..{r.dropped[1]} ({r.dropped[2]}) dropped" if r.dropped
                       else "no intact record found past the damage")
            log.warning("recovery: %s/%d now ends at offset %d: %s; %d queue entries and %d timers pointing "
                        "past it removed", r.topic, r.partition, r.cut_offset, dropped, entries, timers)

    def _check_resources(self) -> None:
        """Once a second: the resource alarms, and a failed state store reopened when it
        can be. Never raises: a failure here (out of file descriptors, say) must not end
        the LoopingCall, or the alarms would never be checked again."""
        try:
            self.pressure.check()
        except Exception:
            log.exception("checking memory and disk failed")
        try:
            self.faults.check()
        except Exception:
            log.exception("checking the state store failed")
        try:
            self.quiet.check()
        except Exception:
            log.exception("giving back what a burst left failed")

    def _queue_services(self) -> Iterator[Any]:
        """Every queue service: each vhost's, and the pop groups'."""
        for vhost in list(self.vhosts.values()):
            yield vhost.service
        pop = getattr(self, "pop", None)
        if pop is not None:
            yield pop.service

    def _message_stores(self) -> list[MessageStore]:
        """Every message store: the queue services' and the pipeline's."""
        stores = [s.messages for s in self._queue_services()]
        pipeline = getattr(self, "pipeline", None)
        return stores if pipeline is None else [*stores, pipeline.messages]

    def _activity(self) -> int:
        """A count that moves with the work: the log's appends (by the turn), the
        journal's commits, the log reads, the connections closed."""
        commits = self.queue_store.commits if getattr(self, "queue_store", None) is not None else 0
        drains = self.log.drains if self.log is not None else 0
        return drains + commits + sum(s.log_reads for s in self._message_stores()) + self.connections.closes

    def health(self) -> list[str]:
        """Why the broker does not serve as it should now (empty: it does): partitions
        or the state store refusing writes, resource alarms, listeners down."""
        reasons = self.faults.reasons()
        reasons += [f"{name} alarm: {self.pressure.describe(name)}" for name in sorted(self.pressure.alarms)]
        reasons += [f"listener {name}: {why}" for name, why in sorted(self.listener_problems.items())]
        return reasons

    def _open_vhosts(self) -> None:
        """Every stored vhost, with its durable exchanges, queues and bindings; on a fresh
        data directory (RabbitMQ's first boot) vhost "/" and the default user first."""
        assert self.log is not None and self.state is not None
        self.queue_store = QueueStore(self.state, self.reactor)
        self.timers = Timers(self.queue_store, self.state, self._clock, self.reactor,
                             failed=self.metrics.counter(
                                 "logbus_timer_failures",
                                 "Released timers (delayed messages, retries) whose hand-over failed "
                                 "and was retried later").inc)
        self.timers.lateness = self.release_lateness
        self.access.open(self.state)
        self.retained = RetainedStore(self.state, self._clock)
        self.retained.load()
        self.access.seed(self.default_user, self.default_pass, self.anonymous_user)
        self.vhosts.clear()
        self.pop = PopGroups(self.state, self.queue_store, self.timers, MessageStore(log_batch_reader(self.log)),
                             clock=self._clock, dead_letter=self._append_dead_letter, retry=self.pop_retry)
        self.pop.properties = self.forms.properties
        self.pop.load()
        self.pipeline = Pipeline(self.log, self.vhosts, self.pop, self.timers,
                                 MessageStore(log_batch_reader(self.log)), self._clock, forms=self.forms,
                                 later=tick_of(self.reactor).later)
        for name in self.access.vhosts:
            self._open_vhost(name)
        self.queue_store.journaled = self._journaled
        self.timers.arm(self.pipeline.timer_due)

    def _journaled(self, topic: str) -> bool:
        """Whether records of ``topic`` can make queue entries or timers: it backs an
        exchange (the default one too) or a pop group reads it (the queue journal marks
        only those partitions)."""
        return self.pop.watches(topic) or any(v.backs(topic) for v in self.vhosts.values())

    def _clock(self) -> int:
        return int(self.reactor.seconds() * 1000)

    def route_appended(self, topic: str, partition: int, base: int, data: bytes, infos: list[BatchInfo]) -> int:
        """Kafka-produced batches just appended at ``base``, to the queues that read
        ``topic`` (``Pipeline.appended``): the append stands whatever happens there."""
        return self.pipeline.appended(topic, partition, base, data, infos)

    def _open_vhost(self, name: str) -> VHost:
        assert self.log is not None
        vhost = VHost(name, self.log, self._create_exchange_topic, self.queue_store, clock=self._clock,
                      store=self.state, topic_owner=self._topic_owner, timers=self.timers, forms=self.forms,
                      pipeline=self.pipeline)
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

    # -- connections and access: every gateway's one way in --------------------------------------

    def list_connections(self, protocol: str | None = None) -> list[ConnectionRecord]:
        return self.connections.list(protocol)

    def close_connection(self, id: int, reason: str = "closed by an administrator") -> bool:
        """Close connection ``id``, whatever its protocol; False when there is none."""
        return self.connections.close(id, reason)

    # -- what protocol sessions keep (MQTT) ---------------------------------------------------

    def stored_sessions(self, protocol: str) -> Iterator[bytes]:
        """The stored records of ``protocol``'s sessions that outlive their connections."""
        return self.sessions.stored(protocol)

    def save_session(self, protocol: str, client_id: str, record: ProtoMessage) -> None:
        """Store (or replace) a session's record; written without a WAL sync, as queue
        entries are (a power loss may lose the last ones). StorageError: the state store
        refused it; it is written once the store takes writes again (core/sessions.py)."""
        self.sessions.save(protocol, client_id, record)

    def forget_session(self, protocol: str, client_id: str) -> None:
        """Delete a session's record; never raises: a deletion the state store refuses
        is made once it takes writes again."""
        self.sessions.forget(protocol, client_id)

    def commit(self) -> None:
        """Write the queues' changes of this turn now rather than at its end (a protocol
        about to answer for a settlement it must not lose to a crash)."""
        self.queue_store.commit()

    def vhost(self, name: str) -> VHost | None:
        """The open vhost ``name``'s model, None if none."""
        return self.vhosts.get(name)

    def list_vhosts(self) -> list[VHostInfo]:
        return [self.access.vhosts[n] for n in sorted(self.access.vhosts)]

    def housekeeping(self, now_ms: int | None = None) -> int:
        """The log's segment rolling and retention, guarded: a segment any queue entry or
        pending timer (a delayed message, a retry) points into is kept, however old (a
        queue's message is never lost to retention). The lowest offset they point at is
        kept up to date as entries and timers come and go (``queues/pins.py``), so a
        pass costs O(partitions + vhosts), never a scan of the entries."""
        return self._log.housekeeping(now_ms, self._keep_from)

    def _keep_from(self, topic: str, partition: int) -> int | None:
        """``pinned_from`` for retention (asked only where a segment is due to go), with the
        bounds applied first: queue messages that hold the log past ``queue_max_pinned_ms``
        or ``queue_max_pinned_bytes`` are dead-lettered (reason "expired" or "maxlen") or
        dropped. Timers are not bounded: a delayed message keeps its segment."""
        pin = self.pinned_from(topic, partition)
        if pin is None or not (self.queue_max_pinned_ms or self.queue_max_pinned_bytes):
            return pin
        p = self._log.partition(topic, partition)
        below, reason = 0, ""
        if self.queue_max_pinned_ms:
            found = p.offset_for_time(self._clock() - self.queue_max_pinned_ms)
            below, reason = (p.next_offset if found is None else found[0]), "expired"
        if self.queue_max_pinned_bytes:
            kept, start = 0, p.next_offset
            for seg in reversed(p.segments):
                if kept + seg.size > self.queue_max_pinned_bytes:
                    break
                kept += seg.size
                start = seg.base_offset
            if start > below:
                below, reason = start, "maxlen"
        if pin >= below:
            return pin
        n = sum(s.evict(topic, partition, below, reason) for s in self._queue_services())
        if n:
            self._pins_evicted.inc(n)
        return self.pinned_from(topic, partition)

    def pinned_from(self, topic: str, partition: int) -> int | None:
        """The lowest offset of (topic, partition) that a queue entry (of any vhost or pop
        group) or a pending timer points at; None: nothing is pinned there."""
        return lowest(self.timers.pinned_from(topic, partition), self.pop.service.pinned_from(topic, partition),
                      *(v.pinned_from(topic, partition) for v in self.vhosts.values()))

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

    def _expire(self) -> None:
        """Every 100 ms: each vhost's expiry and the pop groups' tick. Never raises (a
        LoopingCall whose function raises stops for good): a tick that fails is logged
        when it starts failing, not at every tick (a StorageError as a warning line,
        anything else with its traceback), and runs again at the next; the others run
        regardless."""
        failing: set[str | None] = set()
        for name, vhost in list(self.vhosts.items()):
            self._expire_one(name, vhost.expire, failing)
        self._expire_one(None, self.pop.service.tick, failing)
        self._expiry_failing = failing

    def _expire_one(self, vhost: str | None, tick: Callable[[], object], failing: set[str | None]) -> None:
        """Run the expiry tick of ``vhost`` (None: the pop groups'), guarded."""
        try:
            tick()
        except Exception as e:
            failing.add(vhost)
            if vhost in self._expiry_failing:
                return
            what = "the pop groups" if vhost is None else f"vhost {vhost!r}"
            if isinstance(e, StorageError):
                log.warning("the expiry tick of %s failed (it runs again at the next tick): %s", what, e)
            else:
                log.exception("the expiry tick of %s failed (it runs again at the next tick)", what)

    def stop(self) -> Deferred[None]:
        """Flush everything, mark the shutdown clean and release the data directory."""
        for call in (self._housekeeping, self._expiry, self._pressure, self._client_expiry):
            if call is not None and call.running:
                call.stop()
        if self.vhosts:
            self.timers.disarm()
            for vhost in self.vhosts.values():
                vhost.service.stop()
            self.pop.service.stop()
            try:
                self.faults.check()  # a failed state store: reopened if it can be
                self.queue_store.commit()
            except LogbusError as e:
                log.error("queue changes of the last moments not written: %s", e)
            self.vhosts.clear()
        self._close_all()
        self.password_worker.stop()
        return succeed(None)

    def _close_all(self) -> None:
        """Close what is open; each part is closed even when one before it fails (the
        first failure is raised then)."""
        self.groups.shutdown()  # waiting joins and syncs: COORDINATOR_NOT_AVAILABLE
        try:
            if self.log is not None:
                log_manager, self.log = self.log, None
                log_manager.close()
        finally:
            try:
                if self.state is not None:
                    state, self.state = self.state, None
                    state.close()
            finally:
                self.pressure.close()
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

    # -- data -----------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: Sequence[Record]) -> Deferred[AppendResult]:
        """Append ``records`` to one partition; fires once durable per the flush policy."""
        d = self._log.partition(topic, partition).append(records)
        assert d is not None  # without a callback, append returns its Deferred
        return d

    # -- publish (HTTP) and pop ------------------------------------------------------------

    def publish(self, topic: str, messages: Sequence[Message], *, partition: int | None = None) -> Deferred[list[int]]:
        """Append ``messages`` to ``topic`` through the pipeline (``Pipeline.append``):
        one partition (``partition``, else chosen by the first message's key), handed to
        the queues that read the topic at their deliver-at time. Fires with their offsets
        once durable per the topic's flush policy."""
        return self.pipeline.append(topic, messages, partition)

    def partition_for(self, topic: str, key: bytes | None) -> int:
        """The partition ``publish`` picks for a first message with ``key``."""
        return key_partition(key, len(self._log.topic(topic).partitions))

    def pop_receive(self, group: str, topic: str, member: str, n: int, invisible_ms: int,
                    filter_tag: Any = None, filter_sql: Any = None) -> list[Popped]:
        """Pop: up to ``n`` messages of ``topic`` for ``group``, invisible to the group's
        other members for ``invisible_ms`` unless acked or changed. The group is created
        on first use and gets what is appended from then on (what its filter takes:
        ``filter_tag``, ``filter_sql``, docs/filters.md)."""
        self._log.topic(topic)  # UnknownTopic
        return self.pop.receive(group, topic, member, n, invisible_ms, filter_tag, filter_sql)

    def pop_receive_wait(self, group: str, topic: str, member: str, n: int, invisible_ms: int,
                         wait_ms: int, filter_tag: Any = None, filter_sql: Any = None) -> Deferred[list[Popped]]:
        """``pop_receive``, waiting up to ``wait_ms`` for a first message (long polling)."""
        self._log.topic(topic)  # UnknownTopic
        return self.pop.receive_wait(group, topic, member, n, invisible_ms, wait_ms, self.reactor.callLater,
                                     filter_tag, filter_sql)

    def pop_ack(self, group: str, topic: str, handle: str) -> None:
        self.pop.ack(group, topic, handle)

    def pop_nack(self, group: str, topic: str, handle: str) -> None:
        self.pop.nack(group, topic, handle)

    def pop_change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> None:
        self.pop.change_invisible(group, topic, handle, invisible_ms)

    def pop_groups(self) -> list[dict[str, Any]]:
        """Each pop group on each topic: ready and invisible messages, dead-lettered since
        start, and its dead letters not yet replayed (per group: ``%DLQ%<group>``)."""
        return [{"pop_group": g, "topic": t, "ready": qs.queue.message_count, "invisible": qs.queue.unacked_count,
                 "dead_lettered": qs.stats.dead_lettered, "dead_letters_waiting": self.dead_letters_waiting(g)}
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

    def dlq_replay(self, group: str, topic: str | None = None, max: int | None = None,
                   may_publish: Callable[[str], object] | None = None) -> Deferred[dict[str, Any]]:
        """Publish ``group``'s dead letters (topic ``%DLQ%<group>``) not yet replayed
        again to the topics they died in (only ``topic`` if given; at most ``max``, else
        ``queues.replay.MAX_REPLAY``), as new messages that every queue reading those
        topics gets. Fires with the counts once they are durable and the group's replay
        cursor is committed (core/queues/replay.py). ``may_publish(topic)`` may refuse
        (raise) a topic before anything is published."""
        return self._dlq_replay.run(group, topic, max, may_publish)
