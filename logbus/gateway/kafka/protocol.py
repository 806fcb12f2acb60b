"""The thin Twisted shell around the Kafka codec and handlers: it moves bytes, keeps
responses in request order (Kafka clients pipeline requests and rely on that), and
closes only this connection, with the reason logged, when the peer breaks the protocol."""

from __future__ import annotations

import logging
import time
from typing import Any, cast

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure

from ...core.broker import Broker
from ..output import FileOutput, is_tls, peer_of
from . import admin, configs, groups, records_admin
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
SLOW_ANSWER = 10.0  # seconds: a request closed unanswered after this is logged as a warning
READ_SIZE = 1 << 20  # bytes per recv: a produce request of ~1 MiB in one read, not 16


class KafkaProtocol(Protocol):
    def __init__(self, handlers: KafkaHandlers, max_frame: int, advertised: tuple[str, int] | None = None) -> None:
        self.handlers = handlers
        self._advertised = advertised
        self.decoder = FrameDecoder(max_frame)
        self._queue: list[list[Any]] = []  # [data, done, request, received at] slots, answered in order
        self._closing = False

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
        self.record = self.handlers.broker.connection_opened(
            "kafka", f"{peer_host}:{peer_port}", tls=is_tls(self._t), close=self._abort)

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
        for frame in frames:
            try:
                req = parse_request(frame, self.handlers.supported)
            except UnsupportedVersion as e:
                if e.api_key == API_VERSIONS:
                    self._enqueue_ready(self.handlers.unsupported_api_versions(e.correlation_id))
                    continue
                return self._abort(str(e))
            except KafkaProtocolError as e:
                return self._abort(str(e))
            if req.client_id and not self.record.client_id:
                self.record.client_id = req.client_id
            slot: list[Any] = [None, False, req, time.monotonic()]
            self._queue.append(slot)
            d: Deferred[Any] = maybeDeferred(self.handlers.handle, req, self.advertised)
            # errback after callback: a response that fails to encode also ends in _failed
            d.addCallback(self._answered, req, slot)
            d.addErrback(self._failed, req, slot)

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
        log.error("kafka %s v%d failed: %s", req.body.name, req.api_version, failure.getTraceback())
        slot[1] = True
        self._abort(f"internal error answering {req.body.name}")

    def _flush(self) -> None:
        q = self._queue
        while q and q[0][1]:
            data = q.pop(0)[0]
            if data is None or self._closing:
                continue
            self.output.write(data if isinstance(data, Chunks) else (data,))

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._closing = True
        self.handlers.broker.connection_closed(self.record)
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
MODULES = (groups, admin, configs, records_admin)


class KafkaFactory(Factory):
    def __init__(self, broker: Broker, reactor: Any, max_frame: int, advertised: tuple[str, int] | None = None,
                 *, auto_create_topics: bool = True) -> None:
        self.advertised = advertised
        self.handlers = KafkaHandlers(broker, reactor, auto_create_topics=auto_create_topics)
        for module in MODULES:
            module.install(self.handlers)
        self.max_frame = max_frame

    def buildProtocol(self, addr: Any) -> KafkaProtocol:
        return KafkaProtocol(self.handlers, self.max_frame, self.advertised)
