"""Exchanges and bindings of each vhost, as RabbitMQ's management API has them. A
``management`` user sees the vhosts it has a permission in (``monitoring``: all); a change
asks the permissions of the AMQP method it stands for (topology.py).

    GET    /api/exchanges[/<vhost>]       200 [{"name", "vhost", "type", "durable", "auto_delete",
                                                "internal", "arguments", "delayed", "topic"}, ...]
    GET    /api/exchanges/<vhost>/<name>  200 exchange | 404
    PUT    /api/exchanges/<vhost>/<name>  201 declared, 204 it was there; body {"type",
                                          "durable", "auto_delete", "internal", "arguments"}
    DELETE /api/exchanges/<vhost>/<name>[?if-unused=true]  204
    POST   /api/exchanges/<vhost>/<name>/publish  200 {"routed": bool} once durable; body
                                          {"routing_key", "payload", "payload_encoding":
                                          "string" | "base64", "properties": {...}}
    GET    /api/exchanges/<vhost>/<name>/bindings/source | destination   200 [binding, ...]
    GET    /api/bindings[/<vhost>]        200 [{"source", "vhost", "destination", "destination_type",
                                                "routing_key", "arguments", "filter",
                                                "properties_key"}, ...]
    GET    /api/bindings/<vhost>/e/<source>/q/<queue>   200 [binding, ...] between the two
    POST   /api/bindings/<vhost>/e/<source>/q/<queue>   201, Location: the binding's path;
                                          body {"routing_key", "arguments"}
    GET    /api/bindings/<vhost>/e/<source>/q/<queue>/<properties_key>   200 binding | 404
    DELETE /api/bindings/<vhost>/e/<source>/q/<queue>/<properties_key>   204
    (``/e/<destination>`` instead of ``/q/<queue>``: a binding between two exchanges)

An exchange's ``message_stats`` has ``publish_in``, the messages appended to its log topic
since start (routed or not), with ``publish_in_details: {"rate"}`` differenced between reads.
``topic`` is the log topic an exchange appends to; ``filter`` a binding's message filter
(docs/filters.md), or null. The default exchange is ``amq.default`` in a path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.web import resource, server

from ...core.types import Action
from . import topology
from .alarms import AlarmGate
from .auth import AdminResource, path_name
from .credentials import user_of
from .rates import ReadRates, with_details
from .request import query_flag, read_json, request_body
from .responses import HttpError, Response

if TYPE_CHECKING:
    from ...core.ports import Admin
    from .services import Services


class Listing(AdminResource):
    """``/api/<what>`` and ``/api/<what>/<vhost>``."""

    needs: Action | None = "manage"

    def __init__(self, services: Services, what: str, vhost: str | None = None, gate: AlarmGate | None = None,
                 reads: ReadRates | None = None) -> None:
        super().__init__(services)
        self.what, self.vhost = what, vhost
        self.reads = reads  # rates differenced between reads (rates.py)
        # one per site (it follows the broker's alarms): a publish is refused while one is set
        self.gate = gate if gate is not None or what != "exchanges" else AlarmGate(services.doors, services.metrics)

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self
        if self.vhost is None:
            return Listing(self.services, self.what, path_name(path, "vhost"), self.gate, self.reads)
        if self.gate is not None:
            return OneExchange(self.services, self.gate, self.vhost, exchange_name(path), reads=self.reads)
        if path != b"e":
            raise _not_found(request)
        return BindingPath(self.services, self.vhost, [])

    def handle_GET(self, request: server.Request) -> Response:
        if self.vhost is not None and not self.admin.has_vhost(self.vhost):
            raise HttpError(404, "not_found", f"no vhost '{self.vhost}'")
        if self.what == "exchanges":
            rows = with_stats(self.admin, self.admin.list_exchanges(self.vhost), self.reads)
        else:
            rows = [topology.with_key(b) for b in self.admin.list_bindings(self.vhost)]
        user = user_of(request)
        return Response.json(200, [r for r in rows if self.doors.sees_vhost(user, r["vhost"])])


def _not_found(request: server.Request) -> HttpError:
    return HttpError(404, "not_found", f"no such resource: {request.uri.decode('latin-1', 'replace')}")


def with_stats(admin: Admin, rows: list[dict[str, Any]], reads: ReadRates | None) -> list[dict[str, Any]]:
    """Exchanges with RabbitMQ's ``message_stats.publish_in`` (messages appended to each
    one's log topic since start) and, with ``reads``, its rate differenced between reads."""
    if reads is None:
        return rows
    appended = admin.topic_append_counts()
    out = []
    for row in rows:
        stats = {"publish_in": appended.get(row["topic"], 0)}
        out.append({**row, "message_stats": with_details(stats, reads.rates(("exchange", row["topic"]), stats))})
    return out


def exchange_name(raw: bytes) -> str:
    """An exchange's name in a path: ``amq.default`` is the default exchange ("")."""
    name = path_name(raw, "exchange")
    return "" if name == "amq.default" else name


def _body(request: server.Request) -> dict[str, Any]:
    if not request_body(request).strip():
        return {}
    body = read_json(request)
    if not isinstance(body, dict):
        raise HttpError(400, "bad_request", "request body must be a JSON object")
    return body


