"""The operator's view of the broker, read-mostly: every queue of every kind (AMQP's
declared queues, MQTT sessions and shared subscriptions, pop groups) with its counts,
the exchanges and bindings of each vhost, and consumer groups with their lag, in one
neutral shape the HTTP API, the console, the CLI and the Prometheus collector share.

Nothing here runs per message: the counts are read from the queues as they stand
(``Queue.ready_count``, its leases, its staged entries) and from the plain counters the
queue service keeps (``queues/stats.py``). Listing walks every queue once; browsing a
queue reads at most ``count`` of its entries and takes none of them.

Offset resets follow kafka-consumer-groups: the plan is computed and shown (a dry run)
unless ``execute``; a group with members may not be reset (Kafka: "Assignments can only
be reset if the group is inactive").
"""

from __future__ import annotations

import os
from copy import copy
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .connections import PROTOCOLS, Connections
from .errors import GroupActive, InvalidRequest, NotFound, PreconditionFailed, RecordGone
from .queues.pop import POP_VHOST, dlq_topic
from .queues.replay import replay_group
from .queues.stats import POP, PUBLISHED_BY, SESSION, SHARED, QueueStats
from .streams.group_model import Code, OffsetAndMetadata

if TYPE_CHECKING:
    from .log.manager import LogManager
    from .queues.pop import PopGroups
    from .queues.service import QueueService, QueueState
    from .streams.groups import GroupCoordinator
    from .vhost import VHost

# the protocol whose clients consume a kind of queue
PROTOCOL_OF = {"classic": "amqp", SESSION: "mqtt", SHARED: "mqtt", POP: "http"}
POP_PATH_VHOST = "~"  # how a path names pop groups' namespace (they are in no vhost)
MAX_PEEK = 1000  # messages one browse returns at most


def _pop_name(group: str, topic: str) -> str:
    return f"{group}/{topic}"  # a group name holds no "/" (pop.check_group)


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """One queue as it stands: RabbitMQ's management fields where they exist."""

    vhost: str
    name: str
    kind: str  # queues/stats.KINDS
    durable: bool
    auto_delete: bool
    exclusive: bool
    ready: int
    unacked: int
    scheduled: int  # staged: delayed, or given back with a backoff
    ready_bytes: int
    consumers: int
    stats: QueueStats
    arguments: dict[str, Any] = field(default_factory=dict)

    @property
    def protocol(self) -> str:
        return PROTOCOL_OF[self.kind]

    @property
    def messages(self) -> int:
        return self.ready + self.unacked + self.scheduled

    def to_json(self) -> dict[str, Any]:
        s = self.stats
        return {
            "name": self.name, "vhost": self.vhost, "type": "classic", "kind": self.kind,
            "protocol": self.protocol, "durable": self.durable, "auto_delete": self.auto_delete,
            "exclusive": self.exclusive, "arguments": self.arguments, "consumers": self.consumers,
            "messages": self.messages, "messages_ready": self.ready,
            "messages_unacknowledged": self.unacked, "messages_scheduled": self.scheduled,
            "message_bytes_ready": self.ready_bytes,
            "message_stats": {"publish": s.routed, "deliver_get": s.delivered, "redeliver": s.redelivered,
                              "ack": s.acked, "dead_lettered": s.dead_lettered},
        }


@dataclass(frozen=True, slots=True)
class PeekedMessage:
    """A ready message as a browse shows it (it stays where it is)."""

    position: int  # 1-based, in delivery order
    topic: str
    partition: int
    offset: int
    redelivered: bool
    exchange: str
    routing_key: str
    message_id: str
    key: bytes | None
    payload: bytes
    properties: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        payload, encoding = text_or_base64(self.payload)
        key = None if self.key is None else text_or_base64(self.key)
        return {"position": self.position, "topic": self.topic, "partition": self.partition,
                "offset": self.offset, "redelivered": self.redelivered, "exchange": self.exchange,
                "routing_key": self.routing_key, "message_id": self.message_id,
                "key": None if key is None else key[0], "key_encoding": None if key is None else key[1],
                "payload": payload, "payload_bytes": len(self.payload), "payload_encoding": encoding,
                "properties": self.properties}


