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

from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from .access.auth import AccessChange, Action, Perm, Resource
    from .access.scram import ScramCredential
    from .connections import ConnectionRecord
    from .errors import LogbusError
    from .topics import TopicInfo


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
    @property
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


# -- Admin (HTTP, CLI) -------------------------------------------------------------------
