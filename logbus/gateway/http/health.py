"""GET /healthz: 200 ``{"status": "ok"}`` while the broker serves."""

from __future__ import annotations

from twisted.web import server

from .resource import ApiResource
from .responses import Response


class Health(ApiResource):
    isLeaf = True

    def handle_GET(self, request: server.Request) -> Response:
        return Response.json(200, {"status": "ok"})
