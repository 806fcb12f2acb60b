"""The broker side of one AMQP connection: carries out the requests of the sans-I/O
state machine (connection.py) and holds its channels (channel.py).

``data_received`` feeds the machine and then drains it (``_run``): each request is
carried out against the core's ports (``Doors``: logins and the access check;
``VHosts``: each vhost's queue model), the reactor's timers or the transport callables
(``send``, ``close``, ``reading``), and a
question's answer goes straight back to the machine. A channel's input goes to its
Channel; a channel or connection exception that the Channel raises goes back to the
machine, which decides what the client is told.

Output is gathered per reactor turn (``core.tick``) and written at its end as one send,
in the order it was produced, except deliveries a publish handed at once to a waiting
consumer: those are written right after the read (``Prompt``). The transport's
back-pressure (``pause_writing``, ``resume_writing``) stops feeding consumers without
acks until the socket drains.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pamqp import base
from twisted.internet.defer import Deferred, fail, succeed
from twisted.python.failure import Failure

from ...core.ports import Doors, Queues, VHosts
from ...core.errors import LogbusError, LoopbackOnly, Refused
from ...core.types import ConnectionRecord, Resource
from ...core.types import RESOURCES
from ...core.types import tick_of
from ..answers import now_or_later
from .channel import Channel
from .codec import DEFAULT_MAX_MESSAGE_SIZE, encode_method
from .connection import Connection
from .handshake import FRAME_MAX, HEARTBEAT, State
from .requests import (
    Authenticate,
    AuthFailure,
    CloseChannel,
    CloseTransport,
    OpenChannel,
    OpenVHost,
    ReleaseAll,
    ScheduleHeartbeat,
    SendBytes,
    SetReading,
    VHostFailure,
)
from .errors import INTERNAL_ERROR, AMQPChannelError, AMQPConnectionError
from .events import Ack, MethodReceived, Nack, Publish, Reject

log = logging.getLogger(__name__)

BLOCKED_REASONS = {"memory": "low on memory", "disk": "low on disk"}  # RabbitMQ's texts


def blocked_reason(alarms: frozenset[str]) -> str | None:
    """Connection.Blocked's reason for the active alarms ("low on memory & low on disk",
    as RabbitMQ joins them), or None when there are none."""
    return " & ".join(BLOCKED_REASONS[name] for name in RESOURCES if name in alarms) or None


class Prompt:
    """Consumers fed by a publish, shared by a gateway's sessions: while a read's publishes
    are handled (``active``), every delivery is counted and its session listed once. The
    reading connection then knows a consumer was waiting for what it read, and the
    shell sends those sessions' output at once, ahead of the end of the turn (whose log
    drain may fdatasync first: a delivery does not wait for durability, only a confirm)."""

    __slots__ = ("active", "deliveries", "sessions")

    def __init__(self) -> None:
        self.active = False
        self.deliveries = 0
        self.sessions: list[Session] = []

    def send_now(self) -> None:
        """Write the listed sessions' output now."""
        sessions, self.sessions = self.sessions, []
        for s in sessions:
            s.prompt_due = False
            s.flush()


