"""Base resources of the HTTP API.

An ApiResource answers a method M with its ``handle_M(request) -> Response``; a method it
lacks is 405 with an ``Allow`` header, HEAD is GET without the body. Handlers raise
HttpError for request problems and let core errors (LogbusError) through: both become
``{"error": code, "message": text}`` with the status from responses.STATUS_BY_CODE. Any
other exception is a bug: logged with its traceback, answered 500.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Union

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from twisted.web import resource, server

from ...core.types import Action
from ...core.errors import LogbusError
from .credentials import LoginPending, authenticate, require
from .responses import HttpError, Response, status_for

log = logging.getLogger(__name__)
audit_log = logging.getLogger("logbus.audit")
CHANGES = ("POST", "PUT", "PATCH", "DELETE")

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")

Handler = Callable[[server.Request], Union[Response, "Deferred[Response]"]]


class ApiResource(resource.Resource):
    public = False  # True: no credentials asked (/healthz)
    needs: Action | None = None  # a tag's action every method needs ("administer", "monitor", ...)
    audited = False  # a change made here is a management change: one line in the audit log

    def render(self, request: server.Request) -> bytes | int:
        method = request.method.decode("latin-1").upper()
        head = method == "HEAD"
        try:
            if self.isLeaf and request.postpath not in ([], [b""]):
                raise not_found(request)
            handler: Handler | None = getattr(self, f"handle_{'GET' if head else method}", None)
            if handler is None:
                allowed = ", ".join(self.allowed_methods())
                raise HttpError(
                    405,
                    "method_not_allowed",
                    f"{method} is not allowed on {request.path.decode('latin-1')}"
                    f" (allowed: {allowed})",
                    (("Allow", allowed),),
                )
            try:
                self.authorize(request)
            except LoginPending as pending:  # the password is checked off the reactor: again when known
                pending.checked.addCallback(lambda _: _render_again(self, request))
                return server.NOT_DONE_YET
            result = handler(request)
            if isinstance(result, Deferred):  # answered when it fires
                result.addErrback(_error_response, method, request)
                if self.audited and method in CHANGES:
                    result.addCallback(_audited, method, request)
                result.addCallback(_finish, request, head)
                return server.NOT_DONE_YET  # the request is finished by _finish
            response = result
        except Exception as exc:
            response = _error_response(Failure(exc), method, request)
            delay = getattr(exc, "delay", 0.0)
            if delay:  # a refused login from a host that failed too often: answered later
                site: Any = request.site
                site.reactor.callLater(delay, _finish, response, request, head)
                return server.NOT_DONE_YET
        if self.audited and method in CHANGES:
            _audited(response, method, request)
        return _write(request, response, head)

    def authorize(self, request: server.Request) -> None:
        """Raise HttpError (401, 403) unless the request may be handled: every endpoint
        needs a user's credentials (credentials.py) but a ``public`` one, and the tag's
        action in ``needs`` if set (auth.AdminResource: an administrator); a handler
        checks the permissions of what it touches."""
        if self.public:
            return
        site: Any = request.site  # an ApiSite (site.py)
        doors = site.doors
        if self.needs is None:
            authenticate(request, doors)
        else:
            require(request, doors, self.needs)

    def allowed_methods(self) -> list[str]:
        allowed = [m for m in METHODS if hasattr(self, f"handle_{m}")]
        if "GET" in allowed:
            allowed.insert(allowed.index("GET") + 1, "HEAD")
        return allowed

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        return NotFound()


class Directory(ApiResource):
    """An inner node of the tree (``/``, ``/api``): not an endpoint itself."""

    def render(self, request: server.Request) -> bytes:
        return _write(request, not_found(request).response(), request.method == b"HEAD")


class NotFound(ApiResource):
    isLeaf = True

    def render(self, request: server.Request) -> bytes:
        return _write(request, not_found(request).response(), request.method == b"HEAD")


class Refusal(ApiResource):
    """What a path that cannot be resolved answers: a ``getChild`` raised ``error``
    (a name in the path that is no UTF-8, say)."""

    isLeaf = True

    def __init__(self, error: HttpError) -> None:
        super().__init__()
        self.error = error

    def render(self, request: server.Request) -> bytes:
        return _write(request, self.error.response(), request.method == b"HEAD")


def _render_again(resource: ApiResource, request: server.Request) -> None:
    if request.finished or request.channel is None:  # the client went away
        return
    body = resource.render(request)
    if body is not server.NOT_DONE_YET:
        assert isinstance(body, bytes)
        request.write(body)
        request.finish()


def _error_response(failure: Failure, method: str, request: server.Request) -> Response:
    exc = failure.value
    if isinstance(exc, HttpError):
        return exc.response()
    if isinstance(exc, LogbusError):
        return Response.error(status_for(exc.code), exc.code, str(exc))
    log.error("%s %r failed: %s", method, request.uri, failure.getTraceback())
    return Response.error(500, "internal_error", "internal error (see the broker log)")


def _audited(response: Response, method: str, request: server.Request) -> Response:
    """The audit line of a management change that was made: who, what, from where."""
    if response.status < 400:
        user = getattr(request, "logbus_user", None)
        host = getattr(request.getClientAddress(), "host", "?")
        audit_log.info("user %r from %s: %s %s -> %d", user, host, method,
                       request.uri.decode("latin-1", "replace"), response.status)
    return response


def _finish(response: Response, request: server.Request, head: bool) -> None:
    if request.finished or request.channel is None:  # the client went away
        return
    body = _write(request, response, head)
    if body:
        request.write(body)
    request.finish()


def not_found(request: server.Request) -> HttpError:
    return HttpError(404, "not_found", f"no such resource: {request.path.decode('latin-1')}")


def _write(request: server.Request, response: Response, head: bool) -> bytes:
    request.setResponseCode(response.status)
    if response.content_type is not None:
        request.setHeader(b"Content-Type", response.content_type.encode())
    for name, value in response.headers:
        request.setHeader(name.encode(), value.encode())
    # always: an answer written later (a login checked off the reactor) is not chunked
    request.setHeader(b"Content-Length", str(len(response.body)).encode())
    return b"" if head else response.body
