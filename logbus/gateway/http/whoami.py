"""GET /api/whoami: 200 ``{"name": user, "tags": [...]}``, the user the request's
credentials name (RabbitMQ's endpoint of that name); 401 without valid ones."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.web import server

from .credentials import user_of
from .resource import ApiResource
from .responses import Response

if TYPE_CHECKING:
    from ...core.ports import Admin


class WhoAmI(ApiResource):
    isLeaf = True

    def __init__(self, admin: Admin) -> None:
        super().__init__()
        self.admin = admin

    def handle_GET(self, request: server.Request) -> Response:
        name = user_of(request)
        user = self.admin.find_user(name)
        return Response.json(200, {"name": name, "tags": list(user.tags) if user else []})
