"""The thin Twisted shell around the Kafka codec and handlers: it moves bytes, keeps
responses in request order (Kafka clients pipeline requests and rely on that), and
closes only this connection, with the reason logged, when the peer breaks the protocol.

One request at a time (as Kafka mutes a connection's channel while a response is
pending): a request is handled only once every earlier one has been answered (or, with
``max_in_flight`` above 1, while fewer than that are unanswered). Frames of a read that
cannot be handled yet are held, and the socket is not read again (``pauseProducing``)
until they have all been handled and answered; then reading resumes. So a client that
pipelines is served in order at the pace of its answers, and what a connection holds is
bounded by one read (``READ_SIZE``) plus the decoder's one unfinished frame. A client
that waits for each answer never pauses the socket.

Handshake (``handshake_timeout_ms``, as the other listeners): a new connection must get
somewhere within ``handshake_timeout`` seconds of its accept, else it is closed without
a word: its first answer written, where it acts as a user already (an anonymous or a
certificate login: ApiVersions, say), or, where the listener asks for SASL, the answer
to its successful SaslAuthenticate. So silent or unauthenticated connections do not hold
their slot for Kafka's long idle timeout. A connection owed an answer when the time is up
is looked at again a timeout later: waiting for the broker is not the client's delay.

Idle (Kafka's ``connections.max.idle.ms``): a connection is closed when it has sent no
complete request for ``idle_timeout`` seconds and is owed no answer. Bytes of a request
that never completes do not count as activity, so a request trickled in forever (a
slowloris inside a frame) is closed by the same timeout. One reactor call per
connection, moved forward lazily when it fires.

Resource alarms (alarms.py): a Produce is held while one is set (the connection, muted
as above, is not read meanwhile) and handled when it clears, or answered
REQUEST_TIMED_OUT before the client's timeout; under the memory alarm a connection in
the middle of a large request is not read.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, cast

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure

from ...core.ports import Acls, Doors, Streams, Topics
from ...core.errors import Refused, StorageError
from ...core.types import FileSpan, Metrics
from ..output import FileOutput
from ..peers import is_loopback, is_tls, lost_reason, peer_identity, peer_of
from ..unread import UnreadWatch
from ..websocket import DEFAULT_HANDSHAKE_TIMEOUT
from . import acls, admin, configs, groups, records_admin, sasl, transactions
from .caller import Caller
from ..listener import DEFAULT_RULES, ListenerRules
from .sasl import SaslSession, Step
from .sasl import State as SaslState
from .alarms import LARGE_UNFINISHED, PRODUCE, hold_seconds, timed_out
from .codec import (
    Chunks,
    FrameDecoder,
    KafkaProtocolError,
    UnsupportedVersion,
    encode_response,
    parse_request,
)
from .handlers import KafkaHandlers

log = logging.getLogger(__name__)

API_VERSIONS = 18
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
BEFORE_LOGIN = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})  # what an unauthenticated connection may ask
SLOW_ANSWER = 10.0  # seconds: a request closed unanswered after this is logged as a warning
READ_SIZE = 1 << 20  # bytes per recv: a produce request of ~1 MiB in one read, not 16
DEFAULT_IDLE_TIMEOUT = 600.0  # seconds: Kafka's connections.max.idle.ms


class KafkaProtocol(Protocol):
    listener_rules: ListenerRules = DEFAULT_RULES  # the listener's own anonymous= (listener.py)

    def __init__(self, handlers: KafkaHandlers, max_frame: int, advertised: tuple[str, int] | None = None,
                 factory: KafkaFactory | None = None) -> None:
        self.handlers = handlers
        self._advertised = advertised
        self.factory = factory
        self.decoder = FrameDecoder(max_frame)
        self._queue: list[list[Any]] = []  # [data, done, request, received at] slots, answered in order
        self._held: deque[bytes] = deque()  # frames read while an answer was pending, not yet handled
        self._muted = False  # reading paused until the held frames are handled and answered
        self._unfinished = False  # reading paused: a large unfinished request under the memory alarm
        self._paused = False  # the transport is not read (for either reason)
        self.alarm_held: list[list[Any]] = []  # [request, slot, timer] of Produces held for an alarm
        self._muted_once = False  # logged for this connection
        self._handling = False  # inside _handle_held
        self._closing = False
        self._identity_seen = False  # the client certificate looked at (tls_cert_login)
        self._active = 0.0  # reactor time of the last complete request or answer written
        self._idle_call: Any = None
        self._handshake_call: Any = None  # until the handshake is over (the module's docstring)

    def connectionMade(self) -> None:
        self._t: Any = cast(Any, self.transport)
        if hasattr(self._t, "setTcpNoDelay"):
            self._t.setTcpNoDelay(True)  # as Kafka does: small answers must not wait for acks
        if hasattr(self._t, "bufferSize"):
            self._t.bufferSize = READ_SIZE
        self.output = FileOutput(self._t, self._abort)
        host = self._t.getHost()
        self.advertised = self._advertised or (host.host, host.port)
        peer_host, peer_port = peer_of(self._t)
        self.record = self.handlers.doors.connection_opened(
            "kafka", f"{peer_host}:{peer_port}", tls=is_tls(self._t), close=self._abort)
        loopback = is_loopback(peer_host)
        anonymous = self.listener_rules.anonymous or (self.factory.anonymous if self.factory is not None
                                                       else "loopback")
        user = None
        if anonymous == "loopback" and loopback:
            name = self.factory.anonymous_user if self.factory is not None else self.handlers.doors.anonymous_user
            try:
                self.handlers.doors.authenticate_anonymous(name, loopback=loopback)
                user = name
            except Refused as e:
                self.handlers.doors.connection_refused(self.record, name, str(e))
        self.caller = Caller(self.advertised, user, f"{peer_host}:{peer_port}", loopback, self.record)
        if user is not None:
            self.handlers.doors.connection_logged_in(self.record, user, how="anonymous (kafka_anonymous)")
        if self.factory is not None:
            self._active = self.factory.reactor.seconds()
            self._idle_call = self.factory.reactor.callLater(self.factory.idle_timeout, self._idle_check)
            self._handshake_call = self.factory.reactor.callLater(self.factory.handshake_timeout,
                                                                  self._handshake_over)
            self.factory.connections.add(self)

    def dataReceived(self, data: bytes) -> None:
        if self._closing:
            return
        self.record.bytes_in += len(data)
        try:
            self._received(data)
        except Exception:
            log.exception("kafka connection failed")
            self._abort("internal error (traceback logged)")

    def _received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except KafkaProtocolError as e:
            return self._abort(str(e))
        if self.decoder.buffered >= LARGE_UNFINISHED and self.factory is not None and self.factory.memory_alarm:
            self.memory_alarm(True)
        if not frames:
            return
        self._held.extend(frames)
        self._handle_held()

    def _handle_held(self) -> None:
        """Handle held frames while fewer than ``max_in_flight`` answers are pending;
        mute the socket while some remain, unmute once all are handled and there is
        room for another request."""
        if self._handling:
            return  # an answer written while handling: the loop below goes on
        self._handling = True
        try:
            held, queue = self._held, self._queue
            window = self.factory.max_in_flight if self.factory is not None else 1
            while held and len(queue) < window and not self._closing:
                self._handle(held.popleft())
        finally:
            self._handling = False
        if self._held and not self._closing:
            if not self._muted:
                self._muted = True
                self._reading_changed()
                if self.factory is not None:
                    self.factory.muted.inc()
                if not self._muted_once:
                    self._muted_once = True
                    log.debug("kafka %s pipelines requests: read one at a time while an answer is pending",
                              self._t.getPeer())
        elif self._muted and len(self._queue) < window:
            self._muted = False
            self._reading_changed()

    def _reading_changed(self) -> None:
        """Pause or resume the transport: not read while muted or, under the memory
        alarm, while a large request is unfinished."""
        stop = self._muted or self._unfinished
        if stop != self._paused and not self._closing:
            self._paused = stop
            if stop:
                self._t.pauseProducing()
                if self.factory is not None:
                    self.factory.unread.add(self._t)  # a client closing meanwhile is noticed (unread.py)
            else:
                self._t.resumeProducing()
                if self.factory is not None:
                    self.factory.unread.discard(self._t)

    def memory_alarm(self, on: bool) -> None:
        """The memory alarm is set (a large unfinished request: stop reading) or cleared."""
        stop = on and self.decoder.buffered >= LARGE_UNFINISHED
        if stop != self._unfinished:
            self._unfinished = stop
            if stop and self.factory is not None:
                self.factory.unfinished_paused(self)
            self._reading_changed()

    def _handle(self, frame: bytes) -> None:
        if self.factory is not None:
            self._active = self.factory.reactor.seconds()
        sasl = self.caller.sasl
        if sasl is not None and sasl.raw and sasl.state in (SaslState.HANDSHAKEN, SaslState.FIRST):
            step = sasl.authenticate(bytes(frame))  # a bare token after SaslHandshake v0
            if isinstance(step, Deferred):  # a PLAIN password, checked off the reactor: answered in order
                waiting: list[Any] = [None, False, None, time.monotonic()]
                self._queue.append(waiting)
                step.addCallback(self._raw_sasl_answer, sasl, waiting)
            else:
                self._raw_sasl_answer(step, sasl, None)
            return
        try:
            req = parse_request(frame, self.handlers.supported)
        except UnsupportedVersion as e:
            if e.api_key == API_VERSIONS:
                self._enqueue_ready(self.handlers.unsupported_api_versions(e.correlation_id))
                return
            return self._abort(str(e))
        except KafkaProtocolError as e:
            return self._abort(str(e))
        if req.client_id and not self.record.client_id:
            self.record.client_id = req.client_id
        if not self._identity_seen:  # the TLS handshake is over by the first request
            self._identity_seen = True
            self._certificate_login()
        if self.caller.user is None and req.api_key not in BEFORE_LOGIN:
            why = "SASL authentication is not finished" if self.caller.sasl is not None else \
                "this listener asks for SASL authentication first (kafka_anonymous, or its anonymous=)"
            return self._abort(f"{req.body.name} refused: {why}")
        slot: list[Any] = [None, False, req, time.monotonic()]
        self._queue.append(slot)
        if req.api_key == PRODUCE and self.factory is not None and self.factory.alarms:
            self._hold(req, slot)
            return
        self._run(req, slot)

    def _run(self, req: Any, slot: list[Any]) -> None:
        d: Deferred[Any] = maybeDeferred(self.handlers.handle, req, self.caller)
        # errback after callback: a response that fails to encode also ends in _failed
        d.addCallback(self._answered, req, slot)
        d.addErrback(self._failed, req, slot)

    def _certificate_login(self) -> None:
        """A verified TLS client certificate (``tls_cert_login``) names the user the
        connection acts as until it authenticates otherwise (Kafka's SSL principal)."""
        factory = self.factory
        identity = peer_identity(self._t, factory.cert_login) if factory is not None else None
        if identity is None:
            return
        doors = self.handlers.doors
        try:
            doors.authenticate_certificate(identity, loopback=self.caller.loopback)
        except Refused as e:
            doors.connection_refused(self.record, identity, str(e))
            self.caller.anonymous = None  # a certificate that names no user: no anonymous fallback either
            return
        self.caller.anonymous = identity
        doors.connection_logged_in(self.record, identity, how="client certificate")

    def _hold(self, req: Any, slot: list[Any]) -> None:
        """A Produce under a resource alarm: neither appended nor answered until the
        alarms clear (``release_held``) or for most of its ``timeout_ms``."""
        factory = self.factory
        assert factory is not None
        held: list[Any] = [req, slot, None]
        seconds = hold_seconds(req.body)
        if seconds is not None:
            held[2] = factory.reactor.callLater(seconds, self._held_too_long, held)
        self.alarm_held.append(held)
        factory.produce_held(self)

    def release_held(self) -> None:
        """The alarms cleared: handle the held Produces, in order."""
        held, self.alarm_held = self.alarm_held, []
        for req, slot, timer in held:
            if timer is not None and timer.active():
                timer.cancel()
            if not self._closing:
                self._run(req, slot)

    def _held_too_long(self, held: list[Any]) -> None:
        """Held for most of its timeout: REQUEST_TIMED_OUT (retriable), nothing appended."""
        if held not in self.alarm_held:
            return
        self.alarm_held.remove(held)
        req, slot, _ = held
        self._answered(timed_out(req.body), req, slot)

    def _raw_sasl_answer(self, step: Step, sasl: SaslSession, slot: list[Any] | None) -> None:
        """The answer to a bare SASL token (SaslHandshake v0): the server's token, size
        first; a failure closes the connection, as Kafka."""
        if self._closing:
            return
        if step.failed:
            self.handlers.doors.connection_refused(self.record, sasl.attempted,
                                                    f"SASL {sasl.mechanism}: {sasl.why or step.error_message}")
            return self._abort(f"SASL {sasl.mechanism} authentication failed")
        if sasl.user is not None:
            self.handlers.doors.connection_logged_in(self.record, sasl.user, how=f"SASL {sasl.mechanism}")
        data = len(step.auth_bytes).to_bytes(4, "big") + step.auth_bytes
        if slot is None:
            self._enqueue_ready(data)
        else:
            slot[0], slot[1] = data, True
            self._flush()

    def _enqueue_ready(self, data: bytes) -> None:
        self._queue.append([data, True, None, 0.0])
        self._flush()

    def _answered(self, response: Any, req: Any, slot: list[Any]) -> None:
        if response is None:
            slot[0] = None
        elif isinstance(response, Chunks):
            slot[0] = response  # already encoded (Fetch), with file ranges for sendfile
        else:
            slot[0] = encode_response(req, response)
        slot[1] = True
        self._flush()

    def _failed(self, failure: Failure, req: Any, slot: list[Any]) -> None:
        slot[1] = True
        if failure.check(StorageError):  # the disk, not a bug: no traceback; the client retries
            log.warning("kafka %s v%d not answered, the state store refused a write: %s", req.body.name,
                        req.api_version, failure.value)
            self._abort(f"{req.body.name} could not be stored")
            return
        log.error("kafka %s v%d failed: %s", req.body.name, req.api_version, failure.getTraceback())
        self._abort(f"internal error answering {req.body.name}")

    def _flush(self) -> None:
        q = self._queue
        if not (q and q[0][1]):
            return
        while q and q[0][1]:
            data = q.pop(0)[0]
            if data is None or self._closing:
                continue
            if isinstance(data, Chunks):
                self.record.bytes_out += sum(c.size if isinstance(c, FileSpan) else len(c) for c in data)
                self.output.write(data)
            else:
                self.record.bytes_out += len(data)
                self.output.write((data,))
            if self._handshake_call is not None and self.caller.user is not None:
                self._handshake_call.cancel()  # answered, as a user: the handshake is over
                self._handshake_call = None
        if self.caller.close_after_answer and not q and not self._closing:
            self._closing = True  # told why (a failed SASL authentication): now the end, as Kafka
            self._t.loseConnection()
            return
        if not q and self.factory is not None:
            self._active = self.factory.reactor.seconds()
        if self._held or self._muted:
            self._handle_held()

    def _handshake_over(self) -> None:
        """``handshake_timeout`` after the accept and no answer as a user yet: closed,
        unless an answer is owed (the wait is ours, not the client's: look again later)."""
        self._handshake_call = None
        factory = self.factory
        if self._closing or factory is None:
            return
        if self._queue:
            self._handshake_call = factory.reactor.callLater(factory.handshake_timeout, self._handshake_over)
            return
        factory.handshake_timeouts.inc()
        why = "no SASL authentication" if self.caller.anonymous is None else "no request answered"
        log.info("closing kafka connection from %s: %s within %.1f s (handshake_timeout_ms)",
                 self._t.getPeer(), why, factory.handshake_timeout)
        self._closing = True
        self.output.close()
        self._t.loseConnection()

    def _idle_check(self) -> None:
        """The idle timer fired: close if nothing came or was owed for ``idle_timeout``,
        else look again when that could first be true."""
        self._idle_call = None
        factory = self.factory
        if self._closing or factory is None:
            return
        now = factory.reactor.seconds()
        if self._queue or self._held:
            self._active = now  # busy: answering is ours, not the client's silence
        idle = now - self._active
        if idle >= factory.idle_timeout:
            factory.idle_closed.inc()
            partial = self.decoder.buffered
            log.info("closing kafka connection from %s: no complete request for %.1f s"
                     " (kafka_idle_timeout_ms)%s", self._t.getPeer(), idle,
                     f", {partial} bytes of an unfinished one" if partial else "")
            self._closing = True
            self.output.close()
            self._t.loseConnection()
            return
        self._idle_call = factory.reactor.callLater(factory.idle_timeout - idle, self._idle_check)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._closing = True
        self._held.clear()
        self.decoder.clear()  # an unfinished request's bytes go now, not with the next garbage collection
        for _, _, timer in self.alarm_held:
            if timer is not None and timer.active():
                timer.cancel()
        self.alarm_held.clear()
        if self.factory is not None:
            self.factory.connections.discard(self)
            self.factory.unread.discard(self._t)
        for call in (self._idle_call, self._handshake_call):
            if call is not None and call.active():
                call.cancel()
        self._idle_call = self._handshake_call = None
        self.handlers.doors.connection_closed(self.record, lost_reason(reason))
        self.output.close()
        if self._queue:  # a long poll, or a client that gave up waiting: say on what
            now = time.monotonic()
            slots = [s for s in self._queue if s[2] is not None]
            waiting = [f"{s[2].body.name} v{s[2].api_version} ({'ready' if s[1] else 'pending'}"
                       f" {now - s[3]:.1f} s)" for s in slots]
            level = logging.WARNING if any(now - s[3] > SLOW_ANSWER for s in slots) else logging.DEBUG
            log.log(level, "kafka connection from %s closed with %d requests not yet answered: %s",
                    self._t.getPeer(), len(self._queue), ", ".join(waiting[:10]))

    def _abort(self, reason: str) -> None:
        peer = self._t.getPeer()
        log.warning("closing kafka connection from %s: %s", peer, reason)
        self._closing = True
        self.output.close()
        self._t.loseConnection()


# the modules whose install() registers more APIs beside handlers.py's own (docs/kafka.md lists them all)
MODULES = (groups, admin, configs, records_admin, sasl, acls, transactions)


class KafkaFactory(Factory):
    """The Kafka listener's factory, built from ports: ``doors`` (connections, logins, the
    access check, alarms), ``streams``, ``topics``, ``acls`` (core/ports.py) and the metrics."""

    def __init__(self, doors: Doors, streams: Streams, topics: Topics, acls: Acls, metrics: Metrics, reactor: Any,
                 max_frame: int, advertised: tuple[str, int] | None = None,
                 *, auto_create_topics: bool = True, idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
                 handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
                 max_in_flight: int = 1, anonymous: str = "loopback",
                 sasl_mechanisms: tuple[str, ...] = sasl.MECHANISMS, cert_login: str = "off",
                 anonymous_user: str | None = None) -> None:
        self.cert_login = cert_login  # tls_cert_login: a verified client certificate's identity is the user
        # who a client that does not authenticate acts as, from loopback (None: the broker's, anonymous_user)
        self.anonymous_user = anonymous_user if anonymous_user is not None else doors.anonymous_user
        self.advertised = advertised
        self.anonymous = anonymous  # "off", or "loopback": who may skip SASL (acting as anonymous_user)
        self.reactor = reactor
        self.idle_timeout = idle_timeout  # seconds (kafka_idle_timeout_ms)
        self.handshake_timeout = handshake_timeout  # seconds from accept to the handshake's end (handshake_timeout_ms)
        self.handshake_timeouts = metrics.counter(
            "logbus_kafka_handshake_timeouts",
            "Kafka connections closed for no request answered (or no SASL authentication, where the listener"
            " asks for it) within handshake_timeout_ms")
        self.max_in_flight = max_in_flight  # requests handled before the first is answered (Kafka: 1)
        self.idle_closed = metrics.counter(
            "logbus_kafka_idle_closes",
            "Kafka connections closed with no complete request for kafka_idle_timeout_ms")
        self.muted = metrics.counter(
            "logbus_kafka_muted_reads",
            "Times a Kafka connection's reading was paused: requests arrived while an answer was pending")
        self.produces_held = metrics.counter(
            "logbus_kafka_produces_held",
            "Kafka Produce requests held (not appended, not answered) while a resource alarm was set")
        self.unfinished_reads_paused = metrics.counter(
            "logbus_kafka_unfinished_paused",
            "Times a Kafka connection in the middle of a large request was not read under the memory alarm")
        self.connections: set[KafkaProtocol] = set()
        self.unread = UnreadWatch(reactor)  # connections not read: gone meanwhile?
        self._logged: set[str] = set()  # what was logged for the alarms now set
        self.alarms: frozenset[str] = doors.on_alarms(self._alarms_changed)
        self.handlers = KafkaHandlers(doors, streams, topics, acls, reactor, auto_create_topics=auto_create_topics,
                                      sasl_mechanisms=sasl_mechanisms)
        for module in MODULES:
            module.install(self.handlers)
        self.max_frame = max_frame

    @property
    def memory_alarm(self) -> bool:
        return "memory" in self.alarms

    def _alarms_changed(self, alarms: frozenset[str]) -> None:
        self.alarms = alarms
        if not alarms:
            self._logged.clear()
        for p in list(self.connections):
            p.memory_alarm(self.memory_alarm)
            if not alarms and p.alarm_held:
                p.release_held()

    def produce_held(self, p: KafkaProtocol) -> None:
        self.produces_held.inc()
        if "held" not in self._logged:
            self._logged.add("held")
            log.warning("%s alarm: Kafka produce requests are held until it clears (first from %s)",
                        " & ".join(sorted(self.alarms)), p._t.getPeer())

    def unfinished_paused(self, p: KafkaProtocol) -> None:
        self.unfinished_reads_paused.inc()
        if "unfinished" not in self._logged:
            self._logged.add("unfinished")
            log.warning("memory alarm: Kafka connections in the middle of a large request are not read until"
                        " it clears (first: %s, %d bytes unfinished)", p._t.getPeer(), p.decoder.buffered)

    def buildProtocol(self, addr: Any) -> KafkaProtocol:
        return KafkaProtocol(self.handlers, self.max_frame, self.advertised, self)
