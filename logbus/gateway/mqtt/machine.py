"""One MQTT connection's session as a sans-I/O state machine: bytes in, typed requests
and bytes out. No socket, no reactor, no broker: the shell (protocol.py) carries out the
requests against the room and writes ``out``.

Theory of operation. ``receive_data(data)`` decodes (decoder.Decoder) and keeps the
packets; ``next_request()`` then handles them in order and hands out, one at a time,
what the shell must do (requests.py), and None when nothing is left until more bytes,
an answer or a timer. A question (``Login``, ``AddSubscriptions``,
``RemoveSubscriptions``, ``MatchRetained``) is answered by a method, maybe in a later
turn (a password is checked off the reactor); until then ``next_request`` hands out
nothing more, and the packets after the question wait. The bytes to send go to ``out``, which the shell writes when the read ends (with
every other connection's output of that read).

Each packet is looked up in ``TRANSITIONS`` by (state, packet type) to its handler and
the next state::

    AWAITING_CONNECT --CONNECT--> CONNECTING --attached--> CONNECTED
      CONNECTING --login_refused--> CLOSED; CONNECTED --DISCONNECT--> CLOSED
    CONNECTED: PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBSCRIBE, UNSUBSCRIBE, PINGREQ

Anything the table lacks is a protocol error (0x82: a second CONNECT, a packet before
CONNECT, a packet only a server sends, AUTH without an authentication method), as is an
``MqttError`` a handler raises (with its reason code) and a decoder error (after the
packets decoded before it): an MQTT 5 client gets a DISCONNECT with the reason code (a
CONNACK before its CONNECT is accepted), a 3.1.1 client is closed. In CLOSED everything
is dropped. The rest of the read is dropped after an error.

The hot path, per read: the PUBLISHes of one read are one ``PublishBatch`` (handed out
before the next packet that is not a PUBLISH, or at the end of the read); their answers
come through ``routed`` and ``durable`` (publishing.py); acknowledgements that make room
for more messages ask for one ``Dispatch`` at the end of the read; a read that starts
answers waiting for the disk asks for a ``QuickAck`` (decision 0017). Messages to the
client come through ``deliver`` (delivery.py), which returns its one request at most.

Resource alarms (``resource_alarm``, alarms.py): a connection that has published is not
read while one is set (``SetReading``); one that only subscribes goes on.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...core.types import Message, RetainedRecord
from ...filters.properties import record_properties
from .connect import DEFAULT_RECEIVE_MAXIMUM, Accepted, Refused, ServerLimits, accept_connect, keep_alive_deadline
from .decoder import Decoder
from .alarms import ReadGate
from .delivery import INFLIGHT_FULL, LimitHit, Outgoing, retained_passes, retained_publish
from .encoder import encode
from .inbound import Inbound
from .mapping import message_from_publish
from .packets import (
    Auth, ConnAck, Connect, Disconnect, Packet, PingReq, PubAck, PubComp, Publish, PubRec, PubRel, SubAck,
    Subscribe, Subscription, UnsubAck, Unsubscribe, Will,
)  # fmt: skip
from .properties import NO_PROPERTIES, Properties
from .publishing import CLOSE, SAVE, Inflight, Publishing
from .reasons import (
    ADMINISTRATIVE_ACTION, BAD_AUTHENTICATION_METHOD, DISCONNECT_WITH_WILL_MESSAGE, IMPLEMENTATION_SPECIFIC_ERROR,
    KEEP_ALIVE_TIMEOUT, NO_SUBSCRIPTION_EXISTED, NOT_AUTHORIZED, PAYLOAD_FORMAT_INVALID, PROTOCOL_ERROR,
    RECEIVE_MAXIMUM_EXCEEDED, SERVER_SHUTTING_DOWN, SESSION_TAKEN_OVER, UNSPECIFIED_ERROR, LocalProtocolError,
    MqttError, UnsupportedProtocolVersion,
)  # fmt: skip
from .requests import (
    QUICK_ACK, Access, AddSubscriptions, ArmKeepAlive, Close, Consume, Detach, Dispatch, Login, MatchRetained,
    PublishBatch, RemoveSubscriptions, Request, Retain, SaveSession, Settle,
)  # fmt: skip
from .session import Session
from .states import State
from .subscriptions import Filtered, inner_filter, retained_on_subscribe, subscription_filter
from .wire import MQTT_5

log = logging.getLogger(__name__)

_PINGRESP = b"\xd0\x00"

# the server's limits a connection met, as the machine tells its shell (``limit_hit``)
EXPIRY_CAPPED = "expiry_capped"  # a session expiry asked for above mqtt_max_session_expiry
RECEIVE_MAXIMUM_HIT = "receive_maximum_exceeded"  # a 5.0 client past our Receive Maximum (0x93)
LIMITS = (EXPIRY_CAPPED, INFLIGHT_FULL, RECEIVE_MAXIMUM_HIT)



Properties_ = Callable[[Message, str], Mapping[str, Any]]  # a message in a log topic -> its properties

class UnexpectedPacket(MqttError):
    """A packet ``TRANSITIONS`` lacks for the connection's state (0x82 Protocol Error)."""

    def __init__(self, text: str) -> None:
        super().__init__(PROTOCOL_ERROR, text)


