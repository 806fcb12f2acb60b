"""One MQTT connection: the Twisted shell around the session machine (machine.py).

Theory of operation (docs/mqtt.md). The shell moves bytes and owns the timers; the
sans-I/O ``machine.Machine`` decides everything else (the states and ``TRANSITIONS``,
protocol errors and their reason codes, the QoS 1/2 flows both ways) and hands out typed
requests (requests.py), which ``_carry`` carries out against the room (``room.MqttRoom``,
which holds the sessions over the core's ``VHosts`` and ``Sessions`` ports) and the socket.
The login and the access checks (``ConnectionAccess``) are the shell's: they ask the
``Doors`` port (``authenticate``, ``authorize``). Each connection is in the broker's
connection registry while it is open.

Per read: the bytes go to the machine and its requests are carried out in order. The
PUBLISHes of the read are kept for the end of the reactor turn (``turn.TurnPublishes``),
where every connection's of the turn are published as one ``publish_many``: a fleet of
devices that each send one message now and then costs one route-append-dispatch pass per
turn, not one per read. The connection's requests after its PUBLISHes wait for that
(``MqttProtocol.published``). The output of every connection touched by a read is written
when the read ends (``MqttFactory.flush``), and what the end of the turn made (deliveries,
answers) at the end of that pass.

Messages to the client come from the queue service through ``room.SessionConsumer``:
the connection has credit while it is connected, its socket buffer is not full (the
transport's push-producer callbacks) and the client's receive maximum leaves room.

Resource alarms (core/pressure.py, alarms.py): while one is set, a connection that has
published is not read (the transport's ``pauseProducing``), as Mosquitto and EMQX apply
back-pressure; its client's writes wait in TCP. A connection that only subscribes goes on
being read, so consumers drain. Reading resumes when every alarm has cleared. The factory
counts each connection stopped and logs once per alarm. The keep alive does not run out
on a connection we do not read.

Keep alive: a connection that sends nothing for 1.5 times its keep alive is closed and
its will published. A connection that sends no CONNECT within the factory's
``connect_timeout`` (the broker's ``handshake_timeout_ms``; over WebSocket, counted once
the upgrade is done, which has its own limit of the same length) is closed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure

from ...core.errors import LoopbackOnly, Refused, StorageError
from ...core.types import ConnectionRecord, Perm, Resource, tick_of
from ..answers import now_or_later
from ..listener import DEFAULT_RULES, ListenerRules
from ..output import direct_writer, quick_ack
from ..peers import is_loopback, is_tls, lost_reason, peer_identity, peer_of
from ..unread import UnreadWatch
from .connect import Accepted, ServerLimits
from ...filters.properties import record_properties
from .machine import EXPIRY_CAPPED, INFLIGHT_FULL, RECEIVE_MAXIMUM_HIT, Machine, Properties_
from ...core.types import Delivery
from .mapping import EXCHANGE
from .publishing import Inflight
from .reasons import (
    BAD_USER_NAME_OR_PASSWORD, NOT_AUTHORIZED, REFUSED_BAD_USER_NAME_OR_PASSWORD, REFUSED_NOT_AUTHORIZED,
    REFUSED_SERVER_UNAVAILABLE, SERVER_UNAVAILABLE, UNSPECIFIED_ERROR, MqttError,
)  # fmt: skip
from .requests import (
    AddSubscriptions, ArmKeepAlive, Close, Consume, Detach, Dispatch, Login, MatchRetained, PublishBatch,
    QuickAck, RemoveSubscriptions, Retain, SaveSession, SetReading, Settle,
)  # fmt: skip
from .room import MqttRoom, Unavailable, binding_key
from .states import State
from .subscriptions import inner_filter
from .turn import TurnPublishes
from .wire import MQTT_5

if TYPE_CHECKING:
    from ...core.ports import Doors, Sessions, VHosts
    from ...core.types import Metrics

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0  # seconds for a new connection to send its CONNECT (by default)


class ConnectionAccess:
    """A logged-in connection's rights (the machine's ``requests.Access``): write and read
    on amq.topic, and, when the user has a topic permission there, that permission for
    each routing key (``Doors.authorize``). What it learnt is kept until the broker's
    users or permissions change (``Doors.access_version``)."""

    __slots__ = ("doors", "vhost", "user", "client_id", "version", "may_write", "may_read", "by_key")

    def __init__(self, doors: Doors, vhost: str, user: str, client_id: str) -> None:
        self.doors = doors
        self.vhost = vhost
        self.user = user
        self.client_id = client_id
        self.version = -1
        self.may_write = self.may_read = self.by_key = False

    def _learn(self) -> None:
        self.version = self.doors.access_version
        self.may_write = self._allowed("write")
        self.may_read = self._allowed("read")
        self.by_key = self.doors.topic_restricted(self.user, self.vhost, EXCHANGE)

    def may_publish(self, routing_key: str) -> bool:
        if self.version != self.doors.access_version:
            self._learn()
        return self.may_write and (not self.by_key or self._allowed("write", routing_key))

    def may_subscribe(self, topic_filter: str) -> bool:
        if self.version != self.doors.access_version:
            self._learn()
        return self.may_read and (not self.by_key or self._allowed("read", binding_key(inner_filter(topic_filter))))

    def _allowed(self, perm: Perm, routing_key: str | None = None) -> bool:
        try:
            self.doors.authorize(self.user, perm, Resource(self.vhost, "exchange", EXCHANGE, routing_key,
                                                            self.client_id))
        except Refused:
            return False
        return True


class MqttProtocol(Protocol):
    transport: Any  # a TCP (or TLS, or WebSocket) transport; zope interfaces do not type-check
    listener_rules: ListenerRules = DEFAULT_RULES  # the listener's own anonymous= (listener.py)

    def __init__(self, factory: MqttFactory) -> None:
        self.factory = factory
        self.room = factory.room
        self.machine = Machine(limits=factory.limits, max_packet_size=factory.max_packet_size,
                               clock=self.room.clock, new_client_id=self.room.new_client_id,
                               properties=factory.properties, limit_hit=factory.limit_hit)
        self.peer = ""
        self.last_read = 0.0
        self._timer: Any = None  # CONNECT timeout, then keep alive
        self._queued = False  # in the factory's list of connections with output
        self._save_due: Any = None  # the session whose record to store before the output goes
        self._commit_due = False  # settlements to write to the state store before the output goes
        self._draining = False  # carrying out the machine's requests
        self._held = False  # its publishes wait for the end of the turn (turn.py), the rest after them
        self._send: Any = None  # direct_writer(transport)
        self._ack_now: Callable[[], None] | None = None  # output.quick_ack(transport)
        self.record: ConnectionRecord | None = None  # in the broker's connection registry
        self._how = ""  # how it logged in, for the log
        self._login_timer: Any = None  # a refused login's answer, slowed down (_refuse)

    @property
    def session(self) -> Any:
        return self.machine.session

    @property
    def state(self) -> State:
        return self.machine.state

    # -- connection --------------------------------------------------------------------------

    def connectionMade(self) -> None:
        host, port = peer_of(self.transport)
        self.peer = self.machine.peer = f"{host}:{port}"
        self.record = self.factory.doors.connection_opened("mqtt", self.peer, tls=is_tls(self.transport),
                                                            close=self._close_by_admin)
        if hasattr(self.transport, "setTcpNoDelay"):
            self.transport.setTcpNoDelay(True)
        self._send = direct_writer(self.transport, self.record)
        self._ack_now = quick_ack(self.transport)
        self.transport.registerProducer(self, True)
        self.last_read = self.factory.reactor.seconds()
        self._timer = self.factory.reactor.callLater(self.factory.connect_timeout, self._connect_timeout)
        self.factory.connections.add(self)
        if self.factory.alarms:
            self.machine.resource_alarm(self.factory.alarms)

    def _close_by_admin(self, reason: str) -> None:
        self.kick()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.factory.connections.discard(self)
        self.factory.unread.discard(self.transport)
        if self.record is not None:
            self.factory.doors.connection_closed(self.record, lost_reason(reason))
        self._cancel_timer()
        if self._login_timer is not None and self._login_timer.active():
            self._login_timer.cancel()
        self.machine.connection_lost()
        self._drain()

    def pauseProducing(self) -> None:
        self.machine.pause()

    def resumeProducing(self) -> None:
        m = self.machine
        if m.resume() and m.session is not None:
            self.room.dispatch(m.session)
        self._output_due()

    def stopProducing(self) -> None:
        self.machine.pause()

    def dataReceived(self, data: bytes) -> None:
        factory = self.factory
        factory.reading += 1
        try:
            m = self.machine
            if self.record is not None:
                self.record.bytes_in += len(data)
            if m.state is not State.CLOSED:
                self.last_read = factory.reactor.seconds()
                m.receive_data(data)
                self._drain()
        finally:
            factory.reading -= 1
            if not factory.reading:
                factory.flush()

    def _drain(self) -> None:
        """Carry out what the machine asks, in order. Reentered (a log callback while
        publishing), it leaves the requests to the loop already running."""
        if self._draining:
            return
        self._draining = True
        m = self.machine
        carry = _CARRY
        try:
            while not self._held and (r := m.next_request()) is not None:
                carry[type(r)](self, r)
        finally:
            self._draining = False
        if m.out and not self._queued:
            self._queued = True
            self.factory.output_due(self)

    def _output_due(self) -> None:
        if self.machine.out and not self._queued:
            self._queued = True
            self.factory.output_due(self)

    def flush_output(self) -> None:
        self._queued = False
        try:
            if self._commit_due:  # a PUBREC's settlement, before its PUBREL
                self._commit_due = False
                self.room.commit()
            if self._save_due is not None:  # the record first: it speaks for the bytes below
                s, self._save_due = self._save_due, None
                self.room.save(s)
        except StorageError as e:  # not stored: the bytes that speak of it must not go
            self._storage_failed(f"its session state could not be stored: {e}")
            return
        out = self.machine.out
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            self._send(data)

    def _storage_failed(self, reason: str) -> None:
        """The state store refused what the connection was about to answer for: closed in
        MQTT's terms (machine.storage_failed), nothing of its pending output sent."""
        self.machine.storage_failed(reason)
        self._drain()

    # -- the machine's requests ------------------------------------------------------------------

    def _login(self, r: Login) -> None:
        """Log the user in (refused: the CONNACK says why) and attach the session. A
        password is checked off the reactor: until then the socket is not read, and the
        packets that came after the CONNECT wait in the machine (MQTT lets a client send
        them before the CONNACK; none is acted on before the login is)."""
        acc = r.accepted
        doors = self.factory.doors
        loopback = is_loopback(self.peer.rsplit(":", 1)[0])
        v5 = acc.version == MQTT_5
        not_authorized = NOT_AUTHORIZED if v5 else REFUSED_NOT_AUTHORIZED
        identity = peer_identity(self.transport, self.factory.cert_login)
        if identity is not None:  # Mosquitto's use_identity_as_username: the certificate is the login
            self._how = "client certificate"
            try:
                doors.authenticate_certificate(identity, loopback=loopback)
            except Refused as exc:
                self._login_failed(acc, identity, Failure(exc), f"no user {identity!r} for the client certificate")
            else:
                self._admit(acc, identity)
        elif acc.username is None:
            self._how = "anonymous"
            name = self.factory.anonymous_user
            if (self.listener_rules.anonymous or self.factory.anonymous) == "off" or not loopback:
                self._refuse(acc, not_authorized, "anonymous clients are not allowed here (mqtt_anonymous or the "
                                                  "listener's anonymous=: from loopback only, if at all)")
                return
            try:
                doors.authenticate_anonymous(name, loopback=loopback)
            except Refused as e:
                self._refuse(acc, not_authorized, str(e))
            else:
                self._admit(acc, name)
        else:
            name, self._how = acc.username, ""
            password = (acc.password or b"").decode("utf-8", "replace")
            checked = doors.authenticate(name, password, loopback=loopback)
            bad = f"bad user name or password for {name!r}"
            if not now_or_later(checked, lambda result: self._password_checked(acc, name, result, bad),
                                lambda result: self._later(self._password_checked, acc, name, result, bad)):
                self.transport.pauseProducing()

    def _password_checked(self, acc: Accepted, name: str, result: Failure | None, bad: str) -> None:
        if result is None:
            self._admit(acc, name)
        else:
            self._login_failed(acc, name, result, bad)

    def _login_failed(self, acc: Accepted, name: str, failure: Failure, bad: str) -> None:
        v5 = acc.version == MQTT_5
        if failure.check(LoopbackOnly):
            self._refuse(acc, NOT_AUTHORIZED if v5 else REFUSED_NOT_AUTHORIZED,
                         f"user {name!r} can only connect from loopback")
            return
        if not failure.check(Refused):
            log.error("MQTT %s: login failed: %s", self.peer, failure.getTraceback())
        self._refuse(acc, BAD_USER_NAME_OR_PASSWORD if v5 else REFUSED_BAD_USER_NAME_OR_PASSWORD, bad)

    def _refuse(self, acc: Accepted, code: int, why: str) -> None:
        """The CONNACK refuses the login, after the failed-login slowdown if this host
        has failed too often (access/throttle.py)."""
        identity = peer_identity(self.transport, self.factory.cert_login)
        wait = self.factory.doors.connection_refused(self.record, identity or acc.username or "(anonymous)", why)
        if wait:
            self.transport.pauseProducing()
            self._login_timer = self.factory.reactor.callLater(wait, self._later, self.machine.login_refused,
                                                                code, why)
        else:
            self.machine.login_refused(code, why)

    def _later(self, answer: Callable[..., None], *args: Any) -> None:
        """A login answered after the turn that asked: the machine told, the packets that
        waited handled, the socket read again."""
        self._login_timer = None
        if self.machine.state is State.CLOSED:  # the client went away meanwhile
            return
        answer(*args)
        if not self.machine.gate.blocked:
            self.transport.resumeProducing()
        self._drain()
        if not self.factory.reading:
            self.factory.flush()

    def _admit(self, acc: Accepted, name: str) -> None:
        """A user logged in: may it use the room's vhost? Then the session is attached."""
        vhost = self.room.vhost_name
        try:
            self.factory.doors.authorize(name, "access", Resource(vhost))
        except Refused:
            self._refuse(acc, NOT_AUTHORIZED if acc.version == MQTT_5 else REFUSED_NOT_AUTHORIZED,
                         f"user {name!r} has no permissions in vhost {vhost!r}")
            return
        try:
            session, present = self.room.attach(self, acc, name)
        except (Unavailable, StorageError) as e:
            self.machine.login_refused(SERVER_UNAVAILABLE if acc.version == MQTT_5 else REFUSED_SERVER_UNAVAILABLE,
                                       str(e))
            return
        self.room.released_gone(session)  # PUBRECed, but the record did not say so yet
        if self.record is not None:
            self.record.client_id = session.client_id
        self.factory.doors.connection_logged_in(self.record, name, self.room.vhost_name, self._how)
        self.machine.attached(session, present, name,
                              ConnectionAccess(self.factory.doors, self.room.vhost_name, name, session.client_id))

    def _add_subscriptions(self, r: AddSubscriptions) -> None:
        try:
            existed = [self.room.subscribe(r.session, sub, r.subscription_id, r.filtered) for sub in r.subscriptions]
        except Unavailable as e:
            self.machine.fail(MqttError(SERVER_UNAVAILABLE, str(e)))
            return
        except StorageError as err:  # not ``e``: mypyc types a name by its first except clause
            self.machine.fail(MqttError(UNSPECIFIED_ERROR, f"the subscription could not be stored: {err}"))
            return
        self.machine.subscribed(existed)

    def _remove_subscriptions(self, r: RemoveSubscriptions) -> None:
        try:
            existed = [self.room.unsubscribe(r.session, f) for f in r.topic_filters]
        except Unavailable as e:
            self.machine.fail(MqttError(SERVER_UNAVAILABLE, str(e)))
            return
        except StorageError as err:
            self.machine.fail(MqttError(UNSPECIFIED_ERROR, f"the unsubscription could not be stored: {err}"))
            return
        self.machine.unsubscribed(existed)

    def _match_retained(self, r: MatchRetained) -> None:
        self.machine.retained_found([self.room.retained.match(f) for f in r.topic_filters])

    def _publish_batch(self, r: PublishBatch) -> None:
        """The PUBLISHes of this read taken so far: published at the end of the turn with
        every other connection's of the turn (``turn.TurnPublishes``). The machine's
        requests after them wait until then (``published``)."""
        if self.record is not None:
            self.record.received += len(r.items)
        self._held = True
        self.factory.turn.add(self, r.items)

    def published(self, batch: list[Inflight], unrouted: list[int], done: int, error: str | None) -> None:
        """The turn's publishes were appended (``TurnPublishes.publish``): which of
        this batch reached no queue, and from ``done`` on, refused with ``error``."""
        self._held = False
        self.machine.routed(batch, unrouted, done, error)
        self._drain()

    def publish_failed(self, batch: list[Inflight], error: str) -> None:
        self._held = False
        self.machine.batch_refused(batch, error)
        self._drain()

    def durable(self, batch: list[Inflight], first: int, last: int, result: Any) -> None:
        """Items ``first`` to ``last`` of a batch are durable (or failed: ``result`` is the
        exception)."""
        failed = isinstance(result, BaseException)
        if not failed and self.record is not None:  # QoS 1 and 2 publishes are answered now
            self.record.confirmed += sum(1 for i in range(first, last + 1) if batch[i].qos)
        self.machine.durable(batch, first, last, result if failed else None)
        self._drain()

    def _retain(self, r: Retain) -> None:
        try:
            self.room.retain(r.message, r.qos)
        except StorageError as e:  # its PUBACK (or PUBREC) must not go
            self.machine.storage_failed(f"the retained message could not be stored: {e}")

    def _settle(self, d: Delivery) -> None:
        self.room.settle(d)

    def _settle_durably(self, r: Settle) -> None:
        self.room.settle(r.delivery)
        # written before the output goes (flush_output), once for the read's
        self._commit_due = True
        if not self._queued:
            self._queued = True
            self.factory.output_due(self)

    def _save_session(self, r: SaveSession) -> None:
        """Stored once for every change before the output is written (``flush_output``,
        at the end of the read or early in the next turn): in the state store before any
        byte it speaks for (a PUBLISH or PUBREL of QoS 2, a PUBREC), yet written once per
        flush, not once per message: a session draining its queue costs O(1) a message."""
        self._save_due = r.session
        if not self._queued:
            self._queued = True
            self.factory.output_due(self)

    def _consume(self, r: Consume) -> None:
        try:
            self.room.consume(r.session)
        except Unavailable as e:
            self.machine.fail(MqttError(SERVER_UNAVAILABLE, str(e)))

    def _dispatch(self, r: Dispatch) -> None:
        self.room.dispatch(r.session)

    def _quick_ack(self, r: QuickAck) -> None:
        if self._ack_now is not None:
            self._ack_now()

    def _arm_keep_alive(self, r: ArmKeepAlive) -> None:
        self._cancel_timer()
        if r.seconds:
            self._timer = self.factory.reactor.callLater(r.seconds, self._keep_alive_check)

    def _detach(self, r: Detach) -> None:
        self.room.detach(r.session, self, r.will, r.will_delay)

    def _set_reading(self, r: SetReading) -> None:
        if r.on:
            self.last_read = self.factory.reactor.seconds()  # the keep alive counts from now
            self.factory.unread.discard(self.transport)
            self.transport.resumeProducing()
        else:
            self.transport.pauseProducing()
            self.factory.unread.add(self.transport)  # a client closing meanwhile is noticed (unread.py)
            self.factory.publisher_blocked(self)

    def resource_alarm(self, alarms: frozenset[str]) -> None:
        """The broker's alarms changed (``MqttFactory``)."""
        self.machine.resource_alarm(alarms)
        self._drain()

    def _close(self, r: Close) -> None:
        self._cancel_timer()
        self.flush_output()
        self.transport.loseConnection()

    # -- what the room and the factory call ------------------------------------------------------

    def has_credit(self) -> bool:
        return self.machine.has_credit()

    def deliver(self, d: Delivery, settled: bool = False) -> None:
        """A message from one of the session's queues (``room.SessionConsumer``)."""
        r = self.machine.deliver(d, settled)
        if self.record is not None:
            self.record.sent += 1
        if r is not None:
            _CARRY[type(r)](self, r)
        if not self._queued and self.machine.out:
            self._queued = True
            self.factory.output_due(self)

    def take_over(self) -> None:
        """Another connection opened this session (MQTT 5: DISCONNECT 0x8E)."""
        self.machine.take_over()
        self._drain()

    def kick(self) -> None:
        """Closed by an administrator (``logbus mqtt kick``)."""
        self.machine.kick()
        self._drain()

    def shutdown(self) -> None:
        """The broker stops: no will."""
        self.machine.shutdown()
        self._drain()

    # -- timers --------------------------------------------------------------------------------

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _connect_timeout(self) -> None:
        self._timer = None
        if self.machine.state is State.AWAITING_CONNECT:
            self.factory.connect_timeouts.inc()
            log.info("MQTT %s sent no CONNECT within %.1f s (handshake_timeout_ms): closed", self.peer,
                     self.factory.connect_timeout)
            self.machine.close("no CONNECT")
            self._drain()

    def _keep_alive_check(self) -> None:
        self._timer = None
        m = self.machine
        if m.state is not State.CONNECTED:
            return
        if m.blocked:  # our silence, not the client's: look again a keep alive later
            self._timer = self.factory.reactor.callLater(m.keep_alive, self._keep_alive_check)
            return
        idle = self.factory.reactor.seconds() - self.last_read
        if idle >= m.keep_alive:
            log.info("MQTT %s (%s): nothing for %.1f s (keep alive): closed", self.peer,
                     m.session.client_id if m.session else "-", idle)
            m.keep_alive_expired()
            self._drain()
            return
        self._timer = self.factory.reactor.callLater(m.keep_alive - idle, self._keep_alive_check)


