"""Topic permissions, as RabbitMQ's management API has them (administrators only: auth.py).

    GET    /api/topic-permissions                  200 [{"user", "vhost", "exchange", "write", "read"}, ...]
    GET    /api/topic-permissions/<vhost>/<user>   200 the user's, one per exchange | 404
    PUT    /api/topic-permissions/<vhost>/<user>   201 created | 204 updated
                                                   body {"exchange": "amq.topic", "write": "^a\\.", "read": ".*"}
    DELETE /api/topic-permissions/<vhost>/<user>   204 (all of the user's in the vhost;
                                                   ?exchange=X only that one's) | 404

Names are URL-encoded (``%2F`` is vhost ``/``). ``write`` and ``read`` are regular
expressions searched in routing keys and binding keys of the exchange, with
``{username}``, ``{vhost}`` and ``{client_id}`` expanded (core/access/topic_permissions.py);
one that does not compile is 400, an unknown user or vhost 404. MQTT clients are held to
those on ``amq.topic`` from their next PUBLISH or SUBSCRIBE.
"""

from __future__ import annotations

from twisted.web import resource, server

from .auth import AdminResource
from .permissions import PermissionResource, VHostPermissions
from .request import json_object, read_json
from .responses import HttpError, Response

FIELDS = ("user", "vhost", "exchange", "write", "read")


class TopicPermissions(AdminResource):
    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self
        return VHostPermissions(self.services, path, TopicPermissionResource)

    def handle_GET(self, request: server.Request) -> Response:
        return Response.json(200, [tp.to_json() for tp in self.admin.list_topic_permissions()])


class TopicPermissionResource(PermissionResource):
    """/api/topic-permissions/<vhost>/<user>: the user's topic permissions there."""

    def handle_GET(self, request: server.Request) -> Response:
        vhost, user = self.names()
        admin = self.admin
        admin.vhost_info(vhost)
        admin.user(user)
        found = [tp.to_json() for tp in admin.list_topic_permissions() if (tp.user, tp.vhost) == (user, vhost)]
        if not found:
            raise HttpError(404, "not_found", f"no topic permissions for user '{user}' in vhost '{vhost}'")
        return Response.json(200, found)

    def handle_PUT(self, request: server.Request) -> Response:
        vhost, user = self.names()
        body = json_object(read_json(request), FIELDS)
        for key, want in (("user", user), ("vhost", vhost)):
            if key in body and body[key] != want:
                raise HttpError(400, "bad_request", f"{key} {body[key]!r} in the body is not {want!r} of the path")
        missing = [f for f in ("exchange", "write", "read") if f not in body]
        if missing:
            raise HttpError(400, "bad_request", f"field(s) {', '.join(map(repr, missing))} required")
        if not isinstance(body["exchange"], str):
            raise HttpError(400, "bad_request", "exchange must be a string")
        created = self.admin.set_topic_permission(user, vhost, body["exchange"], body["write"], body["read"])
        return Response.empty(201 if created else 204)

    def handle_DELETE(self, request: server.Request) -> Response:
        vhost, user = self.names()
        args: dict[bytes, list[bytes]] = request.args or {}
        raw = args.get(b"exchange")
        exchange = raw[0].decode("utf-8", "replace") if raw else None
        self.admin.clear_topic_permissions(user, vhost, exchange)
        return Response.empty(204)
