"""GET /metrics: the broker's Prometheus registry in the text format the scraper asks for
(classic text 0.0.4 by default, OpenMetrics when the Accept header prefers it). Open,
as RabbitMQ's Prometheus endpoint, unless the ``http_metrics_auth`` setting asks for the
credentials of a user with the ``monitoring`` (or ``administrator``) tag."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from twisted.web import server

from ...core.types import Action
from .resource import ApiResource, NotFound
from .responses import Response


class Metrics(ApiResource):
    """``/metrics`` (bounded series, aggregated per protocol or queue kind) and, with
    ``per_object``, ``/metrics/per-object`` (one series per queue and group partition),
    as RabbitMQ's Prometheus plugin splits them."""

    def __init__(self, registry: CollectorRegistry, authenticated: bool = False,
                 per_object: CollectorRegistry | None = None) -> None:
        super().__init__()
        self.registry = registry
        self.public = not authenticated
        self.needs: Action | None = "monitor" if authenticated else None
        self.per_object = per_object

    def getChild(self, path: bytes, request: server.Request) -> Any:
        if path == b"":
            return self
        if path == b"per-object" and self.per_object is not None:
            return Metrics(self.per_object, not self.public)
        return NotFound()

    def handle_GET(self, request: server.Request) -> Response:
        accept = (request.getHeader(b"Accept") or b"").decode("latin-1")
        encode, content_type = choose_encoder(accept)
        return Response(200, encode(self.registry), content_type)
