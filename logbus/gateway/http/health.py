"""GET /healthz: 200 ``{"status": "ok"}`` while the broker serves as it should; 503
``{"status": "failing", "reasons": [...]}`` while it does not (a partition or the state
store refusing writes, a resource alarm, a listener down: ``Admin.health``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.web import server

from .resource import ApiResource
from .responses import Response

if TYPE_CHECKING:
    from ...core.ports import Admin


class Health(ApiResource):
    isLeaf = True
    public = True  # what a load balancer or an orchestrator asks, without credentials

    def __init__(self, admin: Admin) -> None:
        super().__init__()
        self.admin = admin

    def handle_GET(self, request: server.Request) -> Response:
        reasons = self.admin.health()
        if reasons:
            return Response.json(503, {"status": "failing", "reasons": reasons})
        return Response.json(200, {"status": "ok"})