class Session:
    def __init__(self, doors: Doors, vhosts: VHosts, *, send: Callable[[bytes], None],
                 close: Callable[[], None], reading: Callable[[bool], None], reactor: Any,
                 peer_is_loopback: bool, peer: str = "",
                 heartbeat: int = HEARTBEAT, frame_max: int = FRAME_MAX,
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, prompt: Prompt | None = None,
                 record: ConnectionRecord | None = None) -> None:
        self.machine = Connection(peer=peer, heartbeat=heartbeat, frame_max=frame_max,
                                  max_message_size=max_message_size)
        self.doors = doors  # logins, the access check, the connection registry
        self.vhosts = vhosts  # the vhosts' queue models
        self.record = record  # this connection in the broker's registry (user, vhost, counters)
        self._send = send
        self._close = close
        self._reading = reading  # False: stop reading from the socket, True: read again
        self.reactor = reactor
        self.peer_is_loopback = peer_is_loopback
        self.peer = peer
        self.user = ""
        self.vhost: Queues | None = None  # the vhost's queue model, set by connection.open
        self.frame_max = self.machine.frame_max  # the negotiated one once the vhost is open
        self.channels: dict[int, Channel] = {}
        self.exclusive_queues: set[str] = set()
        self.open = True  # False once the socket is closed or lost
        self._timers: list[Any] = []
        self._received = self._sent = 0.0
        self._paused = False
        self._out: list[bytes] = []  # frames of this turn, written at its end as one send
        self.prompt = Prompt() if prompt is None else prompt
        self.prompt_due = False  # listed in prompt.sessions
        self.fed = False  # the last read's publishes were delivered to a consumer at once
        self.tick = tick_of(reactor)
        self._carry_out: dict[type, Callable[[Any], None]] = {
            SendBytes: self._send_bytes, Authenticate: self._authenticate, OpenVHost: self._open_vhost,
            OpenChannel: self._open_channel, CloseChannel: self._close_channel, ReleaseAll: self._release_all,
            ScheduleHeartbeat: self._schedule_heartbeat, SetReading: self._set_reading,
            CloseTransport: self._close_transport,
        }  # fmt: skip

    @property
    def cancel_notify(self) -> bool:
        return self.machine.cancel_notify

    @property
    def state(self) -> State:
        return self.machine.state

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
        self.fed = False
        if not self.open:
            return 0
        self._received = self.reactor.seconds()
        machine = self.machine
        machine.receive_data(data)
        self._run()
        return machine.streamed

    def _run(self) -> None:
        """Carry out what the machine asks for until it asks for nothing."""
        machine = self.machine
        next_request = machine.next_request
        channels = self.channels
        carry_out = self._carry_out
        while True:
            r = next_request()
            if r is None:
                return
            t = type(r)
            try:
                if t is list:
                    run: Any = r
                    if type(run[0]) is Publish:
                        self._publish(channels[run[0].channel].publish_many, run)
                    else:
                        channels[run[0].channel].ack_many(run)
                elif t is Publish:
                    self._publish(channels[r.channel].publish, r)  # type: ignore[union-attr]
                elif t is Ack or t is Nack or t is Reject:
                    channels[r.channel].settle(r)  # type: ignore[union-attr,arg-type]
                elif t is MethodReceived:
                    channels[r.channel].method(r.method)  # type: ignore[union-attr]
                else:
                    carry_out[t](r)
            except AMQPChannelError as e:
                machine.channel_error(e)
            except AMQPConnectionError as err:  # each clause its own name: mypyc types a name by its first
                machine.connection_error(err)
            except LogbusError as failed:  # the log failed under a declare or a bind (the disk, out of file
                # descriptors, a topic directory holding foreign files): 541, said cleanly, as RabbitMQ
                log.error("AMQP request failed: %s", failed)
                machine.connection_error(AMQPConnectionError(INTERNAL_ERROR, str(failed), channel=0))
            except Exception as bug:  # a bug: said as 541 too, never a reset connection
                log.exception("AMQP request %s failed", t.__name__)
                machine.connection_error(AMQPConnectionError(INTERNAL_ERROR, f"internal error: {bug!r}", channel=0))

    def _publish(self, publish: Callable[[Any], None], what: Any) -> None:
        """``publish(what)``, noting whether it fed a consumer (``fed``)."""
        prompt = self.prompt
        before = prompt.deliveries
        prompt.active = True
        try:
            publish(what)
        finally:
            prompt.active = False
            if prompt.deliveries != before:
                self.fed = True

    # -- requests ----------------------------------------------------------------------------------

    def _send_bytes(self, r: SendBytes) -> None:
        self.send(r.data)

    def _authenticate(self, r: Authenticate) -> None:
        """Ask the broker. The answer may come later (a password is checked off the
        reactor, a refusal waits out the failed-login slowdown): meanwhile the socket is
        not read and what was read waits in the machine."""
        record, machine = self.record, self.machine
        if record is not None:  # what start-ok said of the client, for the operator's view
            record.client_said(name=machine.client_name, product=machine.client_product,
                               version=machine.client_version)
        if r.mechanism == "EXTERNAL":  # the handshake took the user from the TLS client certificate
            try:
                self.doors.authenticate_certificate(r.user, loopback=self.peer_is_loopback)
                checked: Deferred[None] = succeed(None)
            except Refused as exc:
                checked = fail(exc)
        else:
            checked = self.doors.authenticate(r.user, r.password, loopback=self.peer_is_loopback)
        if not now_or_later(checked, lambda result: self._answer_login(r, result),
                            lambda result: self._later(self._answer_login, r, result)):
            self._reading(False)

    def _answer_login(self, r: Authenticate, result: Any) -> None:
        if not isinstance(result, Failure):
            self.user = r.user
            self.machine.authenticated(r.user)
            return
        if result.check(LoopbackOnly):
            why, failure = "may connect from loopback only", AuthFailure.LOOPBACK_ONLY
        else:
            if not result.check(Refused):
                log.error("amqp connection %s: login failed: %s", self.peer, result.getTraceback())
            failure = AuthFailure.REFUSED
            why = "no such user for the client certificate" if r.mechanism == "EXTERNAL" else "bad user name or password"
        wait = self.doors.connection_refused(self.record, r.user, why)
        if wait:  # failed logins from this host, over a burst: answered later
            self._reading(False)
            self._timers.append(self.reactor.callLater(wait, self._later, self.machine.auth_failed, failure))
        else:
            self.machine.auth_failed(failure)

    def _later(self, answer: Callable[..., None], *args: Any) -> None:
        """A question answered after the turn that asked it: read again, give the machine
        the answer, and carry out what it asks next."""
        if not self.open:
            return
        if not self.machine.blocked:
            self._reading(True)
        answer(*args)
        self._run()
        self.flush()

    def _open_vhost(self, r: OpenVHost) -> None:
        vhost = self.vhosts.queues(r.name)
        if vhost is None:
            self.doors.connection_refused(self.record, r.user, f"no vhost {r.name!r}")
            self.machine.vhost_refused(VHostFailure.NOT_FOUND)
            return
        try:
            self.doors.authorize(r.user, "access", Resource(vhost.name))
        except Refused:
            self.doors.connection_refused(self.record, r.user, f"no permission in vhost {vhost.name!r}")
            self.machine.vhost_refused(VHostFailure.ACCESS_REFUSED)
        else:
            self.vhost = vhost
            self.doors.connection_logged_in(self.record, r.user, vhost.name)
            self.frame_max = self.machine.frame_max
            self.machine.vhost_opened(vhost.name)

    def _open_channel(self, r: OpenChannel) -> None:
        self.channels[r.number] = Channel(self, r.number)

    def _close_channel(self, r: CloseChannel) -> None:
        ch = self.channels.pop(r.number, None)
        if ch is not None:
            ch.closing = True
            ch.close()

    def _release_all(self, r: ReleaseAll | None = None) -> None:
        for number in list(self.channels):
            self._close_channel(CloseChannel(number))
        vhost = self.vhost
        for q in list(self.exclusive_queues):
            if vhost is not None and q in vhost.queues:
                vhost.delete_queue(q)
        self.exclusive_queues.clear()

    def _set_reading(self, r: SetReading) -> None:
        if r.on:
            self._received = self.reactor.seconds()  # the silence while we did not read was ours
        self._reading(r.on)

    def _close_transport(self, r: CloseTransport) -> None:
        if r.grace:
            self._timers.append(self.reactor.callLater(r.grace, self._drop))
        else:
            self._drop()

    def _drop(self) -> None:
        if not self.open:
            return
        self._release_all()
        self.flush()  # a Close frame, say: the transport writes it before closing
        self.open = False
        self.machine.connection_lost()
        self._close()

    # -- heartbeats ----------------------------------------------------------------------------------

    def _schedule_heartbeat(self, r: ScheduleHeartbeat) -> None:
        self._received = self._sent = self.reactor.seconds()
        self._timers.append(self.reactor.callLater(r.interval / 2, self._beat, r.interval / 2))

    def _beat(self, every: float) -> None:
        self._timers = [t for t in self._timers if t.active()]
        if not self.open:
            return
        now = self.reactor.seconds()
        self.machine.heartbeat_due(silent=now - self._received, idle=now - self._sent)
        self._run()
        if self.open:
            self._timers.append(self.reactor.callLater(every, self._beat, every))

    # -- the broker's side ---------------------------------------------------------------------------

    def resource_alarm(self, reason: str | None) -> None:
        """The broker's alarms changed (see ``Connection.resource_alarm``)."""
        self.machine.resource_alarm(reason)
        self._run()

    def probe(self) -> None:
        """We do not read the connection (an alarm) and look once a second whether its
        client has gone (gateway/unread.py): a heartbeat frame after a silence, which a
        client gone meanwhile answers with a reset (``Connection.probe_due``)."""
        if self.open:
            self.machine.probe_due(idle=self.reactor.seconds() - self._sent)
            self._run()

    def shutdown(self) -> None:
        """The broker is stopping: CONNECTION_FORCED, as RabbitMQ."""
        if self.open:
            self.machine.shutdown()
            self._run()

    def force_close(self, reason: str) -> None:
        """Close with 320 CONNECTION_FORCED and ``reason`` (its user or vhost is being
        deleted); leases and exclusive queues are released at once."""
        if self.open:
            self.machine.force_close(reason)
            self._run()

    def connection_lost(self) -> None:
        self._release_all()
        self._out.clear()
        self.open = False
        self.machine.connection_lost()
        for t in self._timers:
            if t.active():
                t.cancel()
        self._timers.clear()
