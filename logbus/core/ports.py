"""The core's boundary: the typed ports (``typing.Protocol``) the gateways are handed,
each implemented by a service the broker owns (docs/architecture.md section 1).

A gateway is given ports, never the ``Broker`` and never a ``VHost``: the server builds
each gateway with the services it needs (``broker.doors``, ...), typed as the ports here,
and tests/unit/test_layering.py walks the objects a real server's gateways hold and fails
on a ``Broker``, a ``VHost`` or any other core object that is no port's implementation.

- ``Doors``: every gateway's way in: connections, logins, the one access check, alarms.
- ``VHosts`` / ``Queues``: the queue model of one vhost (exchanges, queues, bindings,
  consumers, deliveries and their settlement) and its publish through the one pipeline;
  AMQP and MQTT.
- ``Sessions``: the MQTT room's stored sessions and retained messages.
- ``Streams``: the log and its topics as Kafka sees them, consumer groups; Kafka.
- ``Admin``: the operator's view and changes (vhosts, users, inventory, search, pop
  groups, dead-letter replay); HTTP, CLI.

A port lists what a gateway calls, nothing more; a method a gateway stops calling leaves
its port. The argument and result types are the public types of ``core/types.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, Sequence

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from .access.auth import AccessChange, Action, Perm, Permission, Resource
    from .access.scram import ScramCredential
    from .connections import ConnectionRecord
    from .errors import LogbusError
    from .log.partition import AppendResult, ReadResult
    from .log.topic_config import TopicConfig
    from .streams.group_model import (
        Code,
        GroupDescription,
        GroupListing,
        JoinGroup,
        JoinResult,
        OffsetAndMetadata,
        SyncResult,
        TopicPartition,
    )
    from .topics import TopicInfo
    from .types import PartitionOffsets


# -- Doors -------------------------------------------------------------------------------


class Doors(Protocol):
    """Connections, logins and the access check, for every gateway.

        record = doors.connection_opened("amqp", peer, tls=False, close=transport_close)
        yield doors.authenticate(user, password, loopback=True)   # LoginRefused, LoopbackOnly
        doors.connection_logged_in(record, user, vhost)
        doors.authorize(user, "write", Resource(vhost, "exchange", name))   # AccessRefused
        doors.connection_closed(record, "connection lost")
    """

    anonymous_user: str  # who a client with no credentials acts as (loopback only)

    # connections (core/connections.py)
    def connection_opened(self, protocol: str, peer: str, *, tls: bool,
                          close: Callable[[str], object]) -> ConnectionRecord: ...
    def connection_closed(self, connection: ConnectionRecord, lost: str = "") -> None: ...
    def connection_logged_in(self, connection: ConnectionRecord | None, user: str, vhost: str = "",
                             how: str = "") -> None: ...
    def connection_refused(self, connection: ConnectionRecord | None, user: str, reason: str) -> float: ...

    # logins (core/access/)
    def authenticate(self, user: str, password: str, *, loopback: bool) -> Deferred[None]: ...
    def authenticate_certificate(self, user: str, *, loopback: bool) -> None: ...
    def authenticate_anonymous(self, user: str, *, loopback: bool) -> None: ...
    def loopback_only(self, user: str) -> bool: ...
    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...

    # the access check
    def authorize(self, user: str, action: Action, resource: Resource) -> None: ...
    def authorize_topic(self, user: str, action: Perm, topic: str, key: str | None = None) -> None: ...
    def topic_restricted(self, user: str, vhost: str, exchange: str) -> bool: ...
    def sees_vhost(self, user: str, vhost: str) -> bool: ...
    def access_version(self) -> int: ...
    def on_access_change(self, listener: Callable[[AccessChange], None]) -> None: ...

    # the memory and disk alarms (core/pressure.py)
    def on_alarms(self, listener: Callable[[frozenset[str]], None]) -> frozenset[str]: ...


# -- VHosts and Queues (AMQP, MQTT) ------------------------------------------------------


# -- Sessions (MQTT) ---------------------------------------------------------------------


# -- Topics (Kafka, HTTP, CLI) -----------------------------------------------------------


class Topics(Protocol):
    """The log's topics: made, changed, grown, trimmed, deleted, listed (core/topics.py)."""

    def create_topic(self, name: str, settings: Mapping[str, Any] | None = None) -> TopicInfo: ...
    def alter_topic(self, name: str, settings: Mapping[str, Any], *, validate_only: bool = False) -> TopicInfo: ...
    def grow_topic(self, name: str, partitions: int) -> TopicInfo: ...
    def delete_records(self, topic: str, offsets: Mapping[int, int]) -> dict[int, int | LogbusError]: ...
    def delete_topic(self, name: str, *, force: bool = False) -> int: ...
    def describe_topic(self, name: str) -> TopicInfo: ...
    def list_topics(self) -> list[TopicInfo]: ...


