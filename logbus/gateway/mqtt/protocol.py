"""One MQTT connection: the session state machine as a table, in a thin Twisted shell.

Theory of operation (docs/mqtt.md). Bytes go through the sans-I/O ``Decoder``; each
packet is looked up in ``TRANSITIONS`` by (connection state, packet type) to the method
that carries it out, and anything the table does not name is a protocol error (a
second CONNECT, a packet before CONNECT, a server-to-client packet from a client):
MQTT 5 clients get a DISCONNECT with the reason code, 3.1.1 clients are closed. A
decoder error is the same, after the packets decoded before it are handled.

The client's PUBLISHes are carried out by the ``publishing.Publishing`` mixin, messages
to the client and their acknowledgements by ``delivery.Delivering``. The parts each
packet touches are pure and tested alone: ``connect.accept_connect``
settles a CONNECT, ``inbound.Inbound`` the client's publishes (aliases, receive maximum,
QoS 2 duplicates), ``outbound.Outbound`` what we send (packet ids, the client's receive
maximum and packet size, aliases, acknowledgements), ``subscriptions.Subscriptions``
which subscriptions take a message; ``room.MqttRoom`` holds the sessions and talks to
the broker.

Acknowledgements of publishes from the client (PUBACK, PUBREC) are sent once the message
is durable in the log (the topic's flush policy), in the order the PUBLISHes came
(MQTT section 4.6), whatever order their partitions' writes end in.

Messages to the client come from the queue service through ``SessionConsumer``: the
connection has credit while it is connected, its socket buffer is not full (the
transport's push-producer callbacks) and the client's receive maximum leaves room.

Keep alive: a connection that sends nothing for 1.5 times its keep alive is closed and
its will published. A connection that sends no CONNECT within ``CONNECT_TIMEOUT`` is
closed.
"""

from __future__ import annotations

import ipaddress
import logging
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure

from ...core.access.auth import Perm
from ...core.access.topic_permissions import TopicPerm
from ...core.errors import LogbusError
from ..output import direct_writer, quick_ack
from .connect import Accepted, Refused, ServerLimits, accept_connect, keep_alive_deadline
from .decoder import Decoder
from .delivery import Delivering, retained_passes, retained_publish
from .encoder import encode
from .inbound import Inbound
from .mapping import EXCHANGE, EnvelopeCache
from .outbound import RELEASED
from .packets import (
    Auth, ConnAck, Connect, Disconnect, PingReq, PingResp, PubAck, PubComp, Publish, PubRec, PubRel,
    SubAck, Subscribe, UnsubAck, Unsubscribe, Will,
)  # fmt: skip
from .properties import NO_PROPERTIES, Properties
from .publishing import Pending, Publishing
from .reasons import (
    BAD_AUTHENTICATION_METHOD, BAD_USER_NAME_OR_PASSWORD, DISCONNECT_WITH_WILL_MESSAGE, IMPLEMENTATION_SPECIFIC_ERROR,
    NOT_AUTHORIZED,
    NO_SUBSCRIPTION_EXISTED, PROTOCOL_ERROR,
    REFUSED_BAD_USER_NAME_OR_PASSWORD, REFUSED_NOT_AUTHORIZED, REFUSED_SERVER_UNAVAILABLE,
    SERVER_SHUTTING_DOWN, SERVER_UNAVAILABLE, SESSION_TAKEN_OVER, ADMINISTRATIVE_ACTION, KEEP_ALIVE_TIMEOUT,
    MqttError, UnsupportedProtocolVersion,
)  # fmt: skip
from .room import MqttRoom, Unavailable, binding_key
from .session import Session
from .subscriptions import inner_filter, retained_on_subscribe, subscription_filter
from .states import State
from .wire import MQTT_5

if TYPE_CHECKING:
    from ...core.broker import Broker

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0  # seconds for a new connection to send its CONNECT