def text_or_base64(data: bytes) -> tuple[str, str]:
    """RabbitMQ's ``payload_encoding``: "string" when ``data`` is UTF-8, else "base64"."""
    try:
        return data.decode("utf-8"), "string"
    except UnicodeDecodeError:
        import base64
        return base64.b64encode(data).decode("ascii"), "base64"


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One partition of a topic a consumer group reads. With no committed offset
    (``uncommitted``) its lag counts from the log start: what a new consumer with
    ``auto.offset.reset=earliest`` reads (decision 0040)."""

    topic: str
    partition: int
    committed: int | None  # None: no commit
    log_start: int
    log_end: int  # the high watermark, as kafka-consumer-groups' LOG-END-OFFSET
    member_id: str = ""
    client_id: str = ""
    host: str = ""

    @property
    def uncommitted(self) -> bool:
        return self.committed is None

    @property
    def lag(self) -> int:
        return max(0, self.log_end - (self.log_start if self.committed is None else self.committed))

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "committed_offset": self.committed,
                "uncommitted": self.uncommitted, "log_start_offset": self.log_start,
                "log_end_offset": self.log_end, "lag": self.lag,
                "member_id": self.member_id, "client_id": self.client_id, "host": self.host}


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A Kafka consumer group: its lag is the sum over its partitions, uncommitted ones
    included."""

    group: str
    state: str
    protocol_type: str
    protocol: str
    members: list[dict[str, Any]]
    partitions: list[PartitionLag]

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    @property
    def uncommitted_partitions(self) -> int:
        return sum(p.uncommitted for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        return {"consumer_group": self.group, "state": self.state, "protocol_type": self.protocol_type,
                "protocol": self.protocol, "members": self.members, "lag": self.lag,
                "uncommitted_partitions": self.uncommitted_partitions,
                "partitions": [p.to_json() for p in self.partitions]}


@dataclass(frozen=True, slots=True)
class OffsetReset:
    topic: str
    partition: int
    current: int | None
    new: int

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "current_offset": self.current,
                "new_offset": self.new}


RESET_TO = ("earliest", "latest", "datetime", "offset", "shift")


def consumer_assignment(data: bytes) -> list[tuple[str, int]]:
    """The partitions of a Kafka consumer-protocol assignment (version, [topic,
    [partition]], user data); [] when it is not one."""
    try:
        pos = 2
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out = []
        for _ in range(max(n, 0)):
            (size,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos:pos + size].decode("utf-8")
            pos += size
            (m,) = struct.unpack_from(">i", data, pos)
            pos += 4
            parts = struct.unpack_from(f">{max(m, 0)}i", data, pos)
            pos += 4 * max(m, 0)
            out += [(topic, p) for p in parts]
        return out
    except (struct.error, UnicodeDecodeError):
        return []


