"""Permissions, as RabbitMQ's management API has them (administrators only: auth.py).

    GET    /api/permissions                  200 [{"user", "vhost", "configure", "write", "read"}, ...]
    GET    /api/permissions/<vhost>/<user>   200 one of them | 404
    PUT    /api/permissions/<vhost>/<user>   201 created | 204 updated
                                             body {"configure": ".*", "write": ".*", "read": ".*"}
    DELETE /api/permissions/<vhost>/<user>   204 | 404

Names are URL-encoded (``%2F`` is vhost ``/``). The three values are regular expressions
searched in resource names (RabbitMQ's semantics, core/access/auth.py); one that does not
compile is 400, an unknown user or vhost 404. A change applies to open AMQP channels
from their next operation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.web import resource, server

from .auth import AdminResource, path_name
from .request import json_object, read_json
from .resource import Directory
from .responses import HttpError, Response

if TYPE_CHECKING:
    from .services import Services

PERMS = ("configure", "write", "read")
FIELDS = ("user", "vhost", *PERMS)


class Permissions(AdminResource):
    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self  # /api/permissions/
        return VHostPermissions(self.services, path)

    def handle_GET(self, request: server.Request) -> Response:
        return Response.json(200, [p.to_json() for p in self.admin.list_permissions()])


class VHostPermissions(Directory):
    """/api/permissions/<vhost> (and /api/topic-permissions/<vhost>): not an endpoint
    itself (404); its children are the vhost's users, as ``leaf`` resources."""

    def __init__(self, services: Services, raw_vhost: bytes, leaf: type[PermissionResource] | None = None) -> None:
        super().__init__()
        self.services = services
        self.raw_vhost = raw_vhost
        self.leaf = leaf or PermissionResource

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        return self.leaf(self.services, self.raw_vhost, path)


class PermissionResource(AdminResource):
    isLeaf = True

    def __init__(self, services: Services, raw_vhost: bytes, raw_user: bytes) -> None:
        super().__init__(services)
        self.raw_vhost = raw_vhost
        self.raw_user = raw_user

    def names(self) -> tuple[str, str]:
        return path_name(self.raw_vhost, "vhost"), path_name(self.raw_user, "user")

    def handle_GET(self, request: server.Request) -> Response:
        vhost, user = self.names()
        return Response.json(200, self.admin.permission(vhost, user).to_json())

    def handle_PUT(self, request: server.Request) -> Response:
        vhost, user = self.names()
        perms = parse_permission(read_json(request), vhost, user)
        created = self.admin.set_permission(user, vhost, **perms)
        return Response.empty(201 if created else 204)

    def handle_DELETE(self, request: server.Request) -> Response:
        vhost, user = self.names()
        self.admin.clear_permission(user, vhost)
        return Response.empty(204)


def parse_permission(body: Any, vhost: str, user: str) -> dict[str, str]:
    body = json_object(body, FIELDS)
    for key, want in (("user", user), ("vhost", vhost)):
        if key in body and body[key] != want:
            raise HttpError(400, "bad_request", f"{key} {body[key]!r} in the body is not {want!r} of the path")
    missing = [p for p in PERMS if p not in body]
    if missing:
        raise HttpError(400, "bad_request", f"field(s) {', '.join(map(repr, missing))} required")
    return {p: body[p] for p in PERMS}
