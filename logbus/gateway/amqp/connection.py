"""One AMQP 0-9-1 connection, sans I/O: bytes in (``data_received``), bytes out (the
``send`` callable), a ``close`` callable to drop the socket.

Theory of operation. The handshake is the spec's: protocol header, Start / Start-Ok
(PLAIN or AMQPLAIN against the users of ``core.access.auth.Access``; ``loopback_users`` only
from loopback, as RabbitMQ), Tune / Tune-Ok (frame_max and channel_max at most ours,
heartbeat negotiated), Open (a vhost that exists and the user has permissions in, else
530 NOT_ALLOWED). Then channels (channel.py) carry the work, checking permissions.
Deleting the user or the vhost closes the connection (``force_close``: 320).

Errors follow AMQP: a channel exception sends Channel.Close and discards everything on
that channel until Close-Ok; a connection exception sends Connection.Close, ignores
everything but Close-Ok, and drops the socket after a grace period. A bad protocol
header gets our header back and the socket closed.

Heartbeats: we send one whenever nothing was sent for half the interval, and drop the
connection when nothing arrived for two intervals (RabbitMQ's rule).

Resource alarms (core/pressure.py): while the broker is low on memory or disk, a
connection that has published is not read, and is told so with Connection.Blocked, then
Unblocked, if it has RabbitMQ's ``connection.blocked`` capability. Missing heartbeats
are not held against it meanwhile: we are the ones not reading them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from pamqp import base
from pamqp import commands as C
from pamqp import decode as pdecode

from ...core.access.auth import Access
from ...core.pressure import RESOURCES
from ...core.tick import tick_of
from ...core.vhost import VHost
from .channel import Channel
from .codec import DEFAULT_MAX_MESSAGE_SIZE, HEARTBEAT_FRAME, Decoder, encode_method
from .errors import (
    ACCESS_REFUSED,
    CHANNEL_ERROR,
    COMMAND_INVALID,
    CONNECTION_FORCED,
    NOT_ALLOWED,
    AMQPChannelError,
    AMQPConnectionError,
    AMQPError,
    BadProtocolHeader,
)
from .events import Ack, ChannelFailed, ContentReceived, Heartbeat, MethodReceived, Nack, Publish, Reject

log = logging.getLogger(__name__)

FRAME_MAX = 131072  # RabbitMQ's default
CHANNEL_MAX = 2047
HEARTBEAT = 60
CLOSE_GRACE = 5.0  # seconds to wait for Close-Ok before dropping the socket
SERVER_PROPERTIES: dict[str, Any] = {
    "product": "logbus", "platform": "Python", "version": "0.1.0",
    "capabilities": {
        "publisher_confirms": True, "exchange_exchange_bindings": True, "basic.nack": True,
        "consumer_cancel_notify": True, "connection.blocked": True, "per_consumer_qos": True,
        "authentication_failure_close": True,
    },
}  # fmt: skip
BLOCKED_REASONS = {"memory": "low on memory", "disk": "low on disk"}  # RabbitMQ's texts


def blocked_reason(alarms: frozenset[str]) -> str | None:
    """Connection.Blocked's reason for the active alarms ("low on memory & low on disk",
    as RabbitMQ joins them), or None when there are none."""
    return " & ".join(BLOCKED_REASONS[name] for name in RESOURCES if name in alarms) or None


class Connection:
    def __init__(self, vhosts: Mapping[str, VHost], access: Access, *, send: Callable[[bytes], None],
                 close: Callable[[], None], reading: Callable[[bool], None], reactor: Any,
                 peer_is_loopback: bool, peer: str = "",
                 heartbeat: int = HEARTBEAT, frame_max: int = FRAME_MAX,
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        self.vhosts = vhosts  # the broker's own dict: vhosts created later are found
        self.access = access
        self._send = send
        self._close = close
        self._reading = reading  # False: stop reading from the socket, True: read again
        self.reactor = reactor
        self.peer_is_loopback = peer_is_loopback
        self.peer = peer
        self.decoder = Decoder(max_message_size=max_message_size)
        self.server_heartbeat = heartbeat
        self.server_frame_max = frame_max
        self.frame_max = 4096
        self.channel_max = CHANNEL_MAX
        self.heartbeat = 0
        self.state = "start"  # start -> tune -> open -> running -> closing -> closed
        self.channels: dict[int, Channel] = {}
        self.closing_channels: set[int] = set()
        self.exclusive_queues: set[str] = set()
        self.cancel_notify = False
        self.blocked_notify = False  # the client has the connection.blocked capability
        self.published = False  # a basic.publish was handled: resource alarms block us
        self._streamed = 0  # publishes and settlements in the bytes being handled
        self.blocked = False  # not read because of a resource alarm
        self._alarm: str | None = None  # the broker's blocked reason, None: no alarm
        self.user = ""
        self.vhost: VHost | None = None  # set by connection.open
        self.open = True
        self._timers: list[Any] = []
        self._received = self._sent = 0.0
        self._paused = False
        self._started = False  # Connection.Start sent
        self._out: list[bytes] = []  # frames of this turn, written at its end as one send
        self.tick = tick_of(reactor)

    # -- I/O glue ---------------------------------------------------------------------------

    def writable(self) -> bool:
        return not self._paused

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        for ch in list(self.channels.values()):
            for q in {c.queue for c in ch.consumers.values()}:
                ch.vhost.dispatch(q)

    def send(self, data: bytes) -> None:
        if self.open:
            out = self._out
            if not out:
                self.tick.later(self.flush)
            out.append(data)

    def flush(self) -> None:
        """Write this turn's frames (Tick calls it at the end of the turn)."""
        out = self._out
        if out:
            self._out = []
            self._sent = self.reactor.seconds()
            self._send(out[0] if len(out) == 1 else b"".join(out))

    def send_method(self, channel: int, method: base.Frame) -> None:
        self.send(encode_method(channel, method))

    # -- bytes in ------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> int:
        """Handle the bytes; returns how many publishes, acks, nacks and rejects they
        completed, so the shell can tell a pipelining client from one waiting for each
        reply."""
        if not self.open:
            return 0
        self._received = self.reactor.seconds()
        try:
            events = self.decoder.feed(data)
        except BadProtocolHeader as e:
            self.send(e.reply)
            self._drop(f"bad protocol header {e.received!r}")
            return 0
        except AMQPConnectionError as e:
            self._events(e.events)
            self._fail(e, wait_close_ok=False)  # the decoder is dead: no Close-Ok can be read
            return 0
        self._streamed = 0
        self._events(events)
        if self._alarm is not None and self.published:
            self._block(self._alarm)  # the first publish under an alarm: read no further
        return self._streamed

    def _events(self, events: list[Any]) -> None:
        if not self._started and self.decoder.greeted:
            self._started = True
            self.send_method(0, C.Connection.Start(0, 9, SERVER_PROPERTIES, "PLAIN AMQPLAIN", "en_US"))
        i, n = 0, len(events)
        while i < n:
            if not self.open or self.state == "closed":
                return
            ev = events[i]
            i += 1
            try:
                t = type(ev)
                if (t is Publish or t is Ack) and i < n and type(events[i]) is t and events[i].channel == ev.channel:
                    j = i + 1  # a run of publishes, or of acks, on one channel: handled together
                    while j < n and type(events[j]) is t and events[j].channel == ev.channel:
                        j += 1
                    run, i = events[i - 1 : j], j
                    ch = self.channels.get(ev.channel)
                    if ch is None or self.state != "running" or ev.channel in self.closing_channels:
                        for e in run:  # as one at a time: the errors, or nothing
                            self._event(e)
                        continue
                    self._streamed += len(run)
                    if t is Publish:
                        self.published = True
                        ch.publish_many(run)
                    else:
                        ch.ack_many(run)
                else:
                    self._event(ev)
            except AMQPChannelError as e:
                self._close_channel(e)
            except AMQPConnectionError as e:
                self._fail(e)
                return

    def _event(self, ev: Any) -> None:
        t = type(ev)
        if t is Heartbeat:
            return
        if self.state == "closing":
            if t is MethodReceived and isinstance(ev.method, (C.Connection.CloseOk, C.Connection.Close)):
                self._drop("closed")
            return
        if t is ChannelFailed:
            raise ev.error
        channel = ev.channel
        if channel in self.closing_channels:
            if t is MethodReceived and isinstance(ev.method, (C.Channel.CloseOk, C.Channel.Close)):
                self.closing_channels.discard(channel)
                if isinstance(ev.method, C.Channel.Close):
                    self.send_method(channel, C.Channel.CloseOk())
            return
        if channel == 0:
            if t is not MethodReceived:
                raise AMQPConnectionError(COMMAND_INVALID, "content on channel 0")
            return self._connection_method(ev.method)
        if self.state != "running":
            raise AMQPConnectionError(COMMAND_INVALID, f"channel {channel} used before connection.open")
        ch = self.channels.get(channel)
        if t is MethodReceived and isinstance(ev.method, C.Channel.Open):
            if ch is not None:
                raise AMQPConnectionError(CHANNEL_ERROR, "second 'channel.open' seen",
                                          channel=channel, class_id=20, method_id=10)
            if self.channel_max and len(self.channels) >= self.channel_max:  # RabbitMQ counts them
                raise AMQPConnectionError(NOT_ALLOWED, f"number of channels opened ({len(self.channels)}) has "
                                          f"reached the negotiated channel_max ({self.channel_max})")
            self.channels[channel] = Channel(self, channel)
            self.send_method(channel, C.Channel.OpenOk())
            return
        if ch is None:
            index = ev.method.index if t is MethodReceived else (0x003C0028 if t is Publish else 0)
            raise AMQPConnectionError(CHANNEL_ERROR, "expected 'channel.open'", channel=channel,
                                      class_id=index >> 16, method_id=index & 0xFFFF)
        if t is Publish:
            self.published = True
            self._streamed += 1
            ch.publish(ev)
        elif t is Ack or t is Nack or t is Reject:
            self._streamed += 1
            ch.settle(ev)
        elif t is MethodReceived:
            m = ev.method
            if isinstance(m, C.Channel.Close):
                self._end_channel(channel)
                self.send_method(channel, C.Channel.CloseOk())
            elif isinstance(m, C.Channel.CloseOk):
                self._end_channel(channel)
            else:
                ch.method(m)
        elif t is ContentReceived:
            raise AMQPConnectionError(COMMAND_INVALID, f"{ev.method.name} is sent by servers, not clients",
                                      channel=channel)

    # -- the handshake -------------------------------------------------------------------------

    def _connection_method(self, m: base.Frame) -> None:
        if isinstance(m, C.Connection.StartOk) and self.state == "start":
            self._authenticate(m)
            self.state = "tune"
            self.send_method(0, C.Connection.Tune(CHANNEL_MAX, self.server_frame_max, self.server_heartbeat))
        elif isinstance(m, C.Connection.TuneOk) and self.state == "tune":
            frame_max = m.frame_max or self.server_frame_max
            if frame_max < 4096 or frame_max > self.server_frame_max:
                raise AMQPConnectionError(NOT_ALLOWED, f"frame_max={frame_max} outside 4096..{self.server_frame_max}")
            self.frame_max = frame_max
            self.decoder.frame_max = frame_max
            self.channel_max = min(m.channel_max or CHANNEL_MAX, CHANNEL_MAX)
            self.heartbeat = m.heartbeat
            self.state = "open"
            self._start_heartbeats()
        elif isinstance(m, C.Connection.Open) and self.state == "open":
            vhost = self.vhosts.get(m.virtual_host)
            if vhost is None:
                raise AMQPConnectionError(NOT_ALLOWED, f"vhost {m.virtual_host} not found", class_id=10, method_id=40)
            if self.access.permission(self.user, vhost.name) is None:
                raise AMQPConnectionError(NOT_ALLOWED, f"access to vhost '{vhost.name}' refused for user "
                                          f"'{self.user}'", class_id=10, method_id=40)
            self.vhost = vhost
            self.state = "running"
            self.send_method(0, C.Connection.OpenOk())
        elif isinstance(m, C.Connection.Close):
            self.send_method(0, C.Connection.CloseOk())
            self._drop("closed by the client")
        elif isinstance(m, C.Connection.CloseOk):
            self._drop("closed")
        elif isinstance(m, C.Connection.UpdateSecret) and self.state == "running":
            # RabbitMQ asks the auth backends whose state can expire; logbus's users, like
            # RabbitMQ's internal ones, cannot: the login's credentials stand, the answer is ok
            log.info("amqp connection %s: user '%s' updated secret, reason: %s", self.peer, self.user, m.reason)
            self.send_method(0, C.Connection.UpdateSecretOk())
        elif isinstance(m, (C.Connection.Blocked, C.Connection.Unblocked)):
            return
        else:
            raise AMQPConnectionError(COMMAND_INVALID, f"unexpected {m.name} in state {self.state}")

    def _authenticate(self, m: C.Connection.StartOk) -> None:
        caps: Any = (m.client_properties or {}).get("capabilities")
        self.cancel_notify = isinstance(caps, dict) and bool(caps.get("consumer_cancel_notify"))
        self.blocked_notify = isinstance(caps, dict) and bool(caps.get("connection.blocked"))
        user = password = None
        response = m.response.encode("latin-1") if isinstance(m.response, str) else bytes(m.response or b"")
        if m.mechanism == "PLAIN":
            parts = response.split(b"\x00")
            if len(parts) == 3:
                user, password = parts[1].decode(errors="replace"), parts[2].decode(errors="replace")
        elif m.mechanism == "AMQPLAIN":
            try:
                import struct

                _, table = pdecode.field_table(struct.pack(">I", len(response)) + response)
                user, password = str(table.get("LOGIN", "")), str(table.get("PASSWORD", ""))
            except Exception:
                user = None
        else:
            raise AMQPConnectionError(ACCESS_REFUSED, f"unsupported authentication mechanism {m.mechanism!r}")
        if user is None or password is None or self.access.authenticate(user, password) is None:
            log.info("amqp connection %s: login refused for user %r", self.peer, user)
            raise AMQPConnectionError(ACCESS_REFUSED, f"Login was refused using authentication mechanism "
                                      f"{m.mechanism}. For details see the broker logfile.")
        if self.access.loopback_only(user) and not self.peer_is_loopback:
            raise AMQPConnectionError(ACCESS_REFUSED, f"user '{user}' can only connect via localhost")
        self.user = user

    # -- heartbeats ----------------------------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        if not self.heartbeat:
            return
        self._received = self._sent = self.reactor.seconds()
        self._timers.append(self.reactor.callLater(self.heartbeat / 2, self._beat))

    def _beat(self) -> None:
        self._timers = [t for t in self._timers if t.active()]
        if not self.open:
            return
        now = self.reactor.seconds()
        if not self.blocked and now - self._received > 2 * self.heartbeat:
            log.info("amqp connection %s: missed heartbeats, closing", self.peer)
            self._drop("missed heartbeats")
            return
        if now - self._sent >= self.heartbeat / 2:
            self.send(HEARTBEAT_FRAME)
        self._timers.append(self.reactor.callLater(self.heartbeat / 2, self._beat))

    # -- resource alarms -----------------------------------------------------------------------------

    def resource_alarm(self, reason: str | None) -> None:
        """The broker's alarms changed: ``reason`` (see blocked_reason) while any is set,
        None once all have cleared. Only a connection that has published is blocked; one
        that only consumes goes on, so consumers can drain what fills memory or disk."""
        self._alarm = reason
        if reason is not None and self.published:
            self._block(reason)
        elif reason is None and self.blocked:
            self.blocked = False
            self._received = self.reactor.seconds()  # the silence while blocked was ours
            if self.blocked_notify:
                self.send_method(0, C.Connection.Unblocked())
            self._reading(True)

    def _block(self, reason: str) -> None:
        if self.blocked or not self.open or self.state != "running":
            return
        self.blocked = True
        if self.blocked_notify:
            self.send_method(0, C.Connection.Blocked(reason))
        self._reading(False)

    # -- closing -----------------------------------------------------------------------------------

    def _close_channel(self, e: AMQPChannelError) -> None:
        log.info("amqp channel %d of %s closed: %s", e.channel, self.peer, e.reply_text)
        self._end_channel(e.channel)
        self.closing_channels.add(e.channel)
        self.send(e.close_frame())

    def _end_channel(self, number: int) -> None:
        ch = self.channels.pop(number, None)
        if ch is not None:
            ch.closing = True
            ch.close()

    def _fail(self, e: AMQPError, wait_close_ok: bool = True) -> None:
        log.warning("closing amqp connection from %s: %s", self.peer, e.reply_text)
        if self.state in ("closing", "closed"):
            return
        self._release_all()
        self.send(e.close_frame())
        self.state = "closing"
        if self.blocked:  # read again, or the Close-Ok never arrives
            self.blocked = False
            self._reading(True)
        if wait_close_ok:
            self._timers.append(self.reactor.callLater(CLOSE_GRACE, self._drop, "no close-ok"))
        else:
            self._drop(e.reply_text)  # the transport still writes the Close first

    def shutdown(self) -> None:
        """The broker is stopping: CONNECTION_FORCED, as RabbitMQ."""
        if self.open and self.state == "running":
            self._fail(AMQPConnectionError(CONNECTION_FORCED, "broker forced connection closure with reason "
                                           "'shutdown'"))

    def force_close(self, reason: str) -> None:
        """Close with 320 CONNECTION_FORCED and ``reason`` (its user or vhost is being
        deleted); leases and exclusive queues are released at once."""
        if self.open and self.state not in ("closing", "closed"):
            self._fail(AMQPConnectionError(CONNECTION_FORCED, reason))

    def _drop(self, reason: str) -> None:
        if not self.open:
            return
        self._release_all()
        self.flush()  # a Close frame, say: the transport writes it before closing
        self.open = False
        self.state = "closed"
        self._close()

    def connection_lost(self) -> None:
        self._release_all()
        self._out.clear()
        self.open = False
        self.state = "closed"
        for t in self._timers:
            if t.active():
                t.cancel()
        self._timers.clear()

    def _release_all(self) -> None:
        for number in list(self.channels):
            self._end_channel(number)
        vhost = self.vhost
        for q in list(self.exclusive_queues):
            if vhost is not None and q in vhost.queues:
                vhost.delete_queue(q)
        self.exclusive_queues.clear()