_CARRY: dict[type, Callable[[MqttProtocol, Any], None]] = {
    Login: MqttProtocol._login,
    AddSubscriptions: MqttProtocol._add_subscriptions,
    RemoveSubscriptions: MqttProtocol._remove_subscriptions,
    MatchRetained: MqttProtocol._match_retained,
    PublishBatch: MqttProtocol._publish_batch,
    Retain: MqttProtocol._retain,
    Settle: MqttProtocol._settle_durably,
    Delivery: MqttProtocol._settle,
    SaveSession: MqttProtocol._save_session,
    Consume: MqttProtocol._consume,
    Dispatch: MqttProtocol._dispatch,
    QuickAck: MqttProtocol._quick_ack,
    ArmKeepAlive: MqttProtocol._arm_keep_alive,
    SetReading: MqttProtocol._set_reading,
    Detach: MqttProtocol._detach,
    Close: MqttProtocol._close,
}


class MqttFactory(Factory):
    def __init__(self, doors: Doors, vhosts: VHosts, sessions: Sessions, metrics: Metrics, reactor: Any, *,
                 properties: Properties_ = record_properties, max_packet_size: int = 1 << 20,
                 anonymous: str = "loopback", limits: ServerLimits | None = None, max_queued: int = 0,
                 connect_timeout: float = CONNECT_TIMEOUT, cert_login: str = "off",
                 anonymous_user: str | None = None) -> None:
        self.doors = doors  # connections, logins, the access check, the alarms
        # what a subscription's selector sees of a message (the broker's forms)
        self.properties = properties
        # who a CONNECT without a user name acts as (None: the broker's, anonymous_user)
        self.anonymous_user = anonymous_user if anonymous_user is not None else doors.anonymous_user
        self.cert_login = cert_login  # tls_cert_login: a verified client certificate's identity is the user
        self.connect_timeout = connect_timeout  # seconds from accept to CONNECT
        self.connect_timeouts = metrics.counter(
            "logbus_mqtt_connect_timeouts", "MQTT connections closed for sending no CONNECT within handshake_timeout_ms")
        self.reactor = reactor
        self._tick = tick_of(reactor)
        self.limits = limits or ServerLimits(maximum_packet_size=max_packet_size, topic_alias_maximum=64)
        counter, tally = metrics.counter, metrics.tally
        self._limit_counters = {  # INFLIGHT_FULL may be met at every delivery round: plain ints
            EXPIRY_CAPPED: tally("logbus_mqtt_session_expiry_capped",
                                 "MQTT session expiry intervals lowered to mqtt_max_session_expiry"),
            INFLIGHT_FULL: tally("logbus_mqtt_inflight_full",
                                 "Times an MQTT client's window of QoS 1/2 messages in flight filled up "
                                 "(mqtt_max_inflight_messages, or a lower Receive Maximum of the client)"),
            RECEIVE_MAXIMUM_HIT: tally("logbus_mqtt_receive_maximum_exceeded",
                                       "MQTT 5 clients disconnected for more QoS 1/2 publishes unanswered "
                                       "than mqtt_receive_maximum (0x93)"),
        }
        dropped = counter("logbus_mqtt_queue_dropped",
                          "Messages dropped for an MQTT session at its queue limit (mqtt_max_queued_messages)")
        self.room = MqttRoom(vhosts, sessions, reactor, max_queued=max_queued, max_session_expiry=self.limits.max_session_expiry,
                             dropped=dropped.inc)
        self.room.factory = self
        self.blocked_publishers = counter(
            "logbus_mqtt_blocked_publishers",
            "MQTT connections not read while a resource alarm was set (each time one is stopped)")
        self._blocked_logged = False  # for the alarm now set
        self.alarms: frozenset[str] = doors.on_alarms(self._alarms_changed)
        self.max_packet_size = max_packet_size
        self.anonymous = anonymous  # "off", or "loopback": anonymous clients from loopback addresses only
        self.connections: set[MqttProtocol] = set()
        self.unread = UnreadWatch(reactor)  # publishers not read for an alarm: gone meanwhile?
        self.reading = 0  # connections inside dataReceived
        self._output: list[MqttProtocol] = []  # connections with output not yet sent
        self._flush_call: bool | None = None  # a flush asked of the tick (True), not yet run
        self.turn = TurnPublishes(self.room, self._tick)  # this turn's publishes, by connection

    def limit_hit(self, what: str) -> None:
        """A connection met one of the server's limits (machine.LIMITS): counted."""
        self._limit_counters[what].inc()

    def _alarms_changed(self, alarms: frozenset[str]) -> None:
        was, self.alarms = self.alarms, alarms
        if alarms - was:
            self._blocked_logged = False
        elif not alarms and self._blocked_logged:
            log.info("resource alarms cleared: MQTT publishers are read again")
        for c in list(self.connections):
            c.resource_alarm(alarms)

    def publisher_blocked(self, c: MqttProtocol) -> None:
        """A connection is not read for an alarm: counted; the first of each alarm logged."""
        self.blocked_publishers.inc()
        if not self._blocked_logged:
            self._blocked_logged = True
            log.warning("%s alarm: MQTT connections that publish are not read until it clears (first: %s)",
                        " & ".join(sorted(self.alarms)), c.peer)

    def output_due(self, c: MqttProtocol) -> None:
        self._output.append(c)
        if not self.reading and self._flush_call is None:  # at the end of this turn (core/tick.py),
            # after the turn's dispatches, or as soon as possible outside a turn
            self._flush_call = True
            self._tick.later(self.flush)

    def flush(self) -> None:
        """Send every connection's pending output."""
        self._flush_call = None  # a tick's call that comes after an explicit flush finds nothing
        while self._output:
            conns, self._output = self._output, []
            for c in conns:
                c.flush_output()

    def startFactory(self) -> None:
        self.room.start()

    def stopFactory(self) -> None:
        self.turn.publish()  # what the last turn read, before the sessions go
        for c in list(self.connections):
            c.shutdown()
        self.room.stop()

    def buildProtocol(self, addr: Any) -> MqttProtocol:
        return MqttProtocol(self)

