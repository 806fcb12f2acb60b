"""GET /metrics: the broker's Prometheus registry in the text format the scraper asks for
(classic text 0.0.4 by default, OpenMetrics when the Accept header prefers it). Open,
as RabbitMQ's Prometheus endpoint, unless the ``http_metrics_auth`` setting asks for the
credentials of a user with the ``monitoring`` (or ``administrator``) tag."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from twisted.web import server

from ...core.types import Action
from .resource import ApiResource
from .responses import Response


class Metrics(ApiResource):
    isLeaf = True

    def __init__(self, registry: CollectorRegistry, authenticated: bool = False) -> None:
        super().__init__()
        self.registry = registry
        self.public = not authenticated
        self.needs: Action | None = "monitor" if authenticated else None

    def handle_GET(self, request: server.Request) -> Response:
        accept = (request.getHeader(b"Accept") or b"").decode("latin-1")
        encode, content_type = choose_encoder(accept)
        return Response(200, encode(self.registry), content_type)
