"""The Admin service (``broker.admin``, the ``ports.Admin`` port): the operator's view of
the broker and the changes an operator makes, for the HTTP API and the web console (the
CLI reaches it through them).

    admin = broker.admin
    admin.create_vhost("prod")                               # True: new
    admin.put_user("ops", password_hash=h, tags="administrator")
    admin.list_queues("prod")                                # the inventory (inventory.py)
    admin.search_messages("orders", key=b"customer-42")      # search.py
    d = admin.publish("orders", [message])                   # the one pipeline; Deferred[offsets]
    admin.node()                                             # RabbitMQ's /api/nodes entry

It owns the inventory (``Inventory``), the dead-letter replay and the message search, and
is handed the parts it reads and changes: the users, vhosts and permissions (``Access``),
the connection registry, the resource monitor, the storage faults, the password thread,
the open vhosts' dict and how to open one; the server tells it of its listeners
(``listener_up``, ``listener_failed``). What only exists once the broker has started
(the log, the pop groups, the pipeline, the state store and the queue journal) is handed
to ``open`` at start and dropped by ``close`` at stop. Nothing here runs per message.
"""

from __future__ import annotations

import logging
import os
import platform
import resource
import socket
import sys
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred

from .. import compiled
from .access.auth import SHA256, Access, AccessChange, InvalidAccess, Permission, User, VHostInfo, check_name
from .access.doors import NewPassword
from .access.passwords import PasswordWorker, hash_password
from .access.scram import ScramCredential, derive_all
from .access.topic_permissions import TopicPermission
from .connections import PROTOCOLS, Connections, ConnectionRecord, utc_iso
from .errors import LogbusError
from .faults import StorageFaults
from .inventory import Inventory, open_descriptors, version
from .log.topic_config import validate_topic_name
from .message import Message
from .ports import ClientSessions
from .pressure import DISK, MEMORY, RESOURCES, ResourceMonitor, free_disk, resident_memory
from .queues.replay import DeadLetterReplay
from .routing.log_topics import DEFAULT_EXCHANGE_TOPIC, key_partition, vhost_topic
from .routing.router import PREDECLARED
from .search import Found, KeyForms, search
from .state import vhost_definitions_prefixes

if TYPE_CHECKING:
    from .log import LogManager
    from .pipeline import Pipeline
    from .queues.journal import QueueStore
    from .queues.pop import PopGroups
    from .state import StateStore
    from .streams.groups import GroupCoordinator
    from .vhost import VHost

log = logging.getLogger(__name__)

STATE_SIZE_SECONDS = 5.0  # the state store's size on disk is measured at most this often


@dataclass(frozen=True)
class ListenerState:
    """One of the server's listeners: bound to ``address`` ("host:port", or a UNIX
    socket's path) since ``started_ms`` (epoch ms), or failed to listen (``problem``: why;
    ``address``: the endpoint it was given)."""

    name: str  # "amqp", "mqtt", "mqtt.2" (a second endpoint), ...
    address: str
    tls: bool
    started_ms: int | None = None
    problem: str | None = None

    def to_json(self, now_ms: int) -> dict[str, Any]:
        """RabbitMQ's listener fields (``protocol``, ``ip_address``, ``port``) and logbus's."""
        host, port = None, None
        if self.problem is None:
            h, sep, p = self.address.rpartition(":")
            if sep and p.isdigit():
                host, port = h.strip("[]"), int(p)
        up = self.started_ms is not None and self.problem is None
        return {"name": self.name, "protocol": self.name.partition(".")[0], "ip_address": host, "port": port,
                "address": self.address, "tls": self.tls, "listening": up,
                "started_ms": self.started_ms if up else None,
                "started_at": utc_iso(self.started_ms) if up and self.started_ms is not None else None,
                "uptime": now_ms - self.started_ms if up and self.started_ms is not None else None,
                "problem": self.problem}


