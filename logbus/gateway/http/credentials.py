"""Who makes an HTTP request, and what the broker lets them do: HTTP Basic against the
broker's users, as RabbitMQ's management API, then ``Doors.authorize`` (the one access
check every protocol uses).

    401 + ``WWW-Authenticate: Basic realm="logbus"``   no credentials, or wrong ones
    403                                               a valid user without the tag or permission

``authenticate`` runs once per request (``ApiResource.authorize``) and keeps the user on
the request; handlers then ask ``require`` / ``require_topic`` about what they touch.
A password checked before with the same credentials is known at once (the broker's
login cache); else the check runs on the broker's password thread and ``authenticate``
raises ``LoginPending``: the resource renders the request again when it is done, and
``authenticate`` then finds its answer on the request.
"""

from __future__ import annotations

import base64
import binascii
import logging
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from twisted.web import server

from ...core.errors import LoopbackOnly, Refused
from ...core.types import Resource
from ..answers import now_or_later
from ..peers import is_loopback
from .responses import HttpError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ...core.ports import Doors
    from ...core.types import Action, Perm

REALM = 'Basic realm="logbus"'
CHALLENGE = (("WWW-Authenticate", REALM),)
_USER = "logbus_user"  # the request attribute the authenticated user name is kept in
_REFUSAL = "logbus_refusal"  # ... and the HttpError of a refused login


class LoginPending(Exception):
    """The request's password is being checked; render it again when ``checked`` fires."""

    def __init__(self, checked: Deferred[None]) -> None:
        super().__init__("login pending")
        self.checked = checked


def basic_credentials(request: server.Request) -> tuple[str, str] | None:
    """(user, password) from an ``Authorization: Basic`` header, or None."""
    header = request.getHeader("authorization")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, ValueError):
        return None
    return (user, password) if sep else None


def from_loopback(request: server.Request) -> bool:
    return is_loopback(str(getattr(request.getClientAddress(), "host", "")))


def authenticate(request: server.Request, doors: Doors) -> str:
    """The user the request's credentials name, checked (HttpError 401 otherwise), and
    kept on the request for ``user_of``."""
    known = _decided(request)
    if known is not None:
        return known
    credentials = basic_credentials(request)
    if credentials is None:
        raise HttpError(401, "unauthorized", "HTTP Basic credentials are required", CHALLENGE)
    return check_password(request, doors, *credentials, how="HTTP Basic")


def check_password(request: server.Request, doors: Doors, name: str, password: str, how: str) -> str:
    """``name`` and ``password`` checked as ``authenticate`` checks the Basic header's
    (the broker's login cache, its password thread, the slow-down of repeated failures),
    for credentials that came another way (the console's login form, logged as ``how``).
    The user is kept on the request; HttpError 401 when refused, LoginPending while
    checked (then the same call again finds the answer on the request)."""
    known = _decided(request)
    if known is not None:
        return known
    record = getattr(request.channel, "record", None)  # site.RegisteredChannel's
    checked = doors.authenticate(name, password, loopback=from_loopback(request))
    pending: Deferred[None] = Deferred()
    now: list[Failure | None] = []
    if now_or_later(checked, now.append,
                    lambda result: _settle(request, doors, record, name, how, result, pending)):
        return _settle(request, doors, record, name, how, now[0])
    raise LoginPending(pending)  # not known yet: checked on the password thread


def _decided(request: server.Request) -> str | None:
    """The request's user if its login is decided (its refusal raised), else None."""
    known: str | None = getattr(request, _USER, None)
    if known is not None:
        return known
    refusal: HttpError | None = getattr(request, _REFUSAL, None)
    if refusal is not None:
        raise refusal
    return None


def set_user(request: server.Request, doors: Doors, name: str, how: str) -> None:
    """``name`` is the request's user, known another way (the console's session cookie,
    logged as ``how``): ``require`` and ``allowed`` ask about it from here on."""
    setattr(request, _USER, name)
    doors.connection_logged_in(getattr(request.channel, "record", None), name, how=how)


def _settle(request: server.Request, doors: Doors, record: Any, name: str, how: str, result: Failure | None,
            pending: Deferred[None] | None = None) -> str:
    """The login's outcome kept on the request: the user, or the refusal (raised)."""
    if isinstance(result, Failure):
        if result.check(LoopbackOnly):
            error = HttpError(401, "unauthorized", f"user '{name}' can only connect via localhost", CHALLENGE)
            error.delay = doors.connection_refused(record, name, "may connect from loopback only")
        elif result.check(Refused):
            error = HttpError(401, "unauthorized", "Login failed", CHALLENGE)
            error.delay = doors.connection_refused(record, name, "bad user name or password")
        else:  # a bug: said as one, the request answered all the same
            log.error("login of user %r failed: %s", name, result.getTraceback())
            error = HttpError(500, "internal_error", "internal error (see the broker log)")
        setattr(request, _REFUSAL, error)
        if pending is not None:
            pending.callback(None)
            return name
        raise error
    setattr(request, _USER, name)
    doors.connection_logged_in(record, name, how=how)
    if pending is not None:
        pending.callback(None)
    return name


def user_of(request: server.Request) -> str:
    """The user ``authenticate`` let in for this request."""
    name: str = getattr(request, _USER)
    return name


def require(request: server.Request, doors: Doors, action: Action, resource: Resource | None = None) -> str:
    """The request's user, if it may ``action`` (a tag's action such as "manage", or a
    permission on ``resource``); HttpError 401 / 403 otherwise."""
    user = authenticate(request, doors)
    try:
        doors.authorize(user, action, resource or Resource(""))
    except Refused as exc:
        raise HttpError(403, "forbidden", str(exc)) from None
    return user


def allowed(request: server.Request, doors: Doors, action: Action, resource: Resource | None = None) -> bool:
    """Whether the request's (authenticated) user may ``action``: for what a handler
    shows or does differently, not to refuse."""
    try:
        doors.authorize(user_of(request), action, resource or Resource(""))
    except Refused:
        return False
    return True


def require_topic(request: server.Request, doors: Doors, action: Perm, topic: str,
                  key: str | None = None) -> str:
    """``require`` on the exchange a log topic stands for (``Doors.authorize_topic``)."""
    user = authenticate(request, doors)
    try:
        doors.authorize_topic(user, action, topic, key)
    except Refused as exc:
        raise HttpError(403, "forbidden", str(exc)) from None
    return user