# -- Streams (Kafka) ---------------------------------------------------------------------


class Streams(Protocol):
    """The log's topics as partitioned streams, and consumer groups (core/streams/service.py).

        d = streams.produce("t", 0, batches)         # Deferred[AppendResult], fires when durable
        r = streams.read_spans("t", 0, offset, 1 << 20)  # ReadResult: file spans, for sendfile
        unwatch = streams.watch([("t", 0)], wake)    # wake() when the high watermark moves
        d = streams.join_group(JoinGroup(...))       # Deferred[JoinResult], at the rebalance's end
    """

    @property
    def topic_defaults(self) -> TopicConfig: ...  # what a topic created without settings gets

    # topics as partitioned logs
    def topic_names(self) -> list[str]: ...
    def partition_count(self, topic: str) -> int | None: ...
    def topic_config(self, topic: str) -> TopicConfig: ...
    def produce(self, topic: str, partition: int, data: bytes) -> Deferred[AppendResult]: ...
    def new_producer_id(self) -> int: ...
    def read_spans(self, topic: str, partition: int, offset: int, max_bytes: int) -> ReadResult: ...
    def offsets(self, topic: str, partition: int) -> PartitionOffsets: ...
    def offset_for_time(self, topic: str, partition: int, timestamp: int) -> tuple[int, int] | None: ...
    def watch(self, partitions: Iterable[tuple[str, int]], callback: Callable[[], object]) -> Callable[[], None]: ...

    # consumer groups (core/streams/groups.py)
    def join_group(self, req: JoinGroup) -> Deferred[JoinResult]: ...
    def sync_group(self, group_id: str, generation_id: int, member_id: str, assignments: Mapping[str, bytes],
                   protocol_type: str | None = None, protocol_name: str | None = None,
                   instance_id: str | None = None) -> Deferred[SyncResult]: ...
    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None = None) -> Code: ...
    def leave_group(self, group_id: str, member_ids: Sequence[str],
                    instance_ids: Sequence[str | None] | None = None) -> list[Code]: ...
    def commit_offsets(self, group_id: str, generation_id: int, member_id: str,
                       offsets: Mapping[TopicPartition, OffsetAndMetadata],
                       instance_id: str | None = None) -> tuple[Code, dict[TopicPartition, Code]]: ...
    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None
                      ) -> dict[TopicPartition, OffsetAndMetadata | None]: ...
    def list_groups(self) -> list[GroupListing]: ...
    def describe_group(self, group_id: str) -> GroupDescription | None: ...
    def delete_group(self, group_id: str) -> Code: ...


class Acls(Protocol):
    """Kafka's ACL requests over logbus's permissions (the user store, core/access/auth.py):
    listed, and set as a whole per (user, vhost)."""

    @property
    def version(self) -> int: ...  # moves with every change of users and permissions
    @property
    def permissions(self) -> Mapping[tuple[str, str], Permission]: ...  # (user, vhost) -> permission
    def set_permission(self, user: str, vhost: str, configure: str, write: str, read: str) -> bool: ...


# -- Admin (HTTP, CLI) -------------------------------------------------------------------