class DirectorySize:
    """The bytes of the files under ``path`` (the state store's RocksDB directory: flat, a
    few dozen files), measured at most once per ``max_age`` seconds: the console's node
    page asks every few seconds per open tab."""

    def __init__(self, path: Path, max_age: float = STATE_SIZE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self.max_age, self.clock = path, max_age, clock
        self._measured: tuple[float, int] | None = None

    def __call__(self) -> int:
        now = self.clock()
        if self._measured is None or now - self._measured[0] >= self.max_age:
            self._measured = (now, files_size(self.path))
        return self._measured[1]


def files_size(path: str | os.PathLike[str]) -> int:
    """The sum of the sizes of the files under ``path`` (what cannot be read, such as a
    file a compaction removed meanwhile, is not counted)."""
    total = 0
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        total += files_size(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
    except OSError:
        return total
    return total


def descriptor_limit() -> int | None:
    """The process's soft limit on open file descriptors (None: unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


class AdminService:
    """``ports.Admin``: see the module's docstring."""

    def __init__(self, inventory: Inventory, *, access: Access, connections: Connections,
                 pressure: ResourceMonitor, faults: StorageFaults, groups: GroupCoordinator,
                 password_worker: PasswordWorker[Any], vhosts: MutableMapping[str, VHost],
                 open_vhost: Callable[[str], object], close_vhost: Callable[[str], object],
                 key_forms: Mapping[str, KeyForms],
                 data_dir: Path, started_at: float) -> None:
        self.inventory = inventory
        self._access = access
        self._connections = connections
        self._pressure = pressure
        self._faults = faults
        self._password_worker = password_worker
        self._vhosts = vhosts  # the broker's open vhosts: changed in place
        self._open_vhost = open_vhost
        self._close_vhost = close_vhost  # the vhost's model and its queues' port forgotten
        self._key_forms = key_forms
        self._data_dir = data_dir
        self._started_at = started_at
        # per protocol, its gateway's client sessions ("mqtt": the MQTT room), handed over
        # by the server that built the gateway
        self.client_sessions: dict[str, ClientSessions] = {}
        # listeners that are not serving (the server's): name -> why, for /healthz
        self.listener_problems: dict[str, str] = {}
        self._listeners: dict[str, ListenerState] = {}  # the server's, in the order it made them
        self._state_size: DirectorySize | None = None
        self._log: LogManager | None = None
        self._pipeline: Pipeline | None = None
        self._state: StateStore | None = None
        self._queue_store: QueueStore | None = None
        self._replay = DeadLetterReplay(self._started_log, groups, self._publish_replayed,
                                        inventory.is_pop_group)
        # the inventory's answers, as they are
        self.message_totals = inventory.message_totals
        self.topic_append_counts = inventory.topic_append_counts
        self.list_queues = inventory.list_queues
        self.queue_info = inventory.queue_info
        self.peek_queue = inventory.peek_queue
        self.purge_queue_contents = inventory.purge_queue_contents
        self.list_exchanges = inventory.list_exchanges
        self.list_bindings = inventory.list_bindings
        self.list_consumer_groups = inventory.list_consumer_groups
        self.consumer_group_offsets = inventory.consumer_group_offsets
        self.reset_group_offsets = inventory.reset_group_offsets
        self.pop_groups = inventory.pop_groups
        self.dead_letters_waiting = inventory.dead_letters_waiting

    def open(self, log: LogManager, pop: PopGroups, pipeline: Pipeline, state: StateStore,
             queue_store: QueueStore) -> None:
        """The broker has started: what exists from then on."""
        self._log, self._pipeline, self._state, self._queue_store = log, pipeline, state, queue_store
        self._state_size = DirectorySize(state.path)
        self.inventory.open(log, pop)

    def close(self) -> None:
        """The broker has stopped."""
        self._log = self._pipeline = self._state = self._queue_store = None
        self._state_size = None
        self.inventory.close()

    def _started_log(self) -> LogManager:
        if self._log is None:
            raise RuntimeError("broker is not started")
        return self._log

    # -- vhosts ---------------------------------------------------------------------------

    def list_vhosts(self) -> list[VHostInfo]:
        return [self._access.vhosts[n] for n in sorted(self._access.vhosts)]

    def vhost_info(self, name: str) -> VHostInfo:
        """UnknownVHost when there is none."""
        return self._access.vhost(name)

    def has_vhost(self, name: str) -> bool:
        """Whether vhost ``name`` is open (its queue model loaded)."""
        return name in self._vhosts

    def create_vhost(self, name: str, description: str = "", tags: str | list[str] | None = None) -> bool:
        """Create (and open) a vhost, or update its description and tags; True when new.
        Refused (InvalidAccess) when its exchanges' log topics could not be named."""
        check_name("vhost", name)
        for topic in [vhost_topic(name, DEFAULT_EXCHANGE_TOPIC), *(vhost_topic(name, x) for x in PREDECLARED)]:
            try:
                validate_topic_name(topic)
            except LogbusError as exc:
                raise InvalidAccess(f"vhost name {name!r} cannot name its log topics ({topic!r}: {exc})") from None
        new = self._access.put_vhost(name, description, tags)
        if new and self._log is not None:
            self._open_vhost(name)
            log.info("created vhost %r", name)
        return new

    def delete_vhost(self, name: str) -> None:
        """Delete a vhost: its connections are closed (gateways hear of it first), then its
        exchanges, queues, bindings, queue entries and permissions are deleted from the
        state store in one batch. Its log topics stay, with their data."""
        self._access.vhost(name)  # UnknownVHost
        self._access.announce(AccessChange("vhost_deleted", name))
        self._close_vhost(name)
        state, queue_store = self._state, self._queue_store
        assert state is not None and queue_store is not None, "broker is not started"
        queue_store.commit()  # what closing connections wrote, before it is deleted
        with state.batch(sync=True) as b:
            for cf, prefix in vhost_definitions_prefixes(name):
                for key, _ in state.scan_prefix(cf, prefix):
                    b.delete(cf, key)
            self._access.forget_vhost(name, b)
        log.info("deleted vhost %r (its log topics are kept)", name)

    # -- users and permissions ------------------------------------------------------------

    def list_users(self) -> list[User]:
        users = self._access.users
        return [users[n] for n in sorted(users)]

    def user(self, name: str) -> User:
        """UnknownUser when there is none."""
        return self._access.user(name)

    def find_user(self, name: str) -> User | None:
        return self._access.users.get(name)

    def hash_password(self, password: str) -> Deferred[NewPassword]:
        """``password`` hashed (scrypt) with its SCRAM credentials made, on the password
        thread: what ``put_user(password_hash=..., scram=...)`` stores."""
        return self._password_worker.run(lambda: NewPassword(hash_password(password), derive_all(password)))

    def put_user(self, name: str, *, password: str | None = None, password_hash: str | None = None,
                 hashing_algorithm: str = SHA256, tags: str | list[str] | None = None,
                 scram: tuple[ScramCredential, ...] = ()) -> bool:
        """Create or replace a user (``Access.put_user``); True when new."""
        return self._access.put_user(name, password=password, password_hash=password_hash,
                                     hashing_algorithm=hashing_algorithm, tags=tags, scram=scram)

    def delete_user(self, name: str) -> None:
        """Delete a user and its permissions; its connections are closed (gateways hear of
        it first)."""
        self._access.delete_user(name)

    def list_permissions(self) -> list[Permission]:
        perms = self._access.permissions
        return [perms[k] for k in sorted(perms, key=lambda k: (k[1], k[0]))]

    def permission(self, vhost: str, user: str) -> Permission:
        """UnknownPermission (UnknownUser, UnknownVHost) when there is none."""
        return self._access.get_permission(vhost, user)

    def set_permission(self, user: str, vhost: str, configure: str, write: str, read: str) -> bool:
        return self._access.set_permission(user, vhost, configure, write, read)

    def clear_permission(self, user: str, vhost: str) -> None:
        self._access.clear_permission(user, vhost)

    def list_topic_permissions(self) -> list[TopicPermission]:
        return self._access.list_topic_permissions()

    def set_topic_permission(self, user: str, vhost: str, exchange: str, write: str, read: str) -> bool:
        return self._access.set_topic_permission(user, vhost, exchange, write, read)

    def clear_topic_permissions(self, user: str, vhost: str, exchange: str | None = None) -> None:
        self._access.clear_topic_permissions(user, vhost, exchange)

    # -- connections, health, limits ------------------------------------------------------

    def list_connections(self, protocol: str | None = None) -> list[ConnectionRecord]:
        return self._connections.list(protocol)

    def close_connection(self, id: int, reason: str = "closed by an administrator") -> bool:
        """Close connection ``id``, whatever its protocol; False when there is none."""
        return self._connections.close(id, reason)

    def health(self) -> list[str]:
        """Why the broker does not serve as it should now (empty: it does): partitions
        or the state store refusing writes, resource alarms, listeners down."""
        pressure = self._pressure
        reasons = self._faults.reasons()
        reasons += [f"{name} alarm: {pressure.describe(name)}" for name in sorted(pressure.alarms)]
        reasons += [f"listener {name}: {why}" for name, why in sorted(self.listener_problems.items())]
        return reasons

    def limits(self) -> dict[str, Any]:
        """The memory and disk limits, their alarms and what was last measured."""
        return self._pressure.to_json()

    def set_limits(self, *, memory_high_watermark: Any = None, disk_free_limit: Any = None) -> dict[str, Any]:
        """Change either limit or both (None: keep it; InvalidConfig names a bad one) and
        check them at once; returns ``limits()``."""
        self._pressure.set_limits(memory_high_watermark=memory_high_watermark, disk_free_limit=disk_free_limit)
        return self._pressure.to_json()

    def overview(self) -> dict[str, Any]:
        """RabbitMQ's /api/overview, in its field names where it has them."""
        inventory, pressure = self.inventory, self._pressure
        sums = inventory.queue_sums()
        by_protocol = {p: 0 for p in PROTOCOLS}
        for c in self._connections:
            by_protocol[c.protocol] += 1
        return {
            "product_name": "logbus", "product_version": version(),
            "node": socket.gethostname(), "uptime_ms": int((time.time() - self._started_at) * 1000),
            "object_totals": {"connections": len(self._connections), "queues": sum(r[0] for r in sums.values()),
                              "vhosts": len(self._vhosts), "topics": len(self._started_log().topics),
                              "consumers": sum(r[4] for r in sums.values()),
                              "consumer_groups": inventory.consumer_group_count()},
            "connections_by_protocol": by_protocol,
            "queue_totals": {"messages": sum(r[1] + r[2] + r[3] for r in sums.values()),
                             "messages_ready": sum(r[1] for r in sums.values()),
                             "messages_unacknowledged": sum(r[2] for r in sums.values()),
                             "messages_scheduled": sum(r[3] for r in sums.values())},
            "message_totals": inventory.message_totals(),
            "alarms": sorted(pressure.alarms), "health": self.health(),
            "mem_used": resident_memory(), "fd_used": open_descriptors(),
            "disk_free": free_disk(self._data_dir), "disk_free_limit": pressure.disk_free_limit,
        }

    # -- the node ---------------------------------------------------------------------------

    def listener_up(self, name: str, address: str, tls: bool) -> None:
        """The server's listener ``name`` listens on ``address`` from now on."""
        self._listeners[name] = ListenerState(name, address, tls, started_ms=int(time.time() * 1000))
        self.listener_problems.pop(name, None)

    def listener_failed(self, name: str, endpoint: str, tls: bool, why: str) -> None:
        """The server's listener ``name`` could not listen on ``endpoint``: a health reason."""
        self._listeners[name] = ListenerState(name, endpoint, tls, problem=why)
        self.listener_problems[name] = why

    def node(self) -> dict[str, Any]:
        """This broker as RabbitMQ's GET /api/nodes describes a node, in its field names
        where it has them (``mem_*``, ``disk_free*``, ``fd_*``, ``uptime`` in ms, ``os_pid``
        a string as RabbitMQ's), and logbus's own: the alarms in force with their
        thresholds, the state store's and the log's bytes on disk, the listeners, the
        Python running it and whether the compiled modules run. Memory, disk free and
        descriptors are read now; the alarms are as of the monitor's last check (once a
        second); the state store's size is at most ``STATE_SIZE_SECONDS`` old."""
        pressure, log_, state_size = self._pressure, self._started_log(), self._state_size
        assert state_size is not None, "broker is not started"
        now_ms = int(time.time() * 1000)
        started_ms = int(self._started_at * 1000)
        try:
            disk_free = free_disk(self._data_dir)
        except OSError:  # the directory was removed under us, say: the monitor's last reading
            disk_free = pressure.disk_free
        runs_compiled, build = compiled.status()
        measured = {MEMORY: (pressure.memory_used, pressure.memory_limit),
                    DISK: (pressure.disk_free, pressure.disk_free_limit)}
        return {
            "name": socket.gethostname(), "type": "disc", "running": True, "os_pid": str(os.getpid()),
            "processors": os.cpu_count() or 1, "product_version": version(),
            "uptime": now_ms - started_ms, "started_ms": started_ms, "started_at": utc_iso(started_ms),
            "mem_used": resident_memory(), "mem_limit": pressure.memory_limit,
            "mem_alarm": MEMORY in pressure.alarms, "mem_calculation_strategy": "rss",
            "memory_high_watermark": pressure.memory_high_watermark, "total_memory": pressure.total_memory,
            "disk_free": disk_free, "disk_free_limit": pressure.disk_free_limit,
            "disk_free_alarm": DISK in pressure.alarms,
            "fd_used": open_descriptors(), "fd_total": descriptor_limit(),
            "resource_alarms": [{"resource": name, "value": measured[name][0], "limit": measured[name][1],
                                 "reason": pressure.describe(name)} for name in RESOURCES if name in pressure.alarms],
            "health": self.health(),
            "data_dir": str(self._data_dir), "db_dir": str(state_size.path), "log_dir": str(log_.root),
            "state_store_bytes": state_size(),
            "log_bytes": sum(p.size_bytes for t in log_.topics.values() for p in t.partitions),
            "listeners": [listener.to_json(now_ms) for listener in self._listeners.values()],
            "python_version": platform.python_version(), "python_implementation": platform.python_implementation(),
            "interpreter": sys.executable, "compiled": runs_compiled, "build": build,
        }

    # -- messages -------------------------------------------------------------------------

    def search_messages(self, topic: str, *, key: bytes | None = None, message_id: str | None = None,
                        start_ms: int | None = None, end_ms: int | None = None, partition: int | None = None,
                        limit: int = 100) -> Found:
        """Records of ``topic`` with record key ``key`` and/or envelope message id
        ``message_id``, and/or a timestamp in ``[start_ms, end_ms]`` (epoch ms, both
        inclusive; either may be open), in one partition or all; at most ``limit`` (1 to
        MAX_LIMIT), partitions in order and offsets ascending. A key or message id is found
        through the key index, never by a scan; a time range alone seeks with the time
        index; a key is looked up in each of its forms in the topic (``key_forms``: on
        ``amq.topic``, MQTT's ``a/b`` and AMQP's ``a.b``). ``Found.truncated``: more
        matched than ``limit``. Raises UnknownTopic, UnknownPartition, InvalidRequest (no
        criterion, a limit out of range, a range that ends before it starts)."""
        return search(self._started_log(), topic, key=key, message_id=message_id, start_ms=start_ms,
                      end_ms=end_ms, partition=partition, limit=limit, key_forms=self._key_forms.get(topic))

    def publish(self, topic: str, messages: Sequence[Message], partition: int | None = None) -> Deferred[list[int]]:
        """Append ``messages`` to ``topic`` through the one pipeline (``Pipeline.append``):
        one partition (``partition``, else chosen by the first message's key), handed to
        the queues and pop groups that read the topic at their deliver-at time. Fires with
        their offsets once durable per the topic's flush policy."""
        if self._pipeline is None:
            raise RuntimeError("broker is not started")
        return self._pipeline.append(topic, messages, partition)

    def partition_for(self, topic: str, key: bytes | None) -> int:
        """The partition ``publish`` picks for a first message with ``key``."""
        return key_partition(key, len(self._started_log().topic(topic).partitions))

    def _publish_replayed(self, topic: str, messages: list[Message], partition: int | None) -> Deferred[list[int]]:
        return self.publish(topic, messages, partition)

    def dlq_replay(self, group: str, topic: str | None = None, max: int | None = None,
                   may_publish: Callable[[str], object] | None = None) -> Deferred[dict[str, Any]]:
        """Publish ``group``'s dead letters (topic ``%DLQ%<group>``) not yet replayed
        again to the topics they died in (only ``topic`` if given; at most ``max``, else
        ``queues.replay.MAX_REPLAY``), as new messages that every queue reading those
        topics gets. Fires with the counts once they are durable and the group's replay
        cursor is committed (core/queues/replay.py). ``may_publish(topic)`` may refuse
        (raise) a topic before anything is published."""
        return self._replay.run(group, topic, max, may_publish)
