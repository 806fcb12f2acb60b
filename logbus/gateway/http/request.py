"""The Request class of the HTTP gateway: bounds the request body and parses it as JSON.

A body is JSON as RFC 8259 has it and as every other parser reads it: NaN and Infinity
(which Python's parser takes) are refused, and so is a lone surrogate (``"\\ud800"``: no
Unicode text, it cannot become UTF-8 anywhere the value goes) in any key or value, and
nesting deeper than the parser goes. Each is 400 ``bad_json``, so what a handler gets
holds only text that encodes.

A failure no handler caught (in resolving the path, say) is answered 500 with a JSON
error like every other answer, not twisted.web's HTML page; it is a bug, and logged so.

The body limit is enforced from the headers, before any body byte is buffered: a
Content-Length over MAX_BODY is answered 413 at once; a chunked body is counted as it
arrives. After a 413 the connection is closed *lingering*: we half-close our side (the
client sees the whole response, then EOF) and discard whatever the client still sends,
instead of resetting the connection under a client that is still writing its body.
"""

from __future__ import annotations

import io
import json
import logging
import re
from functools import partial
from typing import Any, Protocol, cast

from twisted.python.failure import Failure
from twisted.web import server

from .responses import HttpError, Response

log = logging.getLogger(__name__)

MAX_BODY = 1024 * 1024
LINGER_SECONDS = 10.0
_SURROGATE = re.compile("[\ud800-\udfff]")


class _Transport(Protocol):
    """What a 413 uses of the connection's transport (ITCPTransport's half-close where the
    transport has it). twisted.web types it as ITransport, a zope interface whose methods
    mypy cannot call without the mypy-zope plugin."""

    connected: int

    def write(self, data: bytes) -> None: ...
    def loseConnection(self) -> None: ...
    def loseWriteConnection(self) -> None: ...
    def abortConnection(self) -> None: ...


class LimitedRequest(server.Request):
    _rejected = False
    _received = 0
    _body: io.BytesIO

    def gotLength(self, length: int | None) -> None:
        # The body is at most MAX_BODY, so memory is the right place for it (never a temp file).
        self._body = io.BytesIO()
        # twisted.web declares `content = None` (documented as the body's binary file).
        self.content = self._body  # type: ignore[assignment]
        if length is not None and length > MAX_BODY:
            self._reject()

    def handleContentChunk(self, data: bytes) -> None:
        if self._rejected:
            return
        self._received += len(data)
        if self._received > MAX_BODY:
            self._reject()
            return
        self._body.write(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self._rejected:
            return  # already answered 413; the rest of the body was discarded
        super().requestReceived(command, path, version)

    def processingFailed(self, reason: Failure) -> Failure:
        log.error("%s %r failed: %s", self.method.decode("latin-1"), self.uri, reason.getTraceback())
        response = Response.error(500, "internal_error", "internal error (see the broker log)")
        self.setResponseCode(500)
        self.setHeader(b"Content-Type", (response.content_type or "").encode())
        self.setHeader(b"Content-Length", str(len(response.body)).encode())
        self.write(response.body)
        self.finish()
        return reason

    def _reject(self) -> None:
        self._rejected = True
        # No "100 Continue" after our final answer.
        self.requestHeaders.removeHeader(b"Expect")
        response = Response.error(
            413, "payload_too_large", f"request body is larger than {MAX_BODY} bytes"
        )
        head = (
            f"HTTP/1.1 413 Content Too Large\r\n"
            f"Content-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\n"
            f"Connection: close\r\n\r\n"
        ).encode()
        channel = self.channel
        transport = cast(_Transport, channel.transport)
        channel.dataReceived = discard  # type: ignore[method-assign]
        channel.setTimeout(None)
        stop = getattr(channel, "stop_deadlines", None)  # site.RegisteredChannel's timeouts
        if stop is not None:
            stop()
        transport.write(head + response.body)
        if hasattr(transport, "loseWriteConnection"):  # not every transport can half-close
            transport.loseWriteConnection()
            # the channel's callLater is its site's reactor.callLater (HTTPFactory.buildProtocol)
            channel.callLater(LINGER_SECONDS, partial(abort_transport, transport))
        else:
            transport.loseConnection()


def discard(data: bytes) -> None:
    """What a connection being closed does with the bytes it still receives."""


def abort_transport(transport: Any) -> None:
    if transport.connected:
        transport.abortConnection()


def request_body(request: server.Request) -> bytes:
    """The whole request body: a LimitedRequest holds it in memory."""
    content: io.BytesIO | None = request.content  # twisted.web declares it None
    return content.getvalue() if content is not None else b""


def read_json(request: server.Request) -> Any:
    """The request body parsed as JSON, or HttpError 400."""
    raw = request_body(request)
    if not raw.strip():
        raise HttpError(400, "bad_json", "request body must be a JSON document")
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HttpError(400, "bad_json", f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise HttpError(400, "bad_json", "request body is nested too deeply") from None
    _check_text(body)
    return body


def _no_constant(name: str) -> Any:
    raise HttpError(400, "bad_json", f"request body is not valid JSON: {name} is no JSON value")


def _check_text(body: Any) -> None:
    """HttpError 400 when a key or a string value holds a lone surrogate."""
    stack = [body]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            texts: Any = (item,)
        elif isinstance(item, dict):
            texts = item.keys()
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
            continue
        else:
            continue
        for text in texts:
            if _SURROGATE.search(text):
                raise HttpError(400, "bad_json", f"request body holds a lone surrogate in {text!r}:"
                                                 " not Unicode text")


def json_object(body: Any, known: tuple[str, ...]) -> dict[str, Any]:
    """``body`` (from read_json) as a JSON object holding only ``known`` fields, or
    HttpError 400 bad_request."""
    if not isinstance(body, dict):
        raise HttpError(400, "bad_request", "request body must be a JSON object")
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise HttpError(
            400,
            "bad_request",
            f"unknown field(s) {', '.join(map(repr, unknown))} (known: {', '.join(known)})",
        )
    return body


def query_flag(request: server.Request, name: str) -> bool:
    """A yes/no query parameter (``?force=true``): true/1/yes or false/0/no, absent is
    no; anything else is 400."""
    args: dict[bytes, list[bytes]] = request.args or {}
    raw = args.get(name.encode())
    if not raw:
        return False
    value = raw[-1].decode("utf-8", "replace").strip().lower()
    if value in ("true", "1", "yes", ""):
        return True
    if value in ("false", "0", "no"):
        return False
    raise HttpError(400, "bad_request", f"query parameter {name!r} must be true or false, not {value!r}")
