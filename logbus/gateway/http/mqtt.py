"""MQTT clients, sessions and retained messages, over the broker's MQTT room: listed
with the ``monitoring`` tag, changed by an ``administrator`` (auth.py).

    GET    /api/mqtt/clients              200 [session, ...]: the connected ones
    GET    /api/mqtt/sessions             200 [session, ...]: all, connected or kept offline
    DELETE /api/mqtt/clients/<id>         204: the client is disconnected (MQTT 5: DISCONNECT
                                          0x98 Administrative action) | 404 not connected
    DELETE /api/mqtt/sessions/<id>        204: the session ends, its queued messages and
                                          subscriptions with it (a connected client is
                                          disconnected first) | 404 no such session
    GET    /api/mqtt/retained[?topic=F&limit=N]
                                          200 [retained message, ...]: the first N (100;
                                          at most 1000) whose topic the MQTT filter F
                                          matches (none: every topic, "$" ones too), in
                                          topic order level by level | 400 F is no filter
    DELETE /api/mqtt/retained/<topic>     204: the topic's retained message is forgotten, as
                                          a client's empty retained PUBLISH to it does, and
                                          synced to disk; new subscribers get none (nothing
                                          is sent to current ones) | 404 none there

A session is ``{"client_id", "user", "connected", "peer", "protocol", "clean",
"expiry_interval", "subscriptions": [{"filter", "qos"}, ...], "queued", "in_flight"}``;
a connected one's also says its connection's ``"keep_alive"`` (what its CONNECT got, in
seconds), ``"connection"`` (its id), ``"connected_at"``, ``"received"`` and ``"sent"``
(messages), as ``/api/connections`` shows them.
A retained message is ``{"topic", "qos", "payload", "payload_encoding", "payload_bytes",
"payload_truncated", "stored_at", "stored_ms", "expires_at"}`` (``RetainedStore.to_json``:
the payload's first 1024 bytes). ``<id>`` and ``<topic>`` are one URL-encoded path segment:
a client id may hold any character, a topic ``/`` (``%2F``). With no MQTT listener
(``--mqtt`` and ``--mqtt-ws`` off) the broker has no MQTT room and every path here is 404,
saying so.

``retained`` and ``delete_retained`` are the checks and calls the web console's MQTT page
makes too (console/pages/mqtt.py), as topology.py is for exchanges and queues.

The room is the MQTT gateway's, which the server hands the Admin service
(``admin.client_sessions["mqtt"]``); this module knows it only as the port
``ClientSessions``, so the HTTP gateway does not import the MQTT one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.web import resource, server

from ...core.types import Action
from .auth import AdminResource, path_name
from .credentials import require
from .responses import HttpError, Response

if TYPE_CHECKING:
    from ...core.ports import Admin, ClientSessions
    from .services import Services

ROOM = "mqtt"
RETAINED_LIMIT, RETAINED_MAX = 100, 1000  # retained messages listed: by default, at most


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


# -- retained messages: the API's and the console's checks and calls --------------------------


def retained(request: server.Request, services: Services, topic_filter: str | None = None,
             limit: int = RETAINED_LIMIT) -> list[dict[str, Any]]:
    """The retained messages ``topic_filter`` matches (None: all), the first ``limit``:
    ``monitoring``, as the other MQTT listings. 400 when it is no MQTT topic filter."""
    require(request, services.doors, "monitor")
    if not 1 <= limit <= RETAINED_MAX:
        raise HttpError(400, "bad_request", f"limit must be 1 to {RETAINED_MAX}")
    return mqtt_room(services.admin).retained_messages(topic_filter, limit)


def delete_retained(request: server.Request, services: Services, topic: str) -> None:
    """Forget ``topic``'s retained message: an ``administrator``'s, as an MQTT kick.
    404 when it holds none."""
    require(request, services.doors, "administer")
    if not mqtt_room(services.admin).delete_retained(topic):
        raise HttpError(404, "unknown_retained", f"no retained message on MQTT topic {topic!r}")


class MqttRetained(AdminResource):
    """/api/mqtt/retained[?topic=F&limit=N]; /api/mqtt/retained/<topic>: MqttRetainedOne."""

    needs: Action | None = "monitor"

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self  # /api/mqtt/retained/
        return MqttRetainedOne(self.services, path)

    def handle_GET(self, request: server.Request) -> Response:
        args: dict[bytes, list[bytes]] = request.args or {}
        topic_filter = path_name(args[b"topic"][-1], "MQTT topic filter") if args.get(b"topic") else ""
        try:
            limit = int(args[b"limit"][-1]) if args.get(b"limit") else RETAINED_LIMIT
        except ValueError:
            raise HttpError(400, "bad_request", f"limit must be 1 to {RETAINED_MAX}") from None
        return Response.json(200, retained(request, self.services, topic_filter or None, limit))


class MqttRetainedOne(AdminResource):
    """/api/mqtt/retained/<topic>: DELETE forgets its retained message."""

    isLeaf = True

    def __init__(self, services: Services, raw_topic: bytes) -> None:
        super().__init__(services)
        self.raw_topic = raw_topic

    def handle_DELETE(self, request: server.Request) -> Response:
        delete_retained(request, self.services, path_name(self.raw_topic, "MQTT topic"))
        return Response.empty(204)
