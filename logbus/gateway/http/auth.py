"""HTTP Basic authentication of the management API, as RabbitMQ's management plugin:
the user must exist, give its password, be allowed from where it connects
(``loopback_users``) and carry the ``administrator`` tag.

    401 + ``WWW-Authenticate: Basic realm="logbus"``   no credentials, or wrong ones
    403                                               a valid user without the tag

``AdminResource`` is an ApiResource that asks for this before any handler runs. The other
endpoints (/api/topics, /api/limits, /metrics, /healthz) ask for no authentication.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from typing import TYPE_CHECKING

from twisted.web import server

from .resource import ApiResource
from .responses import HttpError

from ...core.errors import LoopbackOnly, Refused
from ...core.types import Resource

if TYPE_CHECKING:
    from ...core.broker import Broker

REALM = 'Basic realm="logbus"'
CHALLENGE = (("WWW-Authenticate", REALM),)


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


def _loopback(request: server.Request) -> bool:
    host = getattr(request.getClientAddress(), "host", "")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_admin(request: server.Request, broker: Broker) -> str:
    """The authenticated administrator's name, or HttpError 401 / 403."""
    credentials = basic_credentials(request)
    if credentials is None:
        raise HttpError(401, "unauthorized", "HTTP Basic credentials of an administrator are required",
                        CHALLENGE)
    name, password = credentials
    try:
        broker.authenticate(name, password, loopback=_loopback(request))
    except LoopbackOnly:
        raise HttpError(401, "unauthorized", f"user '{name}' can only connect via localhost", CHALLENGE) from None
    except Refused:
        raise HttpError(401, "unauthorized", "Login failed", CHALLENGE) from None
    try:
        broker.authorize(name, "administer", Resource(""))
    except Refused:
        raise HttpError(403, "forbidden", "Not administrator user") from None
    return name


class AdminResource(ApiResource):
    """A management resource: only an administrator may use it."""

    def __init__(self, broker: Broker) -> None:
        super().__init__()
        self.broker = broker

    def authorize(self, request: server.Request) -> None:
        require_admin(request, self.broker)


def path_name(raw: bytes, what: str) -> str:
    """One URL path segment (already percent-decoded by twisted.web) as text, or 400."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise HttpError(400, "bad_request", f"{what} name {raw!r} is not UTF-8") from None
