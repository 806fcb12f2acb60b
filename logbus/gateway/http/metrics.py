"""GET /metrics: the broker's Prometheus registry in the text format the scraper asks for
(classic text 0.0.4 by default, OpenMetrics when the Accept header prefers it)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from twisted.web import server

from .resource import ApiResource
from .responses import Response


class Metrics(ApiResource):
    isLeaf = True

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__()
        self.registry = registry

    def handle_GET(self, request: server.Request) -> Response:
        accept = (request.getHeader(b"Accept") or b"").decode("latin-1")
        encode, content_type = choose_encoder(accept)
        return Response(200, encode(self.registry), content_type)
