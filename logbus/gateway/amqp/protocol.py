"""The thin Twisted shell around session.py (which carries out the requests of
connection.py's state machine): moves bytes, reports back-pressure.

The transport's push-producer callbacks tell the connection when the socket's buffer
is full (``pauseProducing``), so consumers without acks stop being fed until it
drains; consumers with acks are bounded by their prefetch anyway.

**Handshake timeout** (RabbitMQ's ``handshake_timeout``): a connection that has not
reached connection.open (protocol header, start-ok, tune-ok, open) within
``handshake_timeout`` seconds of being accepted is closed, without a Connection.Close
(none can be sent before tune), as RabbitMQ does. After the open, heartbeats bound a
silent client; any bytes count as life (as RabbitMQ's), and a client that negotiated
heartbeat 0 is bounded by nothing but TCP, as in RabbitMQ: what it can hold meanwhile is
one unfinished frame (at most frame_max).

The other direction is the broker's: the factory follows the resource alarms
(core/pressure.py) and hands them to every connection, which may ask its transport to
stop reading (the transport's own ``pauseProducing``) until they clear; meanwhile the
connection is looked at once a second, and probed with a heartbeat frame after a
silence, so that a client gone is found (gateway/unread.py). It also hears
when a user or a vhost is deleted (core/access/auth.py) and closes the connections of that
user, or to that vhost, with 320 CONNECTION_FORCED, as RabbitMQ does.

**Read linger** (decision 0008). A read that held several publishes or acks comes from a
client that pipelines (publishes in a confirm window, acks under a prefetch): it is
not waiting for a reply to go on sending. After such a read the socket is left alone
for ``read_linger`` seconds, so the next read takes what arrived meanwhile in one go:
one wake-up, one log write, one fdatasync and one RocksDB commit for many messages,
instead of one each per few. A read with one (a client waiting for each confirm,
an RPC) never lingers, so it costs such a client no latency. Nor does a read whose
publishes went at once to a consumer with credit (decision 0012): that consumer waits
for the next message, and the pause would keep it in the socket. Those deliveries are
also written right after the read (``session.Prompt``), not at the end of the turn,
whose log drain may first fdatasync: a delivery never waits for durability, only a
confirm does. So a message for a waiting consumer waits at most for an fdatasync
already in progress when it arrives, never for a linger. How long to linger is
chosen per connection by linger.py, between ``read_linger`` and ``read_linger_max``:
longer while the client goes on sending during the pause, the shortest when it only
waits for us (a small confirm window or prefetch).
"""

from __future__ import annotations

import logging
from typing import Any, cast

from twisted.internet.defer import Deferred
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure

from ...core.types import AccessChange, ConnectionRecord
from ...core.ports import Doors, VHosts
from ...core.types import Metrics
from .codec import DEFAULT_MAX_MESSAGE_SIZE
from ..output import direct_writer
from ..peers import is_loopback, is_tls, lost_reason, peer_identity, peer_of
from ..unread import UnreadWatch
from .handshake import State
from .session import Prompt, Session, blocked_reason
from .linger import LingerTuner, lingers

log = logging.getLogger(__name__)

DEFAULT_HANDSHAKE_TIMEOUT = 10.0  # seconds, RabbitMQ's handshake_timeout
_OPENING = frozenset({State.START, State.AUTHENTICATING, State.TUNE, State.OPEN, State.OPENING})


class AmqpProtocol(Protocol):
    def __init__(self, factory: AmqpFactory) -> None:
        self.factory = factory
        self.conn: Session | None = None
        self.record: ConnectionRecord | None = None  # in the broker's connection registry
        self._lingering = False  # reading paused for the read linger
        self._blocked = False  # reading paused for a resource alarm
        self._tuner = factory.tuner()
        self._handshake_call: Any = None

    def connectionMade(self) -> None:
        t: Any = cast(Any, self.transport)
        if hasattr(t, "setTcpNoDelay"):
            t.setTcpNoDelay(True)
        host, port = peer_of(t)
        doors = self.factory.doors
        self.record = doors.connection_opened("amqp", f"{host}:{port}", tls=is_tls(t), close=self._close_forced)
        self.conn = Session(doors, self.factory.vhosts, send=direct_writer(t, self.record),
                            close=t.loseConnection, reading=self._reading, reactor=self.factory.reactor,
                            peer_is_loopback=is_loopback(host), peer=f"{host}:{port}",
                            max_message_size=self.factory.max_message_size, prompt=self.factory.prompt,
                            record=self.record)
        self.conn.machine.identity = lambda: peer_identity(t, self.factory.cert_login)
        t.registerProducer(self, True)
        self.factory.connections.add(self)
        self._handshake_call = self.factory.reactor.callLater(self.factory.handshake_timeout, self._handshake_over)
        if self.factory.alarm is not None:
            self.conn.resource_alarm(self.factory.alarm)

    def _handshake_over(self) -> None:
        self._handshake_call = None
        conn = self.conn
        if conn is None or not conn.open or conn.state not in _OPENING:
            return
        self.factory.handshake_timeouts.inc()
        log.info("amqp connection %s: no connection.open within %.1f s (handshake_timeout_ms), in state %s:"
                 " closed", conn.peer, self.factory.handshake_timeout, conn.state.value)
        cast(Any, self.transport).loseConnection()  # a FIN after what we sent (Start, Tune), as RabbitMQ

    def _close_forced(self, reason: str) -> None:
        if self.conn is not None:
            self.conn.force_close(reason)

    def dataReceived(self, data: bytes) -> None:
        assert self.conn is not None and self.record is not None
        self.record.bytes_in += len(data)
        try:
            streamed = self.conn.data_received(data)
        except Exception:
            log.exception("amqp connection failed")
            cast(Any, self.transport).abortConnection()
            return
        prompt = self.factory.prompt
        if prompt.sessions:  # this read's publishes reached consumers with credit
            prompt.send_now()
        tuner = self._tuner
        if tuner is not None and not self._lingering and lingers(streamed, len(data), self.conn.fed):
            tuner.lingered(streamed)  # what the last pause brought; may change the next
            linger = tuner.linger
            self._lingering = True
            self.factory.lingers.inc()
            self.factory.linger_seconds.inc(linger)
            cast(Any, self.transport).pauseProducing()
            self.factory.reactor.callLater(linger, self._linger_over)

    def _linger_over(self) -> None:
        self._lingering = False
        if not self._blocked:
            cast(Any, self.transport).resumeProducing()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.factory.connections.discard(self)
        self.factory.unread.discard(self.transport)
        if self._handshake_call is not None and self._handshake_call.active():
            self._handshake_call.cancel()
        self._handshake_call = None
        if self.record is not None:
            self.factory.doors.connection_closed(self.record, lost_reason(reason))
        if self.conn is not None:
            self.conn.connection_lost()

    def _reading(self, on: bool) -> None:
        """Resume or stop reading from the socket (a resource alarm)."""
        t = cast(Any, self.transport)
        self._blocked = not on
        if on:
            self.factory.unread.discard(t)
            if not self._lingering:
                t.resumeProducing()
        else:
            t.pauseProducing()
            self.factory.unread.add(t, self._probe)  # a client closing meanwhile is noticed (unread.py)

    def _probe(self) -> None:
        if self.conn is not None:
            self.conn.probe()

    # IPushProducer: the transport's buffer filled up / drained
    def pauseProducing(self) -> None:
        if self.conn is not None:
            self.conn.pause_writing()

    def resumeProducing(self) -> None:
        if self.conn is not None:
            self.conn.resume_writing()

    def stopProducing(self) -> None:
        pass


