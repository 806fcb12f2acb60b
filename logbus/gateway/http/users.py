"""Users, as RabbitMQ's management API has them (administrators only: auth.py).

    GET    /api/users          200 [{"name", "password_hash", "hashing_algorithm", "tags", "limits"}, ...]
    GET    /api/users/<name>   200 the same for one user | 404
    PUT    /api/users/<name>   201 created | 204 updated
                               body {"password": "s3cret", "tags": "administrator"}
                                 or {"password_hash": "<base64>", "hashing_algorithm":
                                     "rabbit_password_hashing_sha256", "tags": ["monitoring"]}
    DELETE /api/users/<name>   204 | 404; the user's AMQP connections are closed (320)

``<name>`` is URL-encoded (one path segment). ``tags`` is a comma-separated string or a
list. With neither ``password`` nor ``password_hash`` the user has no password (it cannot
log in with one), as in RabbitMQ; both at once is 400. A ``password`` is hashed with
scrypt (``logbus_password_hashing_scrypt``, core/access/passwords.py) on the broker's
password thread. A ``password_hash`` may be one of RabbitMQ's, so a user exported from
RabbitMQ's definitions can be PUT here as it is; it becomes scrypt at the user's next login.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.web import resource, server

from ...core.types import SHA256
from .auth import AdminResource, path_name
from .request import json_object, read_json
from .responses import HttpError, Response

if TYPE_CHECKING:
    from .services import Services

FIELDS = ("name", "password", "password_hash", "hashing_algorithm", "tags", "limits")


class Users(AdminResource):
    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self  # /api/users/
        return UserResource(self.services, path)

    def handle_GET(self, request: server.Request) -> Response:
        return Response.json(200, [u.to_json() for u in self.admin.list_users()])


class UserResource(AdminResource):
    isLeaf = True

    def __init__(self, services: Services, raw_name: bytes) -> None:
        super().__init__(services)
        self.raw_name = raw_name

    def handle_GET(self, request: server.Request) -> Response:
        return Response.json(200, self.admin.user(path_name(self.raw_name, "user")).to_json())

    def handle_PUT(self, request: server.Request) -> Response | Deferred[Response]:
        name = path_name(self.raw_name, "user")
        body = parse_user(read_json(request), name)
        password = body.pop("password")
        if password is None or body["password_hash"] is not None:  # (both: put_user says why)
            return self._put(name, password=password, **body)
        if not isinstance(password, str):
            raise HttpError(400, "bad_request", "password must be a string")
        # hashed on the broker's password thread (scrypt: a fifth of a second of a core)
        return self.admin.hash_password(password).addCallback(
            lambda new: self._put(name, password_hash=new.password_hash, hashing_algorithm=new.hashing_algorithm,
                                  scram=new.scram, tags=body["tags"]))

    def _put(self, name: str, **fields: Any) -> Response:
        created = self.admin.put_user(name, **fields)
        return Response.empty(201 if created else 204)

    def handle_DELETE(self, request: server.Request) -> Response:
        self.admin.delete_user(path_name(self.raw_name, "user"))
        return Response.empty(204)


def parse_user(body: Any, name: str) -> dict[str, Any]:
    """The PUT body -> keyword arguments of Admin.put_user, or HttpError 400. Values are
    checked by Access (InvalidAccess: 400)."""
    body = json_object(body, FIELDS)
    if "name" in body and body["name"] != name:
        raise HttpError(400, "bad_request", f"name {body['name']!r} in the body is not {name!r} of the path")
    tags = body.get("tags")
    if tags is not None and not isinstance(tags, (str, list)):
        raise HttpError(400, "bad_request", "tags must be a comma-separated string or a list of strings")
    return {"password": body.get("password"), "password_hash": body.get("password_hash"),
            "hashing_algorithm": body.get("hashing_algorithm") or SHA256, "tags": body.get("tags")}
