"""AMQP channels, as RabbitMQ's management API lists them (``Topology.channels``): a
``management`` user sees its own connections' channels, ``monitoring`` every one.

    GET /api/channels   200 [{"name", "number", "user", "vhost", "connection", "connection_name",
                              "peer", "consumer_count", "prefetch_count", "global_prefetch_count",
                              "messages_unacknowledged", "confirm", "transactional", "flow",
                              "message_stats": {"deliver_get", "deliver_get_details": {"rate"},
                                                "publish" (confirm mode only)}}, ...]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.web import server

from ...core.types import Action
from .auth import AdminResource
from .credentials import allowed, user_of
from .rates import ReadRates, with_details
from .responses import Response

if TYPE_CHECKING:
    from .services import Services


def visible_channels(request: server.Request, services: Services, reads: ReadRates | None) -> list[dict[str, Any]]:
    """The channels the request's user sees, with their delivery rates when ``reads``."""
    rows = services.topology.channels()
    if not allowed(request, services.doors, "monitor"):
        user = user_of(request)
        rows = [c for c in rows if c["user"] == user]
    if reads is not None:
        for c in rows:
            stats = {"deliver_get": c["message_stats"]["deliver_get"]}
            rates = reads.rates(("channel", c["connection"], c["number"]), stats)
            c["message_stats"] = {**with_details(stats, rates), "publish": c["message_stats"]["publish"]}
    return rows


class Channels(AdminResource):
    isLeaf = True
    needs: Action | None = "manage"

    def __init__(self, services: Services, reads: ReadRates | None = None) -> None:
        super().__init__(services)
        self.reads = reads

    def handle_GET(self, request: server.Request) -> Response:
        return Response.json(200, visible_channels(request, self.services, self.reads))
