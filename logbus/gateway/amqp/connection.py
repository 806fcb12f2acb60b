"""One AMQP 0-9-1 connection as a sans-I/O state machine: bytes in, typed requests out.

Theory of operation. ``receive_data(data)`` only decodes (codec.Decoder) and buffers the
events. ``next_request()`` then hands out, one at a time, what the shell must do next,
and None when nothing is left until more bytes, an answer or a timer:

- a frozen request (requests.py): ``SendBytes``, ``Authenticate``, ``OpenVHost``,
  ``OpenChannel``, ``CloseChannel``, ``ReleaseAll``, ``ScheduleHeartbeat``, ``SetReading``,
  ``CloseTransport``;
- or a channel's input, for the shell's Channel (channel.py): the decoder's own event
  (``Publish``, ``Ack``, ``Nack``, ``Reject``, ``MethodReceived``), or a list of the
  consecutive ``Publish`` or ``Ack`` of one read on one channel, handled as a run
  (decision 0009). On this, the hot path, nothing is wrapped or copied.

A question (``Authenticate``, ``OpenVHost``) is answered, maybe later (a password is
checked off the reactor): ``authenticated(user)`` / ``auth_failed(AuthFailure)``,
``vhost_opened(name)`` / ``vhost_refused(VHostFailure)``; until then ``next_request`` hands
out nothing more, so frames that came after the question wait for its answer. Errors met while carrying out a channel's input come back
through ``channel_error`` / ``connection_error``; a heartbeat timer through
``heartbeat_due``; the broker's resource alarms through ``resource_alarm``. Nothing here
holds a socket, a timer, the broker, a vhost or the user store.

Methods on channel 0 go to the handshake's table (handshake.py: the states, tune and
login, ``TRANSITIONS``), mixed in as ``Handshake``. In RUNNING, channel numbers are
tracked here: Channel.Open of an open channel is 504, one past channel_max open channels
is 530 (RabbitMQ counts them), anything on a channel not open is 504 ``expected
'channel.open'``.

Errors follow AMQP: a channel exception sends Channel.Close and discards everything on
that channel until Close-Ok; a connection exception sends Connection.Close, drops the
rest of the read, ignores everything but Close-Ok, and closes the socket after a grace
period. A bad protocol header gets our header back and the socket closed.

Heartbeats: the shell calls ``heartbeat_due`` every half interval; we send one when
nothing was sent for half the interval, and drop the connection when nothing arrived for
two (RabbitMQ's rule), unless we are the ones not reading (a resource alarm).

Resource alarms: a connection that has published, or is in the middle of a publish (its
basic.publish method has arrived, its body has not: an unfinished body is memory held),
is blocked (not read) while any is set, and told so with Connection.Blocked, then
Unblocked, if it has RabbitMQ's ``connection.blocked`` capability. As in RabbitMQ, a
blocked connection is kept however long the alarm lasts, and its silence is not held
against it; it goes on getting heartbeats, which is how a client that has gone is found
(RabbitMQ: "the only portable way to detect disconnect on blocked connection is to wait
for heartbeat send failure"). We send one also when no heartbeat was negotiated, at
most every ``BLOCKED_PROBE`` seconds of silence (``probe_due``, which the shell calls
while it does not read us): a peer that does not use heartbeats must discard a
heartbeat frame without error (0-9-1, 4.2.7). A client gone meanwhile answers that frame
with a reset (gateway/unread.py), so the unfinished body it left is freed.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from pamqp import base
from pamqp import commands as C

from .codec import DEFAULT_MAX_MESSAGE_SIZE, HEARTBEAT_FRAME, Decoder, encode_method
from .errors import (
    CHANNEL_ERROR,
    COMMAND_INVALID,
    CONNECTION_FORCED,
    NOT_ALLOWED,
    AMQPChannelError,
    AMQPConnectionError,
    AMQPError,
    BadProtocolHeader,
    LocalProtocolError,
)
from .events import Ack, ChannelFailed, ContentReceived, Heartbeat, MethodReceived, Nack, Publish, Reject
from .handshake import FRAME_MAX, HEARTBEAT, MECHANISMS, SERVER_PROPERTIES, Handshake, State
from .requests import ChannelInput, CloseChannel, CloseTransport, OpenChannel, ReleaseAll, Request, SendBytes, SetReading

log = logging.getLogger(__name__)

CLOSE_GRACE = 5.0  # seconds to wait for Close-Ok before dropping the socket
BLOCKED_PROBE = 5.0  # seconds of silence after which a blocked connection gets a heartbeat frame


class Connection(Handshake):
    """The state machine of one connection; see the module's docstring."""

    def __init__(self, *, peer: str = "", heartbeat: int = HEARTBEAT, frame_max: int = FRAME_MAX,
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        self.peer = peer  # for log lines
        self.decoder = Decoder(max_message_size=max_message_size)
        super().__init__(heartbeat=heartbeat, frame_max=frame_max)
        self.channels: set[int] = set()  # open channel numbers
        self.closing_channels: set[int] = set()  # we sent Channel.Close: waiting for Close-Ok
        self.published = False  # a basic.publish was handed out: resource alarms block us
        self.blocked = False  # not read because of a resource alarm
        self.streamed = 0  # publishes and settlements handed out since the last receive_data
        self._alarm: str | None = None  # the broker's blocked reason, None: no alarm
        self._started = False  # Connection.Start sent
        self._pending: deque[Any] = deque()  # requests not yet handed out
        self._events: list[Any] = []  # decoded, not yet handled
        self._next = 0  # index of the next event to handle
        self._decoder_error: AMQPConnectionError | None = None  # once the events before it are handled
        self._check_alarm = False  # at the end of the read: block a first publisher under an alarm

    # -- inputs: bytes ------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Decode ``data``; ``next_request`` hands out what it asks for."""
        if self.state is State.CLOSED:
            return
        self.streamed = 0
        try:
            events = self.decoder.feed(data)
        except BadProtocolHeader as e:
            self._send(e.reply)
            self._drop(f"bad protocol header {e.received!r}")
            return
        except AMQPConnectionError as err:  # not ``e``: mypyc types a name by its first except clause
            events = err.events
            self._decoder_error = err  # the decoder is dead: no Close-Ok can be read
        if not self._started and self.decoder.greeted:
            self._started = True
            self.external = self.identity()  # a verified client certificate's user: EXTERNAL too
            mechanisms = MECHANISMS + (("EXTERNAL",) if self.external is not None else ())
            self._send_method(C.Connection.Start(0, 9, SERVER_PROPERTIES, " ".join(mechanisms), "en_US"))
        if events:
            if self._next < len(self._events):
                events = self._events[self._next:] + events
            self._events, self._next = events, 0
        self._check_alarm = True

    def next_request(self) -> Request | ChannelInput | None:
        """The next thing to do, or None until more bytes, an answer or a timer."""
        pending = self._pending
        if pending:
            return pending.popleft()  # type: ignore[no-any-return]
        if self._asked is not None:
            return None  # the answer first: what came after the question waits for it
        events = self._events
        n = len(events)
        while self._next < n:
            if self.state is State.CLOSED:
                break
            i = self._next
            ev = events[i]
            t = type(ev)
            self._next = i + 1
            try:
                if ((t is Publish or t is Ack) and i + 1 < n and type(events[i + 1]) is t
                        and events[i + 1].channel == ev.channel and self.state is State.RUNNING
                        and ev.channel in self.channels and ev.channel not in self.closing_channels):
                    j = i + 2  # a run of publishes, or of acks, on one channel: handled together
                    while j < n and type(events[j]) is t and events[j].channel == ev.channel:
                        j += 1
                    self._next = j
                    self.streamed += j - i
                    if t is Publish:
                        self.published = True
                    return events[i:j]  # type: ignore[no-any-return]
                out = self._event(ev)
            except AMQPChannelError as e:
                self.channel_error(e)
                out = None
            except AMQPConnectionError as err:  # not ``e`` (mypyc: see receive_data)
                self.connection_error(err)
                out = None
            if out is not None:
                return out
            if pending:
                return pending.popleft()  # type: ignore[no-any-return]
            if self._asked is not None:
                return None
        if n:
            self._events, self._next = [], 0
        if self._decoder_error is not None:
            error, self._decoder_error = self._decoder_error, None
            self._fail(error, wait_close_ok=False)
        elif self._check_alarm:
            self._check_alarm = False
            if self._alarm is not None and self.publishing:
                self._block(self._alarm)  # the first publish under an alarm: read no further
        return pending.popleft() if pending else None  # type: ignore[no-any-return]

    def _event(self, ev: Any) -> ChannelInput | None:
        t = type(ev)
        if t is Heartbeat:
            return None
        state = self.state
        if state is State.CLOSING:
            if t is MethodReceived:
                self._input(ev.method)  # Close, Close-Ok; the rest is dropped
            return None
        if t is ChannelFailed:
            raise ev.error
        channel = ev.channel
        if channel in self.closing_channels:
            if t is MethodReceived and isinstance(ev.method, (C.Channel.CloseOk, C.Channel.Close)):
                self.closing_channels.discard(channel)
                if isinstance(ev.method, C.Channel.Close):
                    self._send_method(C.Channel.CloseOk(), channel)
            return None
        if channel == 0:
            if t is not MethodReceived:
                raise AMQPConnectionError(COMMAND_INVALID, "content on channel 0")
            self._input(ev.method)
            return None
        if state is not State.RUNNING:
            raise AMQPConnectionError(COMMAND_INVALID, f"channel {channel} used before connection.open")
        if t is MethodReceived and isinstance(ev.method, C.Channel.Open):
            if channel in self.channels:
                raise AMQPConnectionError(CHANNEL_ERROR, "second 'channel.open' seen",
                                          channel=channel, class_id=20, method_id=10)
            if self.channel_max and len(self.channels) >= self.channel_max:  # RabbitMQ counts them
                raise AMQPConnectionError(NOT_ALLOWED, f"number of channels opened ({len(self.channels)}) has "
                                          f"reached the negotiated channel_max ({self.channel_max})")
            self.channels.add(channel)
            self._pending.append(OpenChannel(channel))
            self._send_method(C.Channel.OpenOk(), channel)
            return None
        if channel not in self.channels:
            index = ev.method.index if t is MethodReceived else (0x003C0028 if t is Publish else 0)
            raise AMQPConnectionError(CHANNEL_ERROR, "expected 'channel.open'", channel=channel,
                                      class_id=index >> 16, method_id=index & 0xFFFF)
        if t is Publish:
            self.published = True
            self.streamed += 1
            return ev  # type: ignore[no-any-return]
        if t is Ack or t is Nack or t is Reject:
            self.streamed += 1
            return ev  # type: ignore[no-any-return]
        if t is MethodReceived:
            m = ev.method
            if isinstance(m, C.Channel.Close):
                self._end_channel(channel)
                self._send_method(C.Channel.CloseOk(), channel)
                return None
            if isinstance(m, C.Channel.CloseOk):
                self._end_channel(channel)
                return None
            return ev  # type: ignore[no-any-return]
        if t is ContentReceived:
            raise AMQPConnectionError(COMMAND_INVALID, f"{ev.method.name} is sent by servers, not clients",
                                      channel=channel)
        raise LocalProtocolError(f"unknown event {ev!r}")

    # -- inputs: what the shell met, timers, the broker ------------------------------------------

    def channel_error(self, e: AMQPChannelError) -> None:
        """A channel exception: Channel.Close on ``e.channel``, drop what follows on it
        until Close-Ok; the connection goes on."""
        log.info("amqp channel %d of %s closed: %s", e.channel, self.peer, e.reply_text)
        self._end_channel(e.channel)
        self.closing_channels.add(e.channel)
        self._send(e.close_frame())

    def connection_error(self, e: AMQPConnectionError) -> None:
        """A connection exception: Connection.Close, the rest of this read is dropped."""
        self._events, self._next = [], 0
        self._fail(e)

    def heartbeat_due(self, silent: float, idle: float) -> None:
        """The heartbeat timer: nothing was received for ``silent`` seconds, nothing sent
        for ``idle``."""
        if self.state is State.CLOSED or not self.heartbeat:
            return
        if not self.blocked and silent > 2 * self.heartbeat:
            log.info("amqp connection %s: missed heartbeats, closing", self.peer)
            self._drop("missed heartbeats")
        elif idle >= self.heartbeat / 2:
            self._send(HEARTBEAT_FRAME)

    def probe_due(self, idle: float) -> None:
        """Blocked (the shell does not read us), nothing sent for ``idle`` seconds: a
        heartbeat frame once that is ``BLOCKED_PROBE`` or more, whatever was negotiated
        (see the module's docstring)."""
        if self.blocked and self.state is State.RUNNING and idle >= BLOCKED_PROBE:
            self._send(HEARTBEAT_FRAME)

    def resource_alarm(self, reason: str | None) -> None:
        """The broker's alarms changed: Connection.Blocked's ``reason`` while any is set,
        None once all have cleared. Only a connection that has published (or is publishing) is blocked; one
        that only consumes goes on, so consumers can drain what fills memory or disk."""
        self._alarm = reason
        if reason is not None and self.publishing:
            self._block(reason)
        elif reason is None and self.blocked:
            self.blocked = False
            if self.blocked_notify:
                self._send_method(C.Connection.Unblocked())
            self._pending.append(SetReading(True))

    @property
    def publishing(self) -> bool:
        """Has published, or a publish is unfinished (its body still arriving)."""
        return self.published or self.decoder.assembling

    def shutdown(self) -> None:
        """The broker is stopping: CONNECTION_FORCED, as RabbitMQ."""
        if self.state is State.RUNNING:
            self._fail(AMQPConnectionError(CONNECTION_FORCED, "broker forced connection closure with reason "
                                           "'shutdown'"))

    def force_close(self, reason: str) -> None:
        """Close with 320 CONNECTION_FORCED and ``reason`` (its user or vhost is being deleted)."""
        if self.state not in (State.CLOSING, State.CLOSED):
            self._fail(AMQPConnectionError(CONNECTION_FORCED, reason))

    def connection_lost(self) -> None:
        """The socket is gone."""
        self.state = State.CLOSED
        self._events, self._next = [], 0
        self.decoder.clear()
        self._pending.clear()
        self._asked = None
        self.channels.clear()
        self.closing_channels.clear()

    # -- requests --------------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        self._pending.append(SendBytes(data))

    def _send_method(self, method: base.Frame, channel: int = 0) -> None:
        self._pending.append(SendBytes(encode_method(channel, method)))

    def _end_channel(self, number: int) -> None:
        if number in self.channels:
            self.channels.discard(number)
            self._pending.append(CloseChannel(number))

    def _block(self, reason: str) -> None:
        if self.blocked or self.state is not State.RUNNING:
            return
        self.blocked = True
        if self.blocked_notify:
            self._send_method(C.Connection.Blocked(reason))
        self._pending.append(SetReading(False))

    def _release_all(self) -> None:
        self.channels.clear()
        self._pending.append(ReleaseAll())

    def _fail(self, e: AMQPError, wait_close_ok: bool = True) -> None:
        log.warning("closing amqp connection from %s: %s", self.peer, e.reply_text)
        if self.state in (State.CLOSING, State.CLOSED):
            return
        self._release_all()
        self._send(e.close_frame())
        self.state = State.CLOSING
        self._asked = None
        if self.blocked:  # read again, or the Close-Ok never arrives
            self.blocked = False
            self._pending.append(SetReading(True))
        if wait_close_ok:
            self._pending.append(CloseTransport("no close-ok", CLOSE_GRACE))
        else:
            self._drop(e.reply_text)  # the transport still writes the Close first

    def _drop(self, reason: str) -> None:
        if self.state is State.CLOSED:
            return
        self._release_all()
        self.state = State.CLOSED
        self._asked = None
        self._events, self._next = [], 0
        self._pending.append(CloseTransport(reason))