class OneExchange(AdminResource):
    """``/api/exchanges/<vhost>/<name>[/publish | /bindings/source | /bindings/destination]``."""

    needs: Action | None = "manage"

    def __init__(self, services: Services, gate: AlarmGate, vhost: str, name: str, action: str = "",
                 reads: ReadRates | None = None) -> None:
        super().__init__(services)
        self.vhost, self.name, self.action = vhost, name, action
        self.gate = gate
        self.reads = reads

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"" and not self.action:
            return self
        if not self.action and path in (b"publish", b"bindings"):
            return OneExchange(self.services, self.gate, self.vhost, self.name, path.decode())
        if self.action == "bindings" and path in (b"source", b"destination"):
            return OneExchange(self.services, self.gate, self.vhost, self.name, "bindings/" + path.decode())
        raise _not_found(request)

    def _row(self, request: server.Request) -> dict[str, Any]:
        if not self.admin.has_vhost(self.vhost) or not self.doors.sees_vhost(user_of(request), self.vhost):
            raise HttpError(404, "not_found", f"no vhost '{self.vhost}'")
        for row in self.admin.list_exchanges(self.vhost):
            if row["name"] == self.name:
                return row
        raise HttpError(404, "not_found", f"no exchange '{self.name}' in vhost '{self.vhost}'")

    def handle_GET(self, request: server.Request) -> Response:
        if self.action in ("", "publish"):
            if self.action:
                raise HttpError(405, "method_not_allowed", "POST a message to .../publish")
            return Response.json(200, with_stats(self.admin, [self._row(request)], self.reads)[0])
        self._row(request)
        end = "source" if self.action == "bindings/source" else "destination"
        return Response.json(200, [topology.with_key(b) for b in self.admin.list_bindings(self.vhost)
                                   if b[end] == self.name and (end == "source" or b["destination_type"] == "exchange")])

    def handle_PUT(self, request: server.Request) -> Response:
        if self.action:
            raise HttpError(405, "method_not_allowed", f"PUT is not allowed on .../{self.action}")
        new = topology.declare_exchange(request, self.services, self.vhost, self.name, _body(request))
        return Response.empty(201 if new else 204)

    def handle_DELETE(self, request: server.Request) -> Response:
        if self.action:
            raise HttpError(405, "method_not_allowed", f"DELETE is not allowed on .../{self.action}")
        topology.delete_exchange(request, self.services, self.vhost, self.name,
                                 if_unused=query_flag(request, "if-unused"))
        return Response.empty(204)

    def handle_POST(self, request: server.Request) -> Deferred[Response]:
        if self.action != "publish":
            raise HttpError(405, "method_not_allowed", "POST is allowed on .../publish only")
        self.gate.check()
        d = topology.publish(request, self.services, self.vhost, self.name, _body(request))
        record = getattr(request.channel, "record", None)  # the connection's, in the registry

        def published(routed: bool) -> Response:
            if record is not None:
                record.received += 1
                record.confirmed += 1
            return Response.json(200, {"routed": routed})

        return d.addCallback(published)


class BindingPath(AdminResource):
    """``/api/bindings/<vhost>/e/<source>/q|e/<destination>[/<properties_key>]``, read a
    segment at a time."""

    needs: Action | None = "manage"
    isLeaf = False

    def __init__(self, services: Services, vhost: str, parts: list[str]) -> None:
        super().__init__(services)
        self.vhost, self.parts = vhost, parts

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        parts = self.parts
        if path == b"" and len(parts) in (3, 4):
            return self
        if len(parts) == 0:
            return BindingPath(self.services, self.vhost, [exchange_name(path)])
        if len(parts) == 1 and path in (b"q", b"e"):
            return BindingPath(self.services, self.vhost, [*parts, "queue" if path == b"q" else "exchange"])
        if len(parts) == 2:
            name = exchange_name(path) if parts[1] == "exchange" else path_name(path, "queue")
            return BindingPath(self.services, self.vhost, [*parts, name])
        if len(parts) == 3:
            return BindingPath(self.services, self.vhost, [*parts, path_name(path, "binding")])
        raise _not_found(request)

    def _ends(self, request: server.Request) -> tuple[str, str, str]:
        if len(self.parts) < 3:
            raise _not_found(request)
        if not self.admin.has_vhost(self.vhost) or not self.doors.sees_vhost(user_of(request), self.vhost):
            raise HttpError(404, "not_found", f"no vhost '{self.vhost}'")
        source, kind, destination = self.parts[:3]
        return source, kind, destination

    def handle_GET(self, request: server.Request) -> Response:
        source, kind, destination = self._ends(request)
        rows = topology.bindings_between(self.services, self.vhost, source, kind, destination)
        if len(self.parts) == 3:
            return Response.json(200, rows)
        for row in rows:
            if row["properties_key"] == self.parts[3]:
                return Response.json(200, row)
        raise HttpError(404, "not_found", f"no binding {self.parts[3]!r} from '{source}' to {kind} '{destination}'")

    def handle_POST(self, request: server.Request) -> Response:
        source, kind, destination = self._ends(request)
        if len(self.parts) != 3:
            raise HttpError(405, "method_not_allowed", "POST a binding to .../e/<source>/q|e/<destination>")
        key = topology.bind(request, self.services, self.vhost, source, kind, destination, _body(request))
        location = topology.binding_path(self.vhost, source, kind, destination, key)
        return Response.json(201, {"properties_key": key}, headers=(("Location", location),))

    def handle_DELETE(self, request: server.Request) -> Response:
        source, kind, destination = self._ends(request)
        if len(self.parts) != 4:
            raise HttpError(405, "method_not_allowed", "DELETE a binding at .../<properties_key>")
        topology.unbind(request, self.services, self.vhost, source, kind, destination, self.parts[3])
        return Response.empty(204)