# (state, packet type) -> the method that carries the packet out; anything else is a
# protocol error (MQTT 3.1.1 section 3.1.0: a second CONNECT; section 4.8: a packet
# only a server sends).
TRANSITIONS: dict[tuple[State, type], str] = {
    (State.AWAITING_CONNECT, Connect): "_connect",
    (State.CONNECTED, Publish): "_publish",
    (State.CONNECTED, PubAck): "_puback",
    (State.CONNECTED, PubRec): "_pubrec",
    (State.CONNECTED, PubRel): "_pubrel",
    (State.CONNECTED, PubComp): "_pubcomp",
    (State.CONNECTED, Subscribe): "_subscribe",
    (State.CONNECTED, Unsubscribe): "_unsubscribe",
    (State.CONNECTED, PingReq): "_pingreq",
    (State.CONNECTED, Disconnect): "_disconnect",
}


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class MqttProtocol(Publishing, Delivering, Protocol):
    transport: Any  # a TCP (or TLS, or WebSocket) transport; zope interfaces do not type-check

    def __init__(self, factory: MqttFactory) -> None:
        self.factory = factory
        self.room = factory.room
        self.limits = factory.limits
        self.decoder = Decoder(max_packet_size=factory.max_packet_size)
        self.state = State.AWAITING_CONNECT
        self.version = 4
        self.session: Session | None = None
        self.inbound = Inbound()
        self.will: Will | None = None
        self.will_delay = 0
        self.user = ""
        self.peer = ""
        self.paused = False  # the socket's buffer is full
        self.keep_alive = 0.0  # seconds without a packet before we close (0: never)
        self.last_read = 0.0
        self._timer: Any = None  # CONNECT timeout, then keep alive
        self._acks: deque[Pending] = deque()  # QoS 1/2 PUBLISHes not answered yet, in order
        self._batch: list[Pending] = []  # PUBLISHes of this read, published together
        self._envelopes: EnvelopeCache = {}  # shared by this connection's PUBLISHes without properties
        self._dispatch_due = False  # acknowledgements made room: hand out more at the end of the read
        self._pending: deque[Publish] = deque()  # retained messages waiting for room in flight
        self._may_write = True  # write access to amq.topic
        self._may_read = True
        self._out: list[bytes] = []  # written at the end of the read (or of the turn)
        self._queued = False  # in the factory's list of connections with output
        self._send: Any = None  # direct_writer(transport)
        self._ack_now: Callable[[], None] | None = None  # output.quick_ack(transport)

    # -- connection --------------------------------------------------------------------------

    def connectionMade(self) -> None:
        peer = self.transport.getPeer()
        self.peer = f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"
        if hasattr(self.transport, "setTcpNoDelay"):
            self.transport.setTcpNoDelay(True)
        self._send = direct_writer(self.transport)
        self._ack_now = quick_ack(self.transport)
        self.transport.registerProducer(self, True)
        self.last_read = self.factory.reactor.seconds()
        self._timer = self.factory.reactor.callLater(CONNECT_TIMEOUT, self._connect_timeout)
        self.factory.connections.add(self)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.factory.connections.discard(self)
        self._cancel_timer()
        if self.state is State.CONNECTED and self.session is not None:
            self.state = State.CLOSED
            self.room.detach(self.session, self, self.will, self.will_delay)
        self.state = State.CLOSED

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        self._flush_pending()
        if self.session is not None and self.state is State.CONNECTED:
            self.room.dispatch(self.session)

    def stopProducing(self) -> None:
        self.paused = True

    def dataReceived(self, data: bytes) -> None:
        factory = self.factory
        factory.reading += 1
        try:
            self._received(data)
        finally:
            factory.reading -= 1
            if not factory.reading:
                factory.flush()

    def _received(self, data: bytes) -> None:
        if self.state is State.CLOSED:
            return
        self.last_read = self.factory.reactor.seconds()
        waiting = len(self._acks)
        error: MqttError | None = None
        try:
            packets = self.decoder.feed(data)
        except MqttError as e:
            packets, error = e.packets, e
        for p in packets:
            if self._batch and type(p) is not Publish:
                self._publish_batch()  # what came before goes first
            handler = TRANSITIONS.get((self.state, type(p)))
            if handler is None:
                if self.state is State.CLOSED:
                    return
                error = self._unexpected(p)
                break
            try:
                getattr(self, handler)(p)
            except MqttError as e:
                error = e
                break
            except Unavailable as e:
                error = MqttError(SERVER_UNAVAILABLE, str(e))
                break
            if self.state is State.CLOSED:
                return
        if self._batch:
            self._publish_batch()
        if self._dispatch_due:
            self._dispatch_due = False
            if self.state is State.CONNECTED and self.session is not None:
                self._flush_pending()
                self.room.dispatch(self.session)
        if self._acks and not waiting and self._ack_now is not None:
            # This read's answers wait for the disk: the client's TCP ACK must not wait
            # with them, or a client with Nagle on (paho, libmosquitto) holds its next
            # PUBLISH until then (decision 0017). A client that keeps publishes in flight
            # gets its ACKs with the answers that keep coming, and its small packets
            # coalesce meanwhile.
            self._ack_now()
        if error is not None:
            self._protocol_error(error)

    def _unexpected(self, p: Any) -> MqttError:
        if self.state is State.AWAITING_CONNECT:
            return MqttError(PROTOCOL_ERROR, f"{type(p).__name__.upper()} before CONNECT")
        if isinstance(p, Connect):
            return MqttError(PROTOCOL_ERROR, "a second CONNECT")
        if isinstance(p, Auth):
            return MqttError(PROTOCOL_ERROR, "AUTH without an authentication method in CONNECT")
        return MqttError(PROTOCOL_ERROR, f"{type(p).__name__.upper()} is sent by servers, not clients")

    def _protocol_error(self, e: MqttError) -> None:
        log.info("MQTT %s (%s): %s", self.peer, self.session.client_id if self.session else "-", e)
        if self.state is State.AWAITING_CONNECT:
            version = self.decoder.version
            if isinstance(e, UnsupportedProtocolVersion):
                code = e.reason_code if e.level == MQTT_5 else 1
                self._write(ConnAck(False, code), MQTT_5 if e.level == MQTT_5 else 4)
            elif version == MQTT_5:
                self._write(ConnAck(False, e.reason_code, _reason(e.text)), MQTT_5)
        else:
            self._disconnect_with(e.reason_code, e.text)
        self._close()

    def _disconnect_with(self, code: int, text: str | None = None) -> None:
        """A server DISCONNECT (5.0 only; a 3.1.1 connection is just closed)."""
        if self.version == MQTT_5 and self.state is State.CONNECTED:
            self._write(Disconnect(code, _reason(text)))

    def _close(self) -> None:
        """Close the socket; the session is detached (will included) as the connection ends."""
        if self.state is State.CONNECTED and self.session is not None:
            self.state = State.CLOSED
            self.room.detach(self.session, self, self.will, self.will_delay)
        self.state = State.CLOSED
        self._cancel_timer()
        self.flush_output()
        self.transport.loseConnection()

    def take_over(self) -> None:
        """Another connection opened this session (MQTT 5: DISCONNECT 0x8E)."""
        self._disconnect_with(SESSION_TAKEN_OVER)
        self._close()

    def kick(self) -> None:
        """Closed by an administrator (``logbus mqtt kick``)."""
        self._disconnect_with(ADMINISTRATIVE_ACTION)
        self._close()

    def shutdown(self) -> None:
        """The broker stops: no will (the client did not go away; Mosquitto does the same)."""
        self.will = None
        self._disconnect_with(SERVER_SHUTTING_DOWN)
        self._close()

    def _write(self, packet: Any, version: int | None = None) -> None:
        self._emit(encode(packet, self.version if version is None else version))

    def _emit(self, data: bytes) -> None:
        """Output, sent when the read being handled ends (with every other connection's
        output of that read: a delivery does not wait for the end of the turn, whose log
        drain may fdatasync first), or at the start of the next turn if no read is."""
        self._out.append(data)
        if not self._queued:
            self._queued = True
            self.factory.output_due(self)

    def flush_output(self) -> None:
        self._queued = False
        out = self._out
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            self._send(data)

    # -- timers --------------------------------------------------------------------------------

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _connect_timeout(self) -> None:
        self._timer = None
        if self.state is State.AWAITING_CONNECT:
            log.info("MQTT %s sent no CONNECT within %.0f s: closed", self.peer, CONNECT_TIMEOUT)
            self._close()

    def _keep_alive_check(self) -> None:
        self._timer = None
        if self.state is not State.CONNECTED:
            return
        idle = self.factory.reactor.seconds() - self.last_read
        if idle >= self.keep_alive:
            log.info("MQTT %s (%s): nothing for %.1f s (keep alive): closed", self.peer,
                     self.session.client_id if self.session else "-", idle)
            self._disconnect_with(KEEP_ALIVE_TIMEOUT)
            self._close()
            return
        self._timer = self.factory.reactor.callLater(self.keep_alive - idle, self._keep_alive_check)

    # -- CONNECT --------------------------------------------------------------------------------

    def _connect(self, c: Connect) -> None:
        self.version = c.protocol_level
        self._cancel_timer()
        decided = accept_connect(c, self.limits, self.room.new_client_id)
        if isinstance(decided, Refused):
            self._refuse(decided.connack.reason_code, decided.reason)
            return
        if c.properties.authentication_method is not None:
            self._refuse(BAD_AUTHENTICATION_METHOD, "enhanced authentication is not supported")
            return
        user = self._login(decided)
        if user is None:
            return
        try:
            session, present = self.room.attach(self, decided, user)
        except Unavailable as e:
            self._refuse(SERVER_UNAVAILABLE if self.version == MQTT_5 else REFUSED_SERVER_UNAVAILABLE, str(e))
            return
        self.session = session
        self.user = user
        self.will = decided.will
        self.will_delay = decided.will.properties.will_delay_interval or 0 if decided.will else 0
        self.inbound = Inbound(self.limits.receive_maximum, self.limits.topic_alias_maximum)
        self.inbound.awaiting_rel = session.awaiting_rel
        self.state = State.CONNECTED
        self._write(decided.connack(present, self.limits))
        self.keep_alive = keep_alive_deadline(decided.keep_alive)
        if self.keep_alive:
            self._timer = self.factory.reactor.callLater(self.keep_alive, self._keep_alive_check)
        self.room.released_gone(session)  # PUBRECed, but the record did not say so yet
        for f in session.outbound.resend():  # PUBREL for QoS 2 messages PUBRECed before
            if f.state == RELEASED:
                self._write(PubRel(f.packet_id))
        self.room.consume(session)

    def _refuse(self, code: int, why: str) -> None:
        log.info("MQTT %s: CONNECT refused (0x%02X): %s", self.peer, code, why)
        self._emit(encode(ConnAck(False, code, _reason(why) if self.version == MQTT_5 else NO_PROPERTIES),
                          self.version))
        self._close()

    def _login(self, acc: Accepted) -> str | None:
        """The user the connection acts as; None: refused (CONNACK sent)."""
        access = self.room.broker.access
        loopback = _loopback(self.peer.rsplit(":", 1)[0])
        bad_login = BAD_USER_NAME_OR_PASSWORD if self.version == MQTT_5 else REFUSED_BAD_USER_NAME_OR_PASSWORD
        not_authorized = NOT_AUTHORIZED if self.version == MQTT_5 else REFUSED_NOT_AUTHORIZED
        if acc.username is None:
            anon = self.factory.anonymous
            if anon == "off" or (anon == "loopback" and not loopback):
                self._refuse(not_authorized, "anonymous clients are not allowed here (--mqtt-anonymous)")
                return None
            name = self.room.broker.default_user
        else:
            user = access.authenticate(acc.username, (acc.password or b"").decode("utf-8", "replace"))
            if user is None:
                self._refuse(bad_login, f"bad user name or password for {acc.username!r}")
                return None
            name = user.name
            if access.loopback_only(name) and not loopback:
                self._refuse(not_authorized, f"user {name!r} can only connect from loopback")
                return None
        vhost = self.room.vhost_name
        if access.permission(name, vhost) is None:
            self._refuse(not_authorized, f"user {name!r} has no permissions in vhost {vhost!r}")
            return None
        self._may_write = self._allowed(name, "write")
        self._may_read = self._allowed(name, "read")
        return name

    def _allowed(self, user: str, perm: Perm) -> bool:
        try:
            self.room.broker.access.check(user, self.room.vhost_name, perm, "exchange", EXCHANGE)
        except LogbusError:
            return False
        return True

    def _topic_allowed(self, perm: TopicPerm, key: str) -> bool:
        """The user's topic permission on amq.topic (none: allowed)."""
        session = self.session
        return self.room.broker.access.topic_allowed(self.user, self.room.vhost_name, EXCHANGE, perm, key,
                                                     session.client_id if session is not None else "")

    # -- subscriptions ----------------------------------------------------------------------------

    def _subscribe(self, p: Subscribe) -> None:
        s = self.session
        assert s is not None
        sid = p.properties.subscription_identifiers[0] if p.properties.subscription_identifiers else None
        filtered, refusal = subscription_filter(p.properties)
        refused: str | None = None  # the SUBACK's reason string
        codes: list[int] = []
        retained: list[tuple[str, int]] = []  # (filter, maximum QoS)
        for sub in p.subscriptions:
            if not self._may_read or not self._topic_allowed("read", binding_key(inner_filter(sub.topic_filter))):
                codes.append(NOT_AUTHORIZED if self.version == MQTT_5 else 0x80)
                continue
            if refusal is not None:
                codes.append(IMPLEMENTATION_SPECIFIC_ERROR)
                refused = refusal
                continue
            existed = self.room.subscribe(s, sub, sid, filtered)
            codes.append(sub.qos)
            if retained_on_subscribe(sub, existed):
                retained.append((inner_filter(sub.topic_filter), sub.qos))
        self._write(SubAck(p.packet_id, tuple(codes), _reason(refused)))
        now = self.room.clock()
        for topic_filter, qos in retained:
            for rec in self.room.retained.match(topic_filter):
                if rec.topic.startswith("$") and topic_filter[:1] in ("+", "#"):
                    continue
                if filtered is not None and not retained_passes(rec, filtered):
                    continue
                out = retained_publish(rec, qos, self.version, now, sid)
                if out is not None:
                    self._send_retained(out)
        self.room.dispatch(s)

    def _unsubscribe(self, p: Unsubscribe) -> None:
        s = self.session
        assert s is not None
        codes = tuple(0 if self.room.unsubscribe(s, f) else NO_SUBSCRIPTION_EXISTED for f in p.topic_filters)
        self._write(UnsubAck(p.packet_id, codes if self.version == MQTT_5 else ()))

    # -- the rest -------------------------------------------------------------------------------------

    def _pingreq(self, p: PingReq) -> None:
        self._write(PingResp())

    def _disconnect(self, p: Disconnect) -> None:
        s = self.session
        assert s is not None
        expiry = p.properties.session_expiry_interval
        if expiry is not None:
            if s.expiry == 0 and expiry != 0:
                raise MqttError(PROTOCOL_ERROR, "a session expiry interval in DISCONNECT after 0 in CONNECT")
            s.expiry = expiry
        if p.reason_code != DISCONNECT_WITH_WILL_MESSAGE:
            self.will = None
        self._close()


