"""The users / vhosts / permissions management API from a test, over real HTTP with Basic
auth (http.client, no logbus import).

    mgmt = Mgmt(server)                       # as guest/guest, the first boot's administrator
    mgmt.call("GET", "/api/users")            # -> Reply(status, headers, body); .json()
    mgmt.add_user("alice", "pw"); mgmt.add_vhost("prod"); mgmt.grant("prod", "alice")
"""

from __future__ import annotations

import base64
import http.client
import json
from typing import Any
from urllib.parse import quote

from tests.serverproc import LogbusServer

ADMIN = ("guest", "guest")


class Reply:
    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        assert self.headers["Content-Type"] == "application/json", (self.status, self.headers, self.body)
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<Reply {self.status} {self.body[:200]!r}>"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Mgmt:
    def __init__(self, server: LogbusServer, auth: tuple[str, str] | None = ADMIN) -> None:
        self.server = server
        self.auth = auth

    def as_user(self, auth: tuple[str, str] | None) -> Mgmt:
        return Mgmt(self.server, auth)

    def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
             headers: dict[str, str] | None = None) -> Reply:
        host, port = self.server.host_port("http")
        conn = http.client.HTTPConnection(host, port, timeout=10)
        try:
            hdrs = dict(headers or {})
            if self.auth is not None:
                hdrs.setdefault("Authorization", basic(*self.auth))
            data = raw if raw is not None else None if body is None else json.dumps(body).encode()
            conn.request(method, path, body=data, headers=hdrs)
            response = conn.getresponse()
            return Reply(response.status, response.headers, response.read())
        finally:
            conn.close()

    def ok(self, method: str, path: str, body: Any = None) -> Reply:
        reply = self.call(method, path, body)
        assert reply.status in (200, 201, 204), reply
        return reply

    def add_user(self, name: str, password: str, tags: str = "") -> None:
        self.ok("PUT", f"/api/users/{q(name)}", {"password": password, "tags": tags})

    def add_vhost(self, name: str) -> None:
        self.ok("PUT", f"/api/vhosts/{q(name)}")

    def grant(self, vhost: str, user: str, configure: str = ".*", write: str = ".*", read: str = ".*") -> None:
        self.ok("PUT", f"/api/permissions/{q(vhost)}/{q(user)}",
                {"configure": configure, "write": write, "read": read})


def q(name: str) -> str:
    """One URL path segment: "/" is %2F."""
    return quote(name, safe="")
