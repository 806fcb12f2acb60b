"""Client connections of every protocol (administrators only: auth.py), from the broker's
connection registry (``Broker.list_connections``).

    GET    /api/connections               200 [connection, ...], oldest first
    GET    /api/connections?protocol=P    only those of P (amqp, mqtt, kafka, http)
    DELETE /api/connections/<id>          204: closed in its protocol's terms (AMQP: 320
                                          CONNECTION_FORCED; MQTT 5: DISCONNECT 0x98)
                                          | 404 no such connection

A connection is ``{"id", "protocol", "peer", "tls", "opened_ms", "user", "vhost",
"client_id", "received", "sent", "bytes_in"}``: ``received`` and ``sent`` count messages
(publishes from the client, deliveries to it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.web import resource, server

from .auth import AdminResource
from .responses import HttpError, Response

if TYPE_CHECKING:
    from ...core.broker import Broker

PROTOCOLS = ("amqp", "mqtt", "kafka", "http")


class Connections(AdminResource):
    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self
        return OneConnection(self.broker, path)

    def handle_GET(self, request: server.Request) -> Response:
        args: dict[bytes, list[bytes]] = request.args or {}
        raw = args.get(b"protocol")
        protocol = raw[0].decode("utf-8", "replace") if raw else None
        if protocol is not None and protocol not in PROTOCOLS:
            raise HttpError(400, "bad_request", f"protocol must be one of {', '.join(PROTOCOLS)}")
        records = sorted(self.broker.list_connections(protocol), key=lambda c: c.id)
        return Response.json(200, [c.to_json() for c in records])


class OneConnection(AdminResource):
    isLeaf = True

    def __init__(self, broker: Broker, raw_id: bytes) -> None:
        super().__init__(broker)
        self.raw_id = raw_id

    def handle_DELETE(self, request: server.Request) -> Response:
        try:
            id = int(self.raw_id)
        except ValueError:
            raise HttpError(404, "unknown_connection", f"no connection {self.raw_id!r}") from None
        if not self.broker.close_connection(id):
            raise HttpError(404, "unknown_connection", f"no connection {id}")
        return Response.empty(204)
