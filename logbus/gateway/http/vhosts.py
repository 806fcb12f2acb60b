"""Virtual hosts, as RabbitMQ's management API has them: a user with the ``management``
tag sees those it has a permission in (``monitoring``: all), an administrator may create
and delete them.

    GET    /api/vhosts          200 [{"name", "description", "tags", "metadata"}, ...]
    GET    /api/vhosts/<name>   200 one of them | 404
    PUT    /api/vhosts/<name>   201 created | 204 updated (description and tags)
                                body (optional) {"description": "orders", "tags": "prod,eu"}
    DELETE /api/vhosts/<name>   204 | 404

``<name>`` is URL-encoded: ``/api/vhosts/%2F`` is vhost ``/``. Deleting a vhost closes its
AMQP connections (320 CONNECTION_FORCED), deletes its exchanges, queues, bindings,
queued messages and permissions; the log topics behind its exchanges keep their data.
A new vhost has no permissions: PUT /api/permissions/<vhost>/<user> before connecting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.web import resource, server

from ...core.types import Action
from .auth import AdminResource, path_name
from .credentials import require, user_of
from .request import json_object, read_json, request_body
from .responses import HttpError, Response

if TYPE_CHECKING:
    from .services import Services

FIELDS = ("name", "description", "tags")


class VHosts(AdminResource):
    needs: Action | None = "manage"

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self  # /api/vhosts/
        return VHostResource(self.services, path)

    def handle_GET(self, request: server.Request) -> Response:
        user = user_of(request)
        return Response.json(200, [v.to_json() for v in self.admin.list_vhosts()
                                   if self.doors.sees_vhost(user, v.name)])


class VHostResource(AdminResource):
    isLeaf = True
    needs: Action | None = "manage"

    def __init__(self, services: Services, raw_name: bytes) -> None:
        super().__init__(services)
        self.raw_name = raw_name

    def handle_GET(self, request: server.Request) -> Response:
        name = path_name(self.raw_name, "vhost")
        vhost = self.admin.vhost_info(name)
        if not self.doors.sees_vhost(user_of(request), name):
            raise HttpError(403, "forbidden", f"access to vhost '{name}' refused for user '{user_of(request)}'")
        return Response.json(200, vhost.to_json())

    def handle_PUT(self, request: server.Request) -> Response:
        require(request, self.doors, "administer")
        name = path_name(self.raw_name, "vhost")
        raw = request_body(request)
        body = parse_vhost(read_json(request) if raw.strip() else {}, name)
        created = self.admin.create_vhost(name, **body)
        return Response.empty(201 if created else 204)

    def handle_DELETE(self, request: server.Request) -> Response:
        require(request, self.doors, "administer")
        self.admin.delete_vhost(path_name(self.raw_name, "vhost"))
        return Response.empty(204)


def parse_vhost(body: Any, name: str) -> dict[str, Any]:
    body = json_object(body, FIELDS)
    if "name" in body and body["name"] != name:
        raise HttpError(400, "bad_request", f"name {body['name']!r} in the body is not {name!r} of the path")
    return {"description": body.get("description", ""), "tags": body.get("tags")}