class Inventory:
    """The operator's view of the queues, exchanges and consumer groups (the Admin
    service's, core/admin.py, and the Prometheus collectors', inventory_metrics.py). It
    reads the open vhosts (the broker's dict, changed in place), the consumer groups and
    the connection registry; the log and the pop groups from ``open`` (at start) on."""

    def __init__(self, vhosts: Mapping[str, VHost], groups: GroupCoordinator, connections: Connections) -> None:
        self.vhosts = vhosts
        self.groups = groups
        self.connections = connections
        self.log: LogManager | None = None  # None: the broker is not started
        self.pop: PopGroups | None = None

    def open(self, log: LogManager, pop: PopGroups) -> None:
        self.log, self.pop = log, pop

    def close(self) -> None:
        self.log = self.pop = None

    @property
    def _log(self) -> LogManager:
        if self.log is None:
            raise RuntimeError("broker is not started")
        return self.log

    # -- queues ----------------------------------------------------------------------------

    def _services(self, vhost: str | None = None) -> Iterator[tuple[str, QueueService]]:
        for name in sorted(self.vhosts):
            if vhost is None or vhost == name:
                yield name, self.vhosts[name].service
        pop = self.pop
        if pop is not None and (vhost is None or vhost in (POP_VHOST, POP_PATH_VHOST)):
            yield POP_VHOST, pop.service

    def list_queues(self, vhost: str | None = None) -> list[QueueInfo]:
        """Every queue (of ``vhost`` only, if given), vhost by vhost, by name."""
        out = []
        for vname, service in self._services(vhost):
            for qname in sorted(service.queues):
                out.append(self._info(vname, qname, service.queues[qname]))
        return out

    def each_queue(self) -> Iterator[tuple[str, str, QueueState]]:
        """(vhost, name as shown, state) of every queue, unsorted: for walks that must be
        cheap (/metrics/per-object)."""
        for vname, service in self._services():
            for name, qs in service.queues.items():
                yield vname, (_pop_name(*name.split("\x1f", 1)) if qs.kind == POP else name), qs

    def queue_sums(self) -> dict[str, list[int]]:
        """Per kind: [queues, ready, unacked, scheduled, consumers], summed straight off
        the queues (about 1 µs a queue: what /metrics and the overview read, where
        building every QueueInfo would stall a broker of 10,000 sessions)."""
        sums = {kind: [0, 0, 0, 0, 0] for kind in PROTOCOL_OF}
        for _, service in self._services():
            for qs in service.queues.values():
                q = qs.queue
                row = sums[qs.kind]
                row[0] += 1
                row[1] += q.ready_count
                row[2] += len(q.leases)
                row[3] += q.staged_count
                row[4] += len(qs.consumers)
        return sums

    def queue_totals(self) -> dict[str, QueueStats]:
        """Per kind, what every queue (deleted ones too) has done since start."""
        totals = {kind: QueueStats() for kind in PROTOCOL_OF}
        for _, service in self._services():
            for kind, stats in service.totals.items():
                totals[kind].add(stats)
        return totals

    def routed_by_protocol(self) -> dict[str, int]:
        """Per protocol, the queue entries made since start for the messages its clients
        published (one per queue a message reached)."""
        out = {p: 0 for p in PROTOCOLS}
        for _, service in self._services():
            for index, n in enumerate(service.routed_by):
                out[PUBLISHED_BY[index]] += n
        return out

    def _info(self, vhost: str, name: str, qs: QueueState) -> QueueInfo:
        q = qs.queue
        staged = q.staged_count
        declared = qs.declared if isinstance(qs.declared, dict) else {}
        shown = _pop_name(*name.split("\x1f", 1)) if qs.kind == POP else name
        return QueueInfo(vhost, shown, qs.kind, qs.durable, qs.auto_delete, qs.exclusive is not None,
                         q.ready_count, len(q.leases), staged, q.ready_bytes, len(qs.consumers),
                         copy(qs.stats), {k: jsonable(v) for k, v in declared.items()} if declared else {})

    def _queue_state(self, vhost: str, name: str) -> tuple[QueueService, QueueState, str]:
        if vhost in (POP_VHOST, POP_PATH_VHOST) and vhost not in self.vhosts and self.pop is not None:
            group, sep, topic = name.partition("/")
            service, real = self.pop.service, group + "\x1f" + topic
            vhost = POP_VHOST
        else:
            v = self.vhosts.get(vhost)
            if v is None:
                raise NotFound(f"no vhost '{vhost}'")
            service, real = v.service, name
        qs = service.queues.get(real)
        if qs is None:
            raise NotFound(f"no queue '{name}' in vhost '{vhost}'")
        return service, qs, vhost

    def queue_info(self, vhost: str, name: str) -> QueueInfo:
        service, qs, vhost = self._queue_state(vhost, name)
        return self._info(vhost, qs.name, qs)

    def purge_queue_contents(self, vhost: str, name: str) -> int:
        """Drop the ready messages of a queue (AMQP queue.purge): those leased stay
        until settled. Returns how many were dropped."""
        service, qs, _ = self._queue_state(vhost, name)
        return service.purge(qs.name)

    def peek_queue(self, vhost: str, name: str, count: int = 10) -> list[PeekedMessage]:
        """The first ``count`` ready messages in the order they would be delivered,
        without taking them: nothing is leased, counted or marked redelivered."""
        if not 0 < count <= MAX_PEEK:
            raise InvalidRequest(f"count must be 1 to {MAX_PEEK}")
        service, qs, _ = self._queue_state(vhost, name)
        q = qs.queue
        out: list[PeekedMessage] = []
        for entry in q.peek(count):
            try:
                m = service.message(entry)
            except RecordGone:
                continue
            env = m.envelope
            props: dict[str, Any] = {}
            for f, v in env.ListFields():
                if f.name not in ("exchange", "routing_key", "message_id"):
                    props[f.name] = jsonable(v)
            if m.headers:
                props["headers"] = {k: None if v is None else text_or_base64(v)[0] for k, v in m.headers}
            out.append(PeekedMessage(len(out) + 1, entry.topic, entry.partition, entry.offset, entry.deliveries > 0,
                                     env.exchange, env.routing_key, env.message_id, m.key,
                                     m.value or b"", props))
            if len(out) >= count:
                break
        return out

    def topic_append_counts(self) -> dict[str, int]:
        """Records appended to each topic since start (O(partitions)); {} before start."""
        lm = self.log
        if lm is None:
            return {}
        return {t.name: sum(p.records_appended for p in t.partitions) for t in list(lm.topics.values())}

    def dead_letters_waiting(self, group: str) -> int:
        """Records of pop group ``group``'s dead-letter topic past its replay cursor (at
        most: a replay may skip some, queues/replay.py)."""
        dlq = self._log.topics.get(dlq_topic(group))
        if dlq is None:
            return 0
        committed = self.groups.fetch_offsets(replay_group(group), [(dlq.name, p.index) for p in dlq.partitions])
        n = 0
        for p in dlq.partitions:
            om = committed.get((dlq.name, p.index))
            n += max(0, p.high_watermark - max(p.log_start_offset, om.offset if om is not None else 0))
        return n

    # -- the whole broker ------------------------------------------------------------------

    def message_totals(self) -> dict[str, dict[str, int]]:
        """Per protocol, since start, the one set of message counters every screen shows
        (the CLI and console overviews, /api/overview, /metrics; docs/operations.md has
        the table): received from its clients, confirmed to them, sent to them (the
        connection registry's counts, closed connections included); routed: the queue
        entries made for the messages its clients published; delivered, redelivered,
        acked, dead-lettered: what the queues its clients consume did (``queues/stats.py``)."""
        out: dict[str, dict[str, int]] = {}
        for protocol, counts in self.connections.message_counts().items():
            out[protocol] = {**counts, "routed": 0, "delivered": 0, "redelivered": 0, "acked": 0,
                             "dead_lettered": 0}
        for protocol, n in self.routed_by_protocol().items():
            out[protocol]["routed"] = n
        for kind, stats in self.queue_totals().items():
            row = out[PROTOCOL_OF[kind]]
            for name, n in stats.to_json().items():
                if name != "routed":  # counted by the publisher's protocol, above
                    row[name] += n
        return out

    # -- exchanges and bindings ----------------------------------------------------------

    def list_exchanges(self, vhost: str | None = None) -> list[dict[str, Any]]:
        out = []
        for vname in sorted(self.vhosts):
            if vhost is not None and vname != vhost:
                continue
            for ex in sorted(self.vhosts[vname].router.exchanges(), key=lambda e: e.name):
                out.append({"name": ex.name, "vhost": vname, "type": ex.kind, "durable": ex.durable,
                            "auto_delete": ex.auto_delete, "internal": ex.internal, "delayed": ex.delayed,
                            "topic": ex.log_topic, "arguments": {k: jsonable(v) for k, v in ex.arguments}})
        return out

    def list_bindings(self, vhost: str | None = None) -> list[dict[str, Any]]:
        out = []
        for vname in sorted(self.vhosts):
            if vhost is not None and vname != vhost:
                continue
            for b in self.vhosts[vname].router.bindings():
                out.append({"source": b.source, "vhost": vname, "destination": b.destination,
                            "destination_type": b.destination_kind, "routing_key": b.routing_key,
                            "arguments": {k: jsonable(v) for k, v in b.arguments},
                            "filter": None if b.filter is None else str(b.filter),
                            "filter_arguments": {} if b.filter is None else b.filter.arguments()})
        return out

    # -- pop groups and consumer groups -------------------------------------------------------

    def pop_groups(self) -> list[dict[str, Any]]:
        """Each pop group on each topic: ready and invisible messages, dead-lettered since
        start, and its dead letters not yet replayed (per group: ``%DLQ%<group>``)."""
        if self.pop is None:
            return []
        return [{"pop_group": g, "topic": t, "ready": qs.queue.message_count, "invisible": qs.queue.unacked_count,
                 "dead_lettered": qs.stats.dead_lettered, "dead_letters_waiting": self.dead_letters_waiting(g)}
                for g, t, qs in self.pop.groups()]

    def is_pop_group(self, group: str) -> bool:
        """Whether a pop group of that name reads any topic."""
        return self.pop is not None and any(name == group for name, _, _ in self.pop.groups())

    def consumer_group_count(self) -> int:
        return len(self.groups.list_groups())

    def list_consumer_groups(self) -> list[GroupInfo]:
        return [self.consumer_group_offsets(g.group_id) for g in self.groups.list_groups()]

    def consumer_group_offsets(self, group: str) -> GroupInfo:
        """A Kafka consumer group: its members, and per partition of each topic it
        committed on or is assigned, the committed offset (or none), the log's start and
        end, and the lag."""
        desc = self.groups.describe(group)
        committed = self.groups.fetch_offsets(group, None)
        if desc is None and not committed:
            raise NotFound(f"no consumer group '{group}'")
        owner: dict[tuple[str, int], tuple[str, str, str]] = {}
        members = []
        for m in desc.members if desc is not None else ():
            assigned = consumer_assignment(m.assignment) if (desc and desc.protocol_type == "consumer") else []
            for tp in assigned:
                owner[tp] = (m.member_id, m.client_id, m.client_host)
            members.append({"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
                            "group_instance_id": m.group_instance_id,
                            "assignment": [{"topic": t, "partition": p} for t, p in assigned]})
        parts = []
        for tp in self._read_partitions(set(committed) | set(owner)):
            om = committed.get(tp)
            start, end = self._offsets(*tp)
            who = owner.get(tp, ("", "", ""))
            parts.append(PartitionLag(tp[0], tp[1], None if om is None else om.offset, start, end, *who))
        return GroupInfo(group, desc.state if desc is not None else "Empty",
                         desc.protocol_type if desc is not None else "", desc.protocol_name if desc else "",
                         members, parts)

    def _read_partitions(self, known: set[tuple[str, int]]) -> list[tuple[str, int]]:
        """Every partition of each topic a group committed on or is assigned, in order:
        one it has not committed on still has records waiting for it. A partition of a
        topic since deleted stays while its commit does."""
        out = set(known)
        for topic in {t for t, _ in known}:
            t = self._log.topics.get(topic)
            if t is not None:
                out.update((topic, p) for p in range(len(t.partitions)))
        return sorted(out)

    def _offsets(self, topic: str, partition: int) -> tuple[int, int]:
        t = self._log.topics.get(topic)
        if t is None or partition >= len(t.partitions):
            return 0, 0
        p = t.partitions[partition]
        return p.log_start_offset, p.high_watermark

    def reset_group_offsets(self, group: str, to: str, value: int | None = None, *,
                            topics: list[str] | None = None, execute: bool = False) -> list[OffsetReset]:
        """kafka-consumer-groups --reset-offsets: ``to`` is "earliest", "latest",
        "datetime" (``value``: epoch ms), "offset" (``value``) or "shift" (by ``value``);
        on ``topics`` (every partition of each), else on the partitions the group has
        committed. A dry run unless ``execute``. New offsets are kept within the log."""
        if to not in RESET_TO:
            raise InvalidRequest(f"reset to must be one of {', '.join(RESET_TO)}")
        if to in ("datetime", "offset", "shift") and value is None:
            raise InvalidRequest(f"reset to {to} needs a value")
        desc = self.groups.describe(group)
        if desc is not None and desc.members:
            raise GroupActive(f"assignments can only be reset if the group '{group}' is inactive, "
                                     f"but the current state is {desc.state}")
        committed = self.groups.fetch_offsets(group, None)
        if topics:
            tps = []
            for t in topics:
                topic = self._log.topics.get(t)
                if topic is None:
                    raise NotFound(f"no topic '{t}'")
                tps += [(t, p) for p in range(len(topic.partitions))]
        else:
            tps = sorted(committed)
            if not tps:
                raise NotFound(f"consumer group '{group}' has no committed offsets: name the topics")
        plan = []
        for tp in tps:
            start, end = self._offsets(*tp)
            om = committed.get(tp)
            current = None if om is None else om.offset
            if to == "earliest":
                new = start
            elif to == "latest":
                new = end
            elif to == "offset":
                new = int(value)  # type: ignore[arg-type]
            elif to == "shift":
                new = (current if current is not None else end) + int(value)  # type: ignore[arg-type]
            else:
                found = self._log.partition(*tp).offset_for_time(int(value))  # type: ignore[arg-type]
                new = end if found is None else found[0]
            plan.append(OffsetReset(tp[0], tp[1], current, min(max(new, start), end)))
        if execute and plan:
            accepted = {(r.topic, r.partition): OffsetAndMetadata(r.new, "") for r in plan}
            # as a simple consumer's commit (generation -1), stored as the group's
            code, codes = self.groups.commit_offsets(group, -1, "", accepted)
            if code is not Code.NONE or any(c is not Code.NONE for c in codes.values()):
                raise PreconditionFailed(f"offsets of group '{group}' not committed: {code.name}")
        return plan


def open_descriptors() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("logbus")
    except PackageNotFoundError:
        return "unknown"


def jsonable(v: Any) -> Any:
    """An argument or property value as JSON can carry it."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, bytes):
        return text_or_base64(v)[0]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    inner = getattr(v, "value", None)  # a typed Value
    if inner is not None and inner is not v:
        return jsonable(inner)
    return str(v)
