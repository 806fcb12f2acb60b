"""Who makes an HTTP request, and what the broker lets them do: HTTP Basic against the
broker's users, as RabbitMQ's management API, then ``Broker.authorize`` (the one access
check every protocol uses).

    401 + ``WWW-Authenticate: Basic realm="logbus"``   no credentials, or wrong ones
    403                                               a valid user without the tag or permission

``authenticate`` runs once per request (``ApiResource.authorize``) and keeps the user on
the request; handlers then ask ``require`` / ``require_topic`` about what they touch.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

from twisted.web import server

from ...core.errors import LoopbackOnly, Refused
from ...core.types import Resource
from ..output import is_loopback
from .responses import HttpError

if TYPE_CHECKING:
    from ...core.broker import Broker
    from ...core.types import Action, Perm

REALM = 'Basic realm="logbus"'
CHALLENGE = (("WWW-Authenticate", REALM),)
_USER = "logbus_user"  # the request attribute the authenticated user name is kept in


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


def authenticate(request: server.Request, broker: Broker) -> str:
    """The user the request's credentials name, checked (HttpError 401 otherwise), and
    kept on the request for ``user_of``."""
    known: str | None = getattr(request, _USER, None)
    if known is not None:
        return known
    credentials = basic_credentials(request)
    if credentials is None:
        raise HttpError(401, "unauthorized", "HTTP Basic credentials are required", CHALLENGE)
    name, password = credentials
    record = getattr(request.channel, "record", None)  # site.RegisteredChannel's
    try:
        broker.authenticate(name, password, loopback=from_loopback(request))
    except LoopbackOnly:
        error = HttpError(401, "unauthorized", f"user '{name}' can only connect via localhost", CHALLENGE)
        error.delay = broker.connection_refused(record, name, "may connect from loopback only")
        raise error from None
    except Refused:
        error = HttpError(401, "unauthorized", "Login failed", CHALLENGE)
        error.delay = broker.connection_refused(record, name, "bad user name or password")
        raise error from None
    setattr(request, _USER, name)
    broker.connection_logged_in(record, name, how="HTTP Basic")
    return name


def user_of(request: server.Request) -> str:
    """The user ``authenticate`` let in for this request."""
    name: str = getattr(request, _USER)
    return name


def require(request: server.Request, broker: Broker, action: Action, resource: Resource | None = None) -> str:
    """The request's user, if it may ``action`` (a tag's action such as "manage", or a
    permission on ``resource``); HttpError 401 / 403 otherwise."""
    user = authenticate(request, broker)
    try:
        broker.authorize(user, action, resource or Resource(""))
    except Refused as exc:
        raise HttpError(403, "forbidden", str(exc)) from None
    return user


def allowed(request: server.Request, broker: Broker, action: Action, resource: Resource | None = None) -> bool:
    """Whether the request's (authenticated) user may ``action``: for what a handler
    shows or does differently, not to refuse."""
    try:
        broker.authorize(user_of(request), action, resource or Resource(""))
    except Refused:
        return False
    return True


def require_topic(request: server.Request, broker: Broker, action: Perm, topic: str,
                  key: str | None = None) -> str:
    """``require`` on the exchange a log topic stands for (``Broker.authorize_topic``)."""
    user = authenticate(request, broker)
    try:
        broker.authorize_topic(user, action, topic, key)
    except Refused as exc:
        raise HttpError(403, "forbidden", str(exc)) from None
    return user