def _reason(text: str | None) -> Properties:
    """A Reason String (MQTT 5: CONNACK and DISCONNECT may carry one whatever the client's
    Request Problem Information), kept short enough for any client's packet size."""
    return Properties(reason_string=text[:200]) if text else NO_PROPERTIES


class MqttFactory(Factory):
    def __init__(self, broker: Broker, reactor: Any, *, max_packet_size: int = 1 << 20,
                 anonymous: str = "loopback", limits: ServerLimits | None = None) -> None:
        self.broker = broker
        self.reactor = reactor
        self.room = MqttRoom(broker, reactor)
        self.room.factory = self
        self.max_packet_size = max_packet_size
        self.anonymous = anonymous  # "on", "off", or "loopback": only from loopback addresses
        self.limits = limits or ServerLimits(maximum_packet_size=max_packet_size, topic_alias_maximum=64)
        self.connections: set[MqttProtocol] = set()
        self.reading = 0  # connections inside dataReceived
        self._output: list[MqttProtocol] = []  # connections with output not yet sent
        self._flush_call: Any = None

    def output_due(self, c: MqttProtocol) -> None:
        self._output.append(c)
        if not self.reading and self._flush_call is None:
            self._flush_call = self.reactor.callLater(0, self.flush)

    def flush(self) -> None:
        """Send every connection's pending output."""
        if self._flush_call is not None:
            if self._flush_call.active():
                self._flush_call.cancel()
            self._flush_call = None
        while self._output:
            conns, self._output = self._output, []
            for c in conns:
                c.flush_output()

    def startFactory(self) -> None:
        self.room.start()

    def stopFactory(self) -> None:
        for c in list(self.connections):
            c.shutdown()
        self.room.stop()

    def buildProtocol(self, addr: Any) -> MqttProtocol:
        return MqttProtocol(self)