class AmqpFactory(Factory):
    def __init__(self, doors: Doors, vhosts: VHosts, metrics: Metrics, reactor: Any, *, read_linger: float = 0.0,
                 read_linger_max: float = 0.0, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT, cert_login: str = "off") -> None:
        self.doors = doors  # connections, logins, the access check, the alarms
        self.vhosts = vhosts  # each vhost's queue model
        self.cert_login = cert_login  # tls_cert_login: a verified client certificate's identity may log in
        self.handshake_timeout = handshake_timeout  # seconds from accept to connection.open
        self.handshake_timeouts = metrics.counter(
            "logbus_amqp_handshake_timeouts",
            "AMQP connections closed for not reaching connection.open within handshake_timeout_ms")
        self.max_message_size = max_message_size  # larger bodies: 406 PRECONDITION_FAILED
        self.reactor = reactor
        self.read_linger = read_linger  # seconds, the shortest pause; 0: never
        self.read_linger_max = read_linger_max  # seconds, the longest (at most: a power of two times the shortest)
        self.lingers = metrics.counter(
            "logbus_amqp_read_lingers",
            "Pauses in reading a pipelining AMQP connection, to read more at once (read linger)")
        self.linger_seconds = metrics.counter(
            "logbus_amqp_read_linger_seconds",
            "Seconds those pauses lasted, together (divided by the pauses: the mean linger)")
        self.connections: set[AmqpProtocol] = set()
        self.unread = UnreadWatch(reactor)  # connections blocked by an alarm: gone meanwhile?
        self.prompt = Prompt()  # consumers fed by the read being handled
        self.alarm = blocked_reason(doors.on_alarms(self._alarms_changed))  # Connection.Blocked's reason
        doors.on_access_change(self._access_changed)

    def buildProtocol(self, addr: Any) -> AmqpProtocol:
        return AmqpProtocol(self)

    def tuner(self) -> LingerTuner | None:
        """A new connection's read linger, or None when lingering is off."""
        if not self.read_linger:
            return None
        return LingerTuner(self.read_linger, self.read_linger_max)

    def _alarms_changed(self, alarms: frozenset[str]) -> None:
        self.alarm = blocked_reason(alarms)
        for p in list(self.connections):
            if p.conn is not None:
                p.conn.resource_alarm(self.alarm)

    def _access_changed(self, change: AccessChange) -> None:
        """A user or vhost is about to be deleted: close its connections (320), which
        releases their leases and exclusive queues before the vhost's state goes."""
        for p in list(self.connections):
            conn = p.conn
            if conn is None:
                continue
            if change.kind == "user_deleted" and conn.user == change.name:
                conn.force_close(f"user '{change.name}' is deleted")
            elif change.kind == "vhost_deleted" and conn.vhost is not None and conn.vhost.name == change.name:
                conn.force_close(f"vhost '{change.name}' is deleted")

    def close_connections(self, grace: float = 2.0) -> Deferred[None]:
        """The broker is stopping: Connection.Close 320 CONNECTION_FORCED to every
        client (as RabbitMQ), then wait up to ``grace`` seconds for them to go."""
        d: Deferred[None] = Deferred()
        for p in list(self.connections):
            if p.conn is not None:
                p.conn.shutdown()

        def check(deadline: float) -> None:
            if not self.connections or self.reactor.seconds() >= deadline:
                for p in list(self.connections):
                    cast(Any, p.transport).abortConnection()
                d.callback(None)
            else:
                self.reactor.callLater(0.05, check, deadline)

        check(self.reactor.seconds() + grace)
        return d
