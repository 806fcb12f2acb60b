"""The facade every gateway calls. It owns the data directory (lock), the state store,
the log, the vhosts of the queue model and the metrics, and the services: topic admin
(``broker.topics``, core/topics.py), the stream model (``broker.streams``,
core/streams/service.py), the Admin service (``broker.admin``, core/admin.py) and the pop
groups' Pop service (``broker.pop_service``).

    broker = Broker(Path("data"), reactor=reactor)
    broker.start()                      # lock, open state, recover the log
    info = broker.topics.create_topic("t", {"partitions": 3, "flush": "sync"})
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

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import LoopingCall

from .errors import (
    DataDirLocked,
    LogbusError,
    StorageError,
    TopicExists,
)
from .log import AppendResult, LogManager, Record
from .log.topic_config import TopicConfig
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
from .access.auth import ANONYMOUS_USER, Access
from .connections import Connections
from .definitions import LegacyTranslation
from .definitions import upgrade as upgrade_definitions
from .faults import FaultCollector, StorageFaults
from .admin import AdminService
from .inventory import Inventory
from .inventory_metrics import OperatorCollector, PerObjectCollector
from .quiet import Leftovers, QuietSpell
from .queue_model import QueueModel, VHostQueues
from .sessions import SessionService
from .state import StateStore
from .streams.service import OFFSETS_RETENTION_MS, PRODUCER_ID_EXPIRATION_MS, StreamService
from ..retry.policy import POP_DEFAULT, RetryPolicy
from .message import Message
from .queues.journal import COMMIT_INTERVAL, QueueStore, forget_from
from .queues.lateness import Lateness
from .queues.msgstore import MessageStore, log_batch_reader
from .queues.pins import lowest
from .queues.pop import PopGroups
from .queues.redo import Redone, redo
from .forms import NEUTRAL, Forms
from .vhost import VHost
from .pipeline import Pipeline
from .queues.timers import Timers
from .topics import TopicInfo, TopicReaders, TopicService
from .halves import HalfService, WithHalves
from .pop_service import PopService
from .search import KeyForms

log = logging.getLogger(__name__)

EXCHANGE_TOPIC_SLACK = 1 << 20  # a record's envelope, headers and framing beside its body
HOUSEKEEPING_SECONDS = 10.0
EXPIRY_SECONDS = 0.1  # how often queues drop expired messages (a message TTL)
PRESSURE_SECONDS = 1.0  # how often memory and disk are checked against their limits


class Broker:
    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        reactor: Any = None,
        topic_defaults: TopicConfig | None = None,
        max_open_files: int = 1024,
        remote_storage: str = "",
        remote_storage_endpoint: str = "",
        remote_cache_bytes: int = 0,
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
        self.max_open_files = max_open_files
        self.remote_storage, self.remote_storage_endpoint = remote_storage, remote_storage_endpoint
        self.remote_cache_bytes = remote_cache_bytes
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
        # how far queue entries may hold a topic's log past its retention (0: no bound)
        self.queue_max_pinned_ms = queue_max_pinned_ms
        self.queue_max_pinned_bytes = queue_max_pinned_bytes
        self._pins_evicted = self.metrics.counter(
            "logbus_queue_pinned_evicted", "Queue messages dead-lettered or dropped because they held a topic's "
            "log past queue_max_pinned_ms / queue_max_pinned_bytes")
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
        # what a burst left behind, given back once quiet (core/quiet.py)
        leftovers = Leftovers(lambda: self.state, self._message_stores, lambda: self.connections.closes,
                              lambda: [v.router for v in self.vhosts.values()])
        self.quiet = QuietSpell(self._activity, leftovers.release)
        self.state: StateStore | None = None
        # the services (ports.Streams, ports.Topics), made here so gateways can be built before start
        defaults = topic_defaults or TopicConfig()
        self.streams = StreamService(reactor, self.metrics, topic_defaults=defaults,
                                     producer_id_expiration_ms=producer_id_expiration_ms,
                                     offsets_retention_ms=offsets_retention_ms)
        self.topics = TopicService(defaults, self.streams.forget_topic)
        self.groups = self.streams.groups  # consumer groups, for the inventory and the dead-letter replay
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
        # the queue model as the AMQP and MQTT gateways see it (ports.VHosts), a
        # VHostQueues beside each open vhost (core/queue_model.py)
        self.queue_model = QueueModel()
        # protocol sessions' records and retained messages (ports.Sessions), opened at start;
        # its ``on_start`` work runs once the vhosts are loaded, before the journal's redo
        # and before anything serves: what takes up the queues that are no stored
        # definitions (the MQTT room's stored sessions, with their bindings), so that redo
        # routes to them
        self.sessions = SessionService(self._clock)
        self.log: LogManager | None = None
        self.redone = Redone()  # what start-up routed again (queues/redo.py)
        self._lock_fd: int | None = None
        self._housekeeping: LoopingCall | None = None
        # the operator's view and changes (core/admin.py), and pop groups' data path
        inventory = Inventory(self.vhosts, self.groups, self.connections)
        self.metrics.registry.register(OperatorCollector(inventory, self.data_dir))  # queues, connections, groups
        self.metrics.per_object.register(PerObjectCollector(inventory))
        self.admin = AdminService(inventory, access=self.access, connections=self.connections,
                                  pressure=self.pressure, faults=self.faults, groups=self.groups,
                                  password_worker=self.password_worker, vhosts=self.vhosts,
                                  open_vhost=self._open_vhost, close_vhost=self._close_vhost,
                                  key_forms=self.key_forms,
                                  data_dir=self.data_dir, started_at=self.started_at)
        self.pop_service = PopService(reactor.callLater)
        # half messages (RocketMQ's transactional messages), opened at start (core/halves.py)
        self.halves = HalfService(reactor, self.metrics, clock=self._clock)

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
            self.log = LogManager(
                self.data_dir,
                self.reactor,
                max_open_files=self.max_open_files,
                metrics=self.metrics,
                remote_storage=self.remote_storage,
                remote_storage_endpoint=self.remote_storage_endpoint,
                remote_cache_bytes=self.remote_cache_bytes,
            )
            offsets = self.streams.open(self.state, self.log)
            self.topics.open(self.state, self.log)
            # before the journal's redo, which may hand records of HALVES_TOPIC over again;
            # a commit publishes as the HTTP publish does (the admin service is open by then)
            self.halves.open(self.state, lambda t, m, p: self.admin.publish(t, m, p), self._ensure_topic)
            self._forget_cut()
            self._open_vhosts()
            self.sessions.take_up()  # the queues that are no stored definitions
            # what a power loss took from the queue journal, from the log, before anything serves
            self.redone = redo(self.log, self.queue_store, self.vhosts, self.pop, self.pipeline, self._clock)
            self.faults.attach(self.log, self.state, self.queue_store,
                               [self.sessions.write_kept, self._write_kept_definitions])
            # each turn's appends mark their partitions in the queue journal's batch
            self.log.before_drain = self.queue_store.commit_due
            self.admin.open(self.log, self.pop, self.pipeline, self.state, self.queue_store)
            self.pop_service.open(self.log, self.pop)
        except BaseException:
            self._close_all()
            raise
        self._housekeeping = LoopingCall(self.housekeeping)
        self._housekeeping.clock = self.reactor
        self._housekeeping.start(HOUSEKEEPING_SECONDS, now=False)
        self._expiry = LoopingCall(self._expire)
        self._expiry.clock = self.reactor
        self._expiry.start(EXPIRY_SECONDS, now=False)
        # produced batches on to the queues that read them; a transaction's when it commits
        self.streams.start(self.pipeline.appended, self._route_committed)
        self.halves.start()
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

    def _ensure_topic(self, name: str) -> None:
        """Topic ``name`` with the broker's defaults, made if there is none (a half
        message's topic at its commit, a producer group's check topic)."""
        assert self.log is not None
        if name not in self.log.topics:
            try:
                self.topics.create_topic(name)
            except TopicExists:  # made meanwhile
                pass

    def _route_committed(self, topic: str, partition: int, producer_id: int, start: int, end: int) -> int:
        """A committed Kafka transaction's records to the queues that read their topic, and
        their entries written to the journal at once: the coordinator then stores the
        transaction complete, after them in RocksDB's write-ahead log (which is in order),
        so no restart finds it complete and its entries gone (StorageError: it stays
        prepared and is completed again, at least once)."""
        routed = self.pipeline.committed(topic, partition, producer_id, start, end)
        self.queue_store.commit()
        return routed

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

    def _open_vhosts(self) -> None:
        """Every stored vhost, with its durable exchanges, queues and bindings; on a fresh
        data directory (RabbitMQ's first boot) vhost "/" and the default user first."""
        assert self.log is not None and self.state is not None
        self.queue_store = QueueStore(self.state, self.reactor, COMMIT_INTERVAL)
        self.timers = Timers(self.queue_store, self.state, self._clock, self.reactor,
                             failed=self.metrics.counter(
                                 "logbus_timer_failures",
                                 "Released timers (delayed messages, retries) whose hand-over failed "
                                 "and was retried later").inc)
        self.timers.lateness = self.release_lateness
        self.access.open(self.state)
        self.sessions.open(self.state)  # records and retained messages
        self.access.seed(self.default_user, self.default_pass, self.anonymous_user)
        self.vhosts.clear()
        self.queue_model.open.clear()
        self.queue_model.commit = self.queue_store.commit
        self.pop = PopGroups(self.state, self.queue_store, self.timers, MessageStore(log_batch_reader(self.log)),
                             clock=self._clock, dead_letter=self._append_dead_letter, retry=self.pop_retry)
        self.pop.properties = self.forms.properties
        self.pop.load()
        self.pipeline = Pipeline(self.log, self.vhosts, WithHalves(self.pop, self.halves), self.timers,
                                 MessageStore(log_batch_reader(self.log)), self._clock, forms=self.forms,
                                 later=tick_of(self.reactor).later)
        for name in self.access.vhosts:
            self._open_vhost(name)
        self.queue_store.journaled = self._journaled
        self.timers.arm(self.pipeline.timer_due)
        self.topics.readers = TopicReaders(self.state, self.vhosts, self.pop.service, self.queue_store, self.timers,
                                           self.pipeline.messages)

    def _journaled(self, topic: str) -> bool:
        """Whether records of ``topic`` can make queue entries or timers: it backs an
        exchange (the default one too) or a pop group reads it (the queue journal marks
        only those partitions)."""
        return self.pop.watches(topic) or any(v.backs(topic) for v in self.vhosts.values())

    def _clock(self) -> int:
        return int(self.reactor.seconds() * 1000)

    def _close_vhost(self, name: str) -> None:
        """Forget the open vhost ``name``: its model and its queues' port (a deleted vhost)."""
        self.vhosts.pop(name, None)
        self.queue_model.open.pop(name, None)

    def _open_vhost(self, name: str) -> VHost:
        assert self.log is not None
        vhost = VHost(name, self.log, self._create_exchange_topic, self.queue_store, clock=self._clock,
                      store=self.state, topic_owner=self._topic_owner, timers=self.timers, forms=self.forms,
                      pipeline=self.pipeline)
        vhost.load()
        self.vhosts[name] = vhost
        self.queue_model.open[name] = VHostQueues(vhost, self.pipeline)
        return vhost

    def _create_exchange_topic(self, topic: str) -> TopicInfo:
        """The topic behind an exchange, created on first use: its max.message.bytes fits
        the largest queue-model message with its envelope and record framing."""
        largest = self.queue_max_message_bytes + EXCHANGE_TOPIC_SLACK
        defaults = self.topics.topic_defaults
        return self.topics.create_topic(topic, {"max.message.bytes": max(largest, defaults.max_message_bytes)})

    def _topic_owner(self, topic: str) -> str | None:
        """Which exchange, in any vhost, ``topic`` backs (vhost "/" exchange names may hold
        the ``@`` that other vhosts' topic names use)."""
        for vhost in self.vhosts.values():
            ex = vhost.router.exchange_for_topic(topic)
            if ex is not None:
                return f"exchange '{ex.name}' in vhost '{vhost.name}'"
        return None

    def vhost(self, name: str) -> VHost | None:
        """The open vhost ``name``'s model, None if none."""
        return self.vhosts.get(name)

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
        for call in (self._housekeeping, self._expiry, self._pressure):
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
            self.queue_model.open.clear()
        self._close_all()
        self.password_worker.stop()
        self.admin.close()
        self.pop_service.close()
        return succeed(None)

    def _close_all(self) -> None:
        """Close what is open; each part is closed even when one before it fails (the
        first failure is raised then)."""
        self.streams.stop()  # waiting joins and syncs: COORDINATOR_NOT_AVAILABLE
        self.halves.stop()
        self.topics.close()
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

    # -- dead letters of pop groups ---------------------------------------------------------

    def _append_dead_letter(self, topic: str, message: Message) -> None:
        """A dead-lettered copy to ``topic`` (a pop group's ``%DLQ%<group>``), created on
        first use with the broker's defaults."""
        lm = self._log
        if topic not in lm.topics:
            self.topics.create_topic(topic, {"partitions": 1})
        try:
            self.pipeline.append(topic, [message], 0).addErrback(
                lambda f: log.warning("dead letter to %r failed: %s", topic, f.value))
        except LogbusError as e:
            log.warning("dead letter to %r refused: %s", topic, e)
