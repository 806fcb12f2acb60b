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
    def access_version(self) -> int: ...
    def on_access_change(self, listener: Callable[[AccessChange], None]) -> None: ...

    # the memory and disk alarms (core/pressure.py)
    def on_alarms(self, listener: Callable[[frozenset[str]], None]) -> frozenset[str]: ...


# -- VHosts and Queues (AMQP, MQTT) ------------------------------------------------------

if TYPE_CHECKING:  # the types of this section and of Sessions
    from collections.abc import Iterator, Sequence

    from google.protobuf.message import Message as ProtoMessage

    from ..filters.message_filter import FilterSpec
    from .message import Message
    from .pipeline import OnDurable, Published
    from .queues.entry import Delivery
    from .queues.queue import Outcome
    from .queues.service import Consumer, QueueSettings, QueueState
    from .retained import RetainedStore
    from .routing.definitions import DestKind, ExchangeDef, HeaderMatch


class VHosts(Protocol):
    """The open vhosts' queue models, by name (core/queue_model.py's ``QueueModel``).

        queues = vhosts.queues("/")      # None: no such vhost open (deleted meanwhile)
        vhosts.commit()                  # the queues' changes of this turn written now
    """

    def queues(self, vhost: str) -> Queues | None: ...
    def commit(self) -> None: ...


class Queues(Protocol):
    """The queue model of one vhost: exchanges, queues, bindings, consumers, deliveries
    and their settlement, and its publishes through the one pipeline (core/pipeline.py).
    Implemented by ``VHostQueues`` (core/queue_model.py), whose methods are the queue
    service's, the vhost's and the pipeline's own, bound: no call layer of its own.

        queues.declare_queue("q", QueueSettings(), durable=True)
        queues.bind("amq.topic", "q", "a.*")
        out = queues.publish([message], on_durable)   # Published: done, unrouted, refused, error
        queues.consume("q", consumer)                 # consumer.deliver(delivery) when one is ready
        queues.ack(delivery)
    """

    name: str  # the vhost's

    @property
    def queues(self) -> Mapping[str, QueueState]: ...  # by name, live

    # exchanges and bindings
    def declare_exchange(self, name: str, kind: str = "direct", *, durable: bool = False,
                         auto_delete: bool = False, internal: bool = False,
                         arguments: Mapping[str, Any] | None = None, passive: bool = False,
                         delayed: bool = False) -> None: ...
    def delete_exchange(self, name: str, *, if_unused: bool = False) -> None: ...
    def has_exchange(self, name: str) -> bool: ...
    def exchange(self, name: str) -> ExchangeDef: ...
    def bind(self, source: str, destination: str, routing_key: str = "",
             arguments: Mapping[str, Any] | None = None, *, kind: DestKind = "queue",
             filter: FilterSpec | None = None, match: HeaderMatch | None = None) -> None: ...
    def unbind(self, source: str, destination: str, routing_key: str = "",
               arguments: Mapping[str, Any] | None = None, *, kind: DestKind = "queue",
               filter: FilterSpec | None = None, match: HeaderMatch | None = None) -> None: ...

    # queues: declared ones (stored definitions) and those a protocol's sessions own
    def declare_queue(self, name: str, settings: QueueSettings = ..., *, durable: bool = False,
                      exclusive: Any = None, auto_delete: bool = False,
                      arguments: Mapping[str, Any] | None = None, passive: bool = False, declarer: Any = None,
                      equivalent: Callable[[QueueState, dict[str, Any]], None] | None = None) -> QueueState: ...
    def delete_queue(self, name: str, *, if_unused: bool = False, if_empty: bool = False) -> int: ...
    def purge_queue(self, name: str) -> int: ...
    def queue(self, name: str) -> QueueState: ...
    def open_queue(self, name: str, settings: QueueSettings = ..., *, durable: bool = False,
                   kind: str = ...) -> QueueState: ...
    def close_queue(self, name: str) -> None: ...

    # consumers and deliveries (per message: bound to the queue service's methods)
    def consume(self, name: str, consumer: Consumer, spec: FilterSpec | None = None) -> None: ...
    def cancel(self, queue: str, consumer: Consumer) -> None: ...
    def dispatch(self, name: str) -> None: ...
    def get(self, queue: str, owner: Any, no_ack: bool) -> Delivery | None: ...
    def ack(self, d: Delivery) -> None: ...
    def reject(self, d: Delivery, requeue: bool) -> None: ...
    def settle(self, d: Delivery, outcome: Outcome) -> None: ...
    def release(self, name: str, owner: Any) -> None: ...
    def holds(self, queue: str, seq: int) -> bool: ...

    # publish: a batch of rows (their envelopes say exchange and routing key)
    def publish(self, rows: Sequence[Message], on_durable: OnDurable | None = None, *,
                delay_of: Callable[[Message], int] | None = None,
                dispatch_later: bool = False) -> Published: ...


# -- Sessions (MQTT) ---------------------------------------------------------------------


class Sessions(Protocol):
    """What the MQTT room keeps in the broker (core/sessions.py's ``SessionService``): the
    records of sessions that outlive their connections, the retained messages, and its
    work at start.

        sessions.on_start(room.start)     # after the vhosts load, before the journal's redo
        for raw in sessions.stored_sessions("mqtt"): ...
        sessions.save_session("mqtt", client_id, record)   # StorageError: kept, written later
        sessions.retained.retain(record)
    """

    @property
    def retained(self) -> RetainedStore: ...  # the one open now (opened at start)

    def on_start(self, take_up: Callable[[], object]) -> None: ...
    def stored_sessions(self, protocol: str) -> Iterator[bytes]: ...
    def save_session(self, protocol: str, client_id: str, record: ProtoMessage) -> None: ...
    def forget_session(self, protocol: str, client_id: str) -> None: ...


class SessionAdmin(Protocol):
    """What the HTTP API and the CLI use of a protocol's sessions (the MQTT room:
    ``broker.rooms["mqtt"]``)."""

    def describe(self) -> list[dict[str, Any]]: ...
    def kick(self, client_id: str) -> bool: ...
    def delete_session(self, client_id: str) -> bool: ...


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