class _AllowNothing:
    def may_publish(self, routing_key: str) -> bool:
        return False

    def may_subscribe(self, topic_filter: str) -> bool:
        return False


# Reads this close together (ms) are a client streaming publishes: one whose next PUBLISH
# may come before this read's answers, which wait for the disk (QuickAck, decision 0032)
STREAMING_GAP_MS = 20


class Machine:
    """The session state machine of one connection; see the module's docstring."""

    def __init__(self, *, limits: ServerLimits = ServerLimits(), max_packet_size: int = 1 << 20,
                 clock: Callable[[], int], new_client_id: Callable[[], str], peer: str = "",
                 properties: Properties_ = record_properties, limit_hit: LimitHit | None = None) -> None:
        self.limits = limits
        self.limit_hit: LimitHit = limit_hit or _ignore  # told each time a server limit is met (LIMITS)
        self.decoder = Decoder(max_packet_size=max_packet_size)
        self.clock = clock  # epoch ms
        self.new_client_id = new_client_id
        self.properties = properties  # what a subscription's selector sees of a message (the broker's forms)
        self.peer = peer  # for log lines
        self.state = State.AWAITING_CONNECT
        self.version = 4
        self.session: Session | None = None
        self.user = ""
        self.will: Will | None = None
        self.will_delay = 0
        self.keep_alive = 0.0  # seconds without a packet before we close (0: never)
        self.paused = False  # the socket's buffer is full
        self.access: Access = _AllowNothing()
        self.out: list[bytes] = []  # to send, in order; the shell writes and clears it
        self.publishing = Publishing(Inbound(), 4, self.out)  # replaced once attached
        self.outgoing: Outgoing | None = None  # once attached
        self._pending: deque[Any] = deque()  # requests not yet handed out
        self._asked: Any = None  # the question not yet answered
        self._asking: Any = None  # what the question is for (the packet, its codes)
        self._packets: list[Packet] = []  # decoded, not yet handled
        self._next = 0  # index of the next packet to handle
        self._reading = False  # the end of the read is still to be handled
        self._error: MqttError | None = None  # the read's error, once its packets are handled
        self.error: MqttError | None = None  # the protocol error the connection was closed for
        self._waiting = 0  # answers waiting for the disk when the read began
        self._dispatch_due = False  # acknowledgements made room: hand out more at the end of the read
        self._dispatch: Dispatch | None = None
        self._save: SaveSession | None = None  # the request storing the session, if it is kept
        self.gate = ReadGate()  # not read under a resource alarm once it has published
        self._last_read_ms = 0  # when the last read came (the clock's ms)
        self._streaming = False  # it came within STREAMING_GAP_MS of the one before

    # -- inputs: bytes and packets -------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Decode ``data``; ``next_request`` handles its packets."""
        if self.state is State.CLOSED:
            return
        try:
            packets = self.decoder.feed(data)
        except MqttError as e:
            packets, self._error = e.packets, e
        self.receive_packets(packets)

    def receive_packets(self, packets: list[Packet]) -> None:
        """Packets of one read (``receive_data`` decodes them; tests may give them)."""
        if self.state is State.CLOSED:
            return
        if self._next < len(self._packets):
            packets = self._packets[self._next:] + packets
        self._packets, self._next = packets, 0
        self._reading = True
        self._waiting = len(self.publishing.answers)
        now = self.clock()
        self._streaming = now - self._last_read_ms <= STREAMING_GAP_MS
        self._last_read_ms = now

    def next_request(self) -> Request | None:
        """The next thing to do, or None until more bytes, an answer or a timer."""
        pending = self._pending
        if pending:
            return pending.popleft()  # type: ignore[no-any-return]
        if self._asked is not None:
            return None  # the answer first: the packets after the question wait for it
        packets = self._packets
        n = len(packets)
        publishing = self.publishing
        while self._next < n:
            if self.state is State.CLOSED:
                break
            p = packets[self._next]
            t = type(p)
            if publishing.batch and t is not Publish:
                return PublishBatch(publishing.take_batch())  # what came before goes first
            self._next += 1
            entry = TRANSITIONS.get((self.state, t))
            if entry is None:
                self._error = self._unexpected(p)
                self._next = n
                break
            handler, next_state = entry
            try:
                handler(self, p)
            except MqttError as e:
                if e.reason_code == RECEIVE_MAXIMUM_EXCEEDED:
                    self.limit_hit(RECEIVE_MAXIMUM_HIT)
                self._error = e
                self._next = n
                break
            if self.state is not State.CLOSED:
                self.state = next_state
            if pending:
                return pending.popleft()  # type: ignore[no-any-return]
        if n:
            self._packets, self._next = [], 0
        if self.state is State.CLOSED:
            self._reading = False
            self.publishing.batch.clear()
            self._error = None
        elif self._reading:
            if publishing.batch:
                return PublishBatch(publishing.take_batch())
            self._reading = False
            self._end_of_read()
        return pending.popleft() if pending else None  # type: ignore[no-any-return]

    def _end_of_read(self) -> None:
        if self._dispatch_due:
            self._dispatch_due = False
            if self.state is State.CONNECTED and self.outgoing is not None:
                self.outgoing.send_waiting()
                self._pending.append(self._dispatch)
        if self.publishing.answers and not self._waiting and self._streaming:
            # This read's answers wait for the disk: the client's TCP ACK must not wait
            # with them, or a client with Nagle on (paho, libmosquitto) holds its next
            # PUBLISH until then (decision 0017). A client that keeps publishes in flight
            # gets its ACKs with the answers that keep coming, and its small packets
            # coalesce meanwhile. A client whose reads come further apart than a sync
            # takes (a device sending now and then) has its ACK ride on the PUBACK before
            # it sends again: no system call for it (decision 0032).
            self._pending.append(QUICK_ACK)
        error, self._error = self._error, None
        if error is not None:
            self._protocol_error(error)
        elif self.gate.active and (stop := self.gate.end_of_read()) is not None:
            self._pending.append(stop)

    def _unexpected(self, p: Any) -> MqttError:
        if self.state is State.AWAITING_CONNECT:
            return UnexpectedPacket(f"{type(p).__name__.upper()} before CONNECT")
        if isinstance(p, Connect):
            return UnexpectedPacket("a second CONNECT")
        if isinstance(p, Auth):
            return UnexpectedPacket("AUTH without an authentication method in CONNECT")
        return UnexpectedPacket(f"{type(p).__name__.upper()} is sent by servers, not clients")

    # -- inputs: the shell's answers and events --------------------------------------------------

    def fail(self, e: MqttError) -> None:
        """Carrying out a request failed (the room's vhost is gone): the rest of the read
        is dropped, and the connection closed with ``e``'s reason code."""
        self._asked = self._asking = None
        self._error = e
        self._next = len(self._packets)
        self._reading = True

    def attached(self, session: Session, present: bool, user: str, access: Access) -> None:
        """``Login``'s answer: the user is in and the session attached to us."""
        acc: Accepted = self._answer(Login).accepted
        self.session, self.user, self.access = session, user, access
        self.will = acc.will
        self.will_delay = acc.will.properties.will_delay_interval or 0 if acc.will else 0
        # 3.1.1 cannot be told a Receive Maximum: its publishes are not held to one
        receive_maximum = self.limits.receive_maximum if self.version == MQTT_5 else DEFAULT_RECEIVE_MAXIMUM
        inbound = Inbound(receive_maximum, self.limits.topic_alias_maximum)
        inbound.awaiting_rel = session.awaiting_rel
        self.publishing = Publishing(inbound, self.version, self.out)
        outgoing = self.outgoing = Outgoing(session, self.version, self.out, self.clock, self.properties,
                                            self.limit_hit)
        outgoing.paused = self.paused
        self._save = outgoing.save
        self._dispatch = Dispatch(session)
        self.state = State.CONNECTED
        self.out.append(encode(acc.connack(present, self.limits), self.version))
        self.keep_alive = keep_alive_deadline(acc.keep_alive)
        self._pending.append(ArmKeepAlive(self.keep_alive))
        outgoing.resend_releases()
        self._pending.append(Consume(session))

    def login_refused(self, code: int, reason: str) -> None:
        """``Login``'s answer: refused with CONNACK ``code``."""
        self._answer(Login)
        self._refuse(code, reason)

    def subscribed(self, existed: Sequence[bool]) -> None:
        """``AddSubscriptions``' answer: for each, whether it was subscribed already."""
        asked: AddSubscriptions = self._answer(AddSubscriptions)
        p, codes, refused = self._asking
        self._asking = None
        self._suback(p, codes, refused, asked.filtered, asked.subscription_id,
                     [(inner_filter(sub.topic_filter), sub.qos) for sub, was in zip(asked.subscriptions, existed)
                      if retained_on_subscribe(sub, was)])

    def unsubscribed(self, existed: Sequence[bool]) -> None:
        """``RemoveSubscriptions``' answer: for each, whether there was such a subscription."""
        self._answer(RemoveSubscriptions)
        p, self._asking = self._asking, None
        codes = tuple(0 if was else NO_SUBSCRIPTION_EXISTED for was in existed)
        self.out.append(encode(UnsubAck(p.packet_id, codes if self.version == MQTT_5 else ()), self.version))

    def retained_found(self, found: Sequence[Sequence[RetainedRecord]]) -> None:
        """``MatchRetained``' answer: the retained messages of each filter asked."""
        self._answer(MatchRetained)
        filters, filtered, sid = self._asking
        self._asking = None
        outgoing = self.outgoing
        assert outgoing is not None and self.session is not None
        now = self.clock()
        for (topic_filter, qos), records in zip(filters, found):
            for rec in records:
                if rec.topic.startswith("$") and topic_filter[:1] in ("+", "#"):
                    continue
                if filtered is not None and not retained_passes(rec, filtered, self.properties):
                    continue
                out = retained_publish(rec, qos, self.version, now, sid)
                if out is not None:
                    outgoing.send_retained(out)
        self._pending.append(self._dispatch)

    def _answer(self, question: type) -> Any:
        asked = self._asked
        if type(asked) is not question:
            raise LocalProtocolError(f"an answer to {question.__name__}, but "
                                     f"{type(asked).__name__ if asked is not None else 'nothing'} was asked")
        self._asked = None
        return asked

    def _ask(self, question: Any, context: Any = None) -> None:
        self._asked = question
        self._asking = context
        self._pending.append(question)

    # -- the publishes' answers (from the log) ---------------------------------------------------

    def routed(self, batch: list[Inflight], unrouted: list[int], done: int, error: str | None) -> None:
        """The batch was appended: which items reached no queue; from ``done`` on, refused
        (``error``)."""
        if error is not None:
            log.info("MQTT %s: publishes refused: %s", self.peer, error)
        self.publishing.routed(batch, unrouted, done, error is not None)
        self._flush_answers()

    def durable(self, batch: list[Inflight], first: int, last: int, error: BaseException | None) -> None:
        """Items ``first`` to ``last`` of the batch are durable (``error``: they failed)."""
        if error is not None:
            log.warning("MQTT %s: %d publishes failed: %s", self.peer, last - first + 1, error)
        for m in self.publishing.durable(batch, first, last, error is not None):
            self._pending.append(Retain(m, m.qos))
        self._flush_answers()

    def batch_refused(self, batch: list[Inflight], error: str) -> None:
        """Publishing the batch raised: each publish is answered 0x80."""
        log.info("MQTT %s: %d publishes refused: %s", self.peer, len(batch), error)
        self.publishing.all_failed(batch)
        self._flush_answers()

    def _flush_answers(self) -> None:
        asks = self.publishing.flush(self.state is State.CONNECTED)
        if asks & SAVE and self._save is not None:
            self._pending.append(self._save)
        if asks & CLOSE:
            self._close("a refused publish from an MQTT 3.1.1 client")

    # -- messages to the client ------------------------------------------------------------------

    def has_credit(self) -> bool:
        outgoing = self.outgoing
        return self.state is State.CONNECTED and outgoing is not None and outgoing.has_credit()

    def deliver(self, d: Any, settled: bool = False) -> Settle | SaveSession | None:
        """A message from one of the session's queues (a ``Delivery``); writes ``out`` and
        returns what the shell must do at once besides."""
        outgoing = self.outgoing
        assert outgoing is not None
        return outgoing.deliver(d, settled)

    def pause(self) -> None:
        """The socket's buffer is full."""
        self.paused = True
        if self.outgoing is not None:
            self.outgoing.paused = True

    def resume(self) -> bool:
        """The socket takes more: whether to hand out more (``Dispatch``)."""
        self.paused = False
        outgoing = self.outgoing
        if outgoing is None:
            return False
        outgoing.paused = False
        if self.state is not State.CONNECTED:
            return False
        outgoing.send_waiting()
        return True

    def resource_alarm(self, alarms: frozenset[str]) -> None:
        """The broker's alarms changed (the set now): a publisher stops being read while
        any is set (``SetReading``), and is read again once all have cleared."""
        change = self.gate.alarms(alarms)
        if change is not None and self.state is not State.CLOSED:
            self._pending.append(change)

    @property
    def blocked(self) -> bool:
        """Not read because of a resource alarm (the keep alive waits meanwhile)."""
        return self.gate.blocked

    # -- endings -----------------------------------------------------------------------------------

    def keep_alive_expired(self) -> None:
        """Nothing came for the keep alive: DISCONNECT 0x8D (5.0), close."""
        self._disconnect_with(KEEP_ALIVE_TIMEOUT)
        self._close("keep alive")

    def take_over(self) -> None:
        """Another connection opened this session (MQTT 5: DISCONNECT 0x8E)."""
        self._disconnect_with(SESSION_TAKEN_OVER)
        self._close("session taken over")

    def kick(self) -> None:
        """Closed by an administrator."""
        self._disconnect_with(ADMINISTRATIVE_ACTION)
        self._close("closed by an administrator")

    def shutdown(self) -> None:
        """The broker stops: no will (the client did not go away; Mosquitto does the same)."""
        self.will = None
        self._disconnect_with(SERVER_SHUTTING_DOWN)
        self._close("the broker stops")

    def close(self, reason: str) -> None:
        """Close without a word (the CONNECT timeout)."""
        self._close(reason)

    def storage_failed(self, reason: str) -> None:
        """What ``out`` says could not be stored (the session's record, a settlement, a
        retained message): none of it goes; DISCONNECT 0x80 (5.0), closed."""
        log.warning("MQTT %s (%s): closed, %s", self.peer, self.session.client_id if self.session else "-", reason)
        self.out.clear()
        self._disconnect_with(UNSPECIFIED_ERROR, reason)
        self._close(reason)

    def connection_lost(self) -> None:
        """The socket is gone: the session is detached, its will published."""
        if self.state is State.CONNECTED and self.session is not None:
            self._pending.append(Detach(self.session, self.will, self.will_delay))
        self.state = State.CLOSED
        self._asked = self._asking = None

    def _protocol_error(self, e: MqttError) -> None:
        self.error = e
        log.info("MQTT %s (%s): %s", self.peer, self.session.client_id if self.session else "-", e)
        if self.state is State.AWAITING_CONNECT:
            if isinstance(e, UnsupportedProtocolVersion):
                v5 = e.level == MQTT_5
                self.out.append(encode(ConnAck(False, e.reason_code if v5 else 1), MQTT_5 if v5 else 4))
            elif self.decoder.version == MQTT_5:
                self.out.append(encode(ConnAck(False, e.reason_code, _reason(e.text)), MQTT_5))
        else:
            self._disconnect_with(e.reason_code, e.text)
        self._close(str(e))

    def _disconnect_with(self, code: int, text: str | None = None) -> None:
        """A server DISCONNECT (5.0 only; a 3.1.1 connection is just closed)."""
        if self.version == MQTT_5 and self.state is State.CONNECTED:
            self.out.append(encode(Disconnect(code, _reason(text)), self.version))

    def _close(self, reason: str) -> None:
        """The socket is to close once ``out`` is written; the session is detached (will
        included) first."""
        if self.state is State.CLOSED:
            return
        if self.state is State.CONNECTED and self.session is not None:
            self._pending.append(Detach(self.session, self.will, self.will_delay))
        self.state = State.CLOSED
        self._asked = self._asking = None
        self._pending.append(Close(reason))

    def _refuse(self, code: int, why: str) -> None:
        log.info("MQTT %s: CONNECT refused (0x%02X): %s", self.peer, code, why)
        self.out.append(encode(ConnAck(False, code, _reason(why) if self.version == MQTT_5 else NO_PROPERTIES),
                               self.version))
        self._close(why)

    # -- the table's handlers ----------------------------------------------------------------------

    def _connect(self, c: Connect) -> None:
        self.version = c.protocol_level
        decided = accept_connect(c, self.limits, self.new_client_id)
        if isinstance(decided, Refused):
            self._refuse(decided.connack.reason_code, decided.reason)
        elif c.properties.authentication_method is not None:
            self._refuse(BAD_AUTHENTICATION_METHOD, "enhanced authentication is not supported")
        else:
            if decided.expiry_capped:
                self.limit_hit(EXPIRY_CAPPED)
            self._ask(Login(decided))

    def _publish(self, p: Publish) -> None:
        self.gate.published()
        publishing = self.publishing
        topic = publishing.inbound.publish(p)
        if topic is None:  # a QoS 2 resend
            publishing.duplicate(p)
            return
        session = self.session
        assert session is not None
        message = message_from_publish(topic, p, session.client_id, self.clock(), publishing.envelopes, Inflight)
        refusal = 0
        if not self.access.may_publish(message.envelope.routing_key):
            refusal = NOT_AUTHORIZED
        elif p.properties.payload_format_indicator == 1:
            try:
                p.payload.decode("utf-8")
            except UnicodeDecodeError:
                refusal = PAYLOAD_FORMAT_INVALID
        if refusal:
            log.info("MQTT %s: publish to %r refused (0x%02X)", self.peer, p.topic, refusal)
            if self.version < MQTT_5:  # no way to say it but closing (as Mosquitto and RabbitMQ do)
                self._close("a refused publish from an MQTT 3.1.1 client")
            elif p.qos:
                publishing.refused(p, refusal)
                self._flush_answers()
            return
        if p.qos == 0 and p.retain:
            self._pending.append(Retain(message, 0))
        publishing.take(p, message)

    def _puback(self, p: PubAck) -> None:
        assert self.outgoing is not None
        self._acked(self.outgoing.puback(p.packet_id))

    def _pubrec(self, p: PubRec) -> None:
        assert self.outgoing is not None
        settle, ended = self.outgoing.pubrec(p.packet_id, p.reason_code)
        if ended is not None:
            self._acked(ended)
            return
        if settle is not None:
            self._pending.append(Settle(settle, durably=True))  # before the record says RELEASED
        if self._save is not None:
            self._pending.append(self._save)

    def _pubrel(self, p: PubRel) -> None:
        self.publishing.pubrel(p.packet_id)
        if self._save is not None:
            self._pending.append(self._save)

    def _pubcomp(self, p: PubComp) -> None:
        assert self.outgoing is not None
        self.outgoing.pubcomp(p.packet_id)
        if self._save is not None:
            self._pending.append(self._save)
        self._acked(None)

    def _acked(self, token: Any) -> None:
        """The client acknowledged a message: settled, and room for more (handed out when
        the read ends, once for all its acknowledgements)."""
        if token is not None:
            self._pending.append(Settle(token))
        self._dispatch_due = True

    def _subscribe(self, p: Subscribe) -> None:
        s = self.session
        assert s is not None
        sid = p.properties.subscription_identifiers[0] if p.properties.subscription_identifiers else None
        filtered, refusal = subscription_filter(p.properties)
        refused: str | None = None  # the SUBACK's reason string
        codes: list[int] = []
        adds: list[Subscription] = []
        for sub in p.subscriptions:
            if not self.access.may_subscribe(sub.topic_filter):
                codes.append(NOT_AUTHORIZED if self.version == MQTT_5 else 0x80)
                continue
            if refusal is not None:
                codes.append(IMPLEMENTATION_SPECIFIC_ERROR)
                refused = refusal
                continue
            adds.append(sub)
            codes.append(sub.qos)
        if adds:
            self._ask(AddSubscriptions(s, tuple(adds), sid, filtered), (p, codes, refused))
        else:
            self._suback(p, codes, refused, filtered, sid, [])

    def _suback(self, p: Subscribe, codes: list[int], refused: str | None, filtered: Filtered | None,
                sid: int | None, retained: list[tuple[str, int]]) -> None:
        self.out.append(encode(SubAck(p.packet_id, tuple(codes), _reason(refused)), self.version))
        if retained:
            self._ask(MatchRetained(tuple(f for f, _ in retained)), (retained, filtered, sid))
        else:
            self._pending.append(self._dispatch)

    def _unsubscribe(self, p: Unsubscribe) -> None:
        assert self.session is not None
        self._ask(RemoveSubscriptions(self.session, p.topic_filters), p)

    def _pingreq(self, p: PingReq) -> None:
        self.out.append(_PINGRESP)

    def _disconnect(self, p: Disconnect) -> None:
        s = self.session
        assert s is not None
        expiry = p.properties.session_expiry_interval
        if expiry is not None:
            if s.expiry == 0 and expiry != 0:
                raise MqttError(PROTOCOL_ERROR, "a session expiry interval in DISCONNECT after 0 in CONNECT")
            if expiry > self.limits.max_session_expiry:  # the client cannot be told any more
                expiry = self.limits.max_session_expiry
                self.limit_hit(EXPIRY_CAPPED)
            s.expiry = expiry
        if p.reason_code != DISCONNECT_WITH_WILL_MESSAGE:
            self.will = None
        self._close("disconnected by the client")

    @property
    def answers_waiting(self) -> int:
        """QoS 1/2 publishes from the client not answered yet."""
        return len(self.publishing.answers)


