"""Client connections of every protocol, from the broker's connection registry
(``Admin.list_connections``). As RabbitMQ's management API: a user with the
``management`` tag sees and may close its own connections, ``monitoring`` sees every
one, an administrator may close any.

    GET    /api/connections               200 [connection, ...], oldest first
    GET    /api/connections?protocol=P    only those of P (amqp, mqtt, kafka, http)
    DELETE /api/connections/<id>          204: closed in its protocol's terms (AMQP: 320
                                          CONNECTION_FORCED; MQTT 5: DISCONNECT 0x98)
                                          | 404 no such connection

A connection is ``{"id", "protocol", "peer", "tls", "opened_ms", "connected_at", "user",
"vhost", "client_id", "client_product", "client_version", "received", "sent", "bytes_in",
"bytes_out"}``: ``connected_at`` is ``opened_ms`` as a UTC ISO 8601 time; ``client_id`` the
name the client gave (AMQP ``connection_name``, MQTT client id, Kafka ``client.id``);
``client_product`` and ``client_version`` its software where the protocol says (AMQP
client properties ``product`` and ``version``, Kafka ApiVersions v3+
``client_software_name`` and ``_version``); ``received`` and ``sent`` count messages
(publishes from the client; deliveries to it, a Kafka consumer's fetched records).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.web import resource, server

from ...core.types import Action, ConnectionRecord
from .auth import AdminResource
from .credentials import allowed, user_of
from .rates import ReadRates
from .responses import HttpError, Response

if TYPE_CHECKING:
    from .services import Services

PROTOCOLS = ("amqp", "mqtt", "kafka", "http")


def connection_rates(reads: ReadRates, c: ConnectionRecord) -> dict[str, float]:
    """A connection's messages and bytes per second, differenced between reads (rates.py)."""
    return reads.rates(("connection", c.id), {"received": c.received, "sent": c.sent, "bytes_in": c.bytes_in,
                                              "bytes_out": c.bytes_out})


def connection_json(c: ConnectionRecord, reads: ReadRates | None) -> dict[str, Any]:
    """A connection as the API answers it: with ``<counter>_details`` rates when ``reads``."""
    j: dict[str, Any] = c.to_json()
    if reads is not None:
        for k, r in connection_rates(reads, c).items():
            j[f"{k}_details"] = {"rate": r}
    return j


class Connections(AdminResource):
    needs: Action | None = "manage"

    def __init__(self, services: Services, reads: ReadRates | None = None) -> None:
        super().__init__(services)
        self.reads = reads  # rates differenced between reads (rates.py)

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self
        return OneConnection(self.services, path)

    def handle_GET(self, request: server.Request) -> Response:
        args: dict[bytes, list[bytes]] = request.args or {}
        raw = args.get(b"protocol")
        protocol = raw[0].decode("utf-8", "replace") if raw else None
        if protocol is not None and protocol not in PROTOCOLS:
            raise HttpError(400, "bad_request", f"protocol must be one of {', '.join(PROTOCOLS)}")
        records = sorted(self.admin.list_connections(protocol), key=lambda c: c.id)
        if not allowed(request, self.doors, "monitor"):
            user = user_of(request)
            records = [c for c in records if c.user == user]
        return Response.json(200, [connection_json(c, self.reads) for c in records])


class OneConnection(AdminResource):
    isLeaf = True
    needs: Action | None = "manage"

    def __init__(self, services: Services, raw_id: bytes) -> None:
        super().__init__(services)
        self.raw_id = raw_id

    def handle_DELETE(self, request: server.Request) -> Response:
        try:
            id = int(self.raw_id)
        except ValueError:
            raise HttpError(404, "unknown_connection", f"no connection {self.raw_id!r}") from None
        if not allowed(request, self.doors, "administer"):
            user = user_of(request)
            own = [c for c in self.admin.list_connections() if c.id == id and c.user == user]
            if not own:
                raise HttpError(403, "forbidden", f"user '{user}' may close only its own connections")
        if not self.admin.close_connection(id):
            raise HttpError(404, "unknown_connection", f"no connection {id}")
        return Response.empty(204)
