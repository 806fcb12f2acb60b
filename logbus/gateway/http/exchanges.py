"""Exchanges and bindings of each vhost, as RabbitMQ's management API lists them (read
only: they are declared over AMQP). A ``management`` user sees the vhosts it has a
permission in (``monitoring``: all).

    GET /api/exchanges[/<vhost>]   200 [{"name", "vhost", "type", "durable", "auto_delete",
                                         "internal", "arguments", "delayed", "topic"}, ...]
    GET /api/bindings[/<vhost>]    200 [{"source", "vhost", "destination", "destination_type",
                                         "routing_key", "arguments", "filter"}, ...]

``topic`` is the log topic an exchange appends to; ``filter`` a binding's message filter
(docs/filters.md), or null.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.web import resource, server

from ...core.types import Action
from .auth import AdminResource, path_name
from .credentials import user_of
from .responses import HttpError, Response

if TYPE_CHECKING:
    from .services import Services


class Listing(AdminResource):
    """``/api/<what>`` and ``/api/<what>/<vhost>``."""

    needs: Action | None = "manage"

    def __init__(self, services: Services, what: str, vhost: str | None = None) -> None:
        super().__init__(services)
        self.what, self.vhost = what, vhost

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self
        if self.vhost is not None:
            raise HttpError(404, "not_found", f"no such resource: {request.uri.decode('latin-1', 'replace')}")
        return Listing(self.services, self.what, path_name(path, "vhost"))

    def handle_GET(self, request: server.Request) -> Response:
        if self.vhost is not None and not self.admin.has_vhost(self.vhost):
            raise HttpError(404, "not_found", f"no vhost '{self.vhost}'")
        rows = (self.admin.list_exchanges if self.what == "exchanges" else self.admin.list_bindings)(self.vhost)
        user = user_of(request)
        return Response.json(200, [r for r in rows if self.doors.sees_vhost(user, r["vhost"])])