def _ignore(what: str) -> None:
    pass


def _reason(text: str | None) -> Properties:
    """A Reason String (MQTT 5: CONNACK and DISCONNECT may carry one whatever the client's
    Request Problem Information), kept short enough for any client's packet size."""
    return Properties(reason_string=text[:200]) if text else NO_PROPERTIES


Handler = Callable[[Machine, Any], None]
# (state, packet type) -> (handler, next state); anything else is a protocol error (MQTT
# 3.1.1 section 3.1.0: a second CONNECT; section 4.8: a packet only a server sends).
TRANSITIONS: dict[tuple[State, type], tuple[Handler, State]] = {
    (State.AWAITING_CONNECT, Connect): (Machine._connect, State.CONNECTING),
    (State.CONNECTED, Publish): (Machine._publish, State.CONNECTED),
    (State.CONNECTED, PubAck): (Machine._puback, State.CONNECTED),
    (State.CONNECTED, PubRec): (Machine._pubrec, State.CONNECTED),
    (State.CONNECTED, PubRel): (Machine._pubrel, State.CONNECTED),
    (State.CONNECTED, PubComp): (Machine._pubcomp, State.CONNECTED),
    (State.CONNECTED, Subscribe): (Machine._subscribe, State.CONNECTED),
    (State.CONNECTED, Unsubscribe): (Machine._unsubscribe, State.CONNECTED),
    (State.CONNECTED, PingReq): (Machine._pingreq, State.CONNECTED),
    (State.CONNECTED, Disconnect): (Machine._disconnect, State.CLOSED),
}
