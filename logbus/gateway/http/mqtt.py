"""MQTT clients and sessions (administrators only: auth.py), over the broker's MQTT room.

    GET    /api/mqtt/clients              200 [session, ...]: the connected ones
    GET    /api/mqtt/sessions             200 [session, ...]: all, connected or kept offline
    DELETE /api/mqtt/clients/<id>         204: the client is disconnected (MQTT 5: DISCONNECT
                                          0x98 Administrative action) | 404 not connected
    DELETE /api/mqtt/sessions/<id>        204: the session ends, its queued messages and
                                          subscriptions with it (a connected client is
                                          disconnected first) | 404 no such session

A session is ``{"client_id", "user", "connected", "peer", "protocol", "clean",
"expiry_interval", "subscriptions": [{"filter", "qos"}, ...], "queued", "in_flight"}``.
``<id>`` is one URL-encoded path segment: a client id may hold any character (``/`` is
``%2F``). With no MQTT listener (``--mqtt`` and ``--mqtt-ws`` off) the broker has no MQTT
room and every path here is 404, saying so.

The room is the MQTT gateway's, which the server hands the Admin service
(``admin.client_sessions["mqtt"]``); this module knows it only as the port
``ClientSessions``, so the HTTP gateway does not import the MQTT one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.web import resource, server

from ...core.types import Action
from .auth import AdminResource, path_name
from .responses import HttpError, Response

if TYPE_CHECKING:
    from ...core.ports import Admin, ClientSessions
    from .services import Services

ROOM = "mqtt"


def mqtt_room(admin: Admin) -> ClientSessions:
    """The broker's MQTT room, or 404 when no MQTT listener built one."""
    room = admin.client_sessions.get(ROOM)
    if room is None:
        raise HttpError(404, "not_found", "the MQTT listener is off: this broker has no MQTT clients"
                                          " or sessions (start it with --mqtt EP or --mqtt-ws EP)")
    return room


class MqttClients(AdminResource):
    needs: Action | None = "monitor"  # the listing; MqttOne (a kick) is an administrator's

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self  # /api/mqtt/clients/
        return MqttOne(self.services, path, "kick", "unknown_client", "no MQTT client {!r} is connected")

    def handle_GET(self, request: server.Request) -> Response:
        return Response.json(200, [s for s in mqtt_room(self.admin).describe() if s["connected"]])


class MqttSessions(AdminResource):
    needs: Action | None = "monitor"

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self  # /api/mqtt/sessions/
        return MqttOne(self.services, path, "delete_session", "unknown_session",
                       "no MQTT session of client {!r}")

    def handle_GET(self, request: server.Request) -> Response:
        return Response.json(200, mqtt_room(self.admin).describe())


class MqttOne(AdminResource):
    """/api/mqtt/clients/<id> or /api/mqtt/sessions/<id>: DELETE calls the room's
    ``action`` (kick or delete_session) for that client, 404 ``code`` when it finds none."""

    isLeaf = True

    def __init__(self, services: Services, raw_id: bytes, action: str, code: str,
                 missing: str) -> None:
        super().__init__(services)
        self.raw_id = raw_id
        self.action, self.code, self.missing = action, code, missing

    def handle_DELETE(self, request: server.Request) -> Response:
        client_id = path_name(self.raw_id, "MQTT client")
        done: bool = getattr(mqtt_room(self.admin), self.action)(client_id)
        if not done:
            raise HttpError(404, self.code, self.missing.format(client_id))
        return Response.empty(204)
