"""GET /api/whoami: 200 ``{"name": user, "tags": [...]}``, the user the request's
credentials name (RabbitMQ's endpoint of that name); 401 without valid ones."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.web import server

from .credentials import user_of
from .resource import ApiResource
from .responses import Response

if TYPE_CHECKING:
    from ...core.broker import Broker


class WhoAmI(ApiResource):
    isLeaf = True

    def __init__(self, broker: Broker) -> None:
        super().__init__()
        self.broker = broker

    def handle_GET(self, request: server.Request) -> Response:
        name = user_of(request)
        user = self.broker.access.users.get(name)
        return Response.json(200, {"name": name, "tags": list(user.tags) if user else []})
