"""Half messages over HTTP (RocketMQ's transactional messages; docs/transactions.md).

    POST /api/halves                      201 {"id": "<half id>"} once stored (synced)
         body {"group": "shop", "topic": "orders", "message": {"key": ..., "value": ...,
               "headers": {...}, "tag": ...}, "partition": 0}   (partition optional)
    GET  /api/halves[?group=g]            200 [half, ...]: the unsettled ones, oldest first
    GET  /api/halves/<id>                 200 half: {"id", "group", "topic", "state", ...}
    POST /api/halves/<id>/commit          200 {"id", "state": "committed", "offsets": [...]} once
                                          published and durable (again: the same answer)
    POST /api/halves/<id>/rollback        200 {"id", "state": "rolled back"}
    PUT  /api/half-groups/<group>         204; body {"check_interval_ms": 60000, "max_checks": 15,
                                                 "check_url": "http://..."}   (check_url optional)
    GET  /api/half-groups/<group>         200 those settings

A message is as in ``POST /api/topics/<name>/messages``. Sending, committing and rolling
back need write on the half's topic (the commit publishes to it); listing, the
``management`` tag; a group's settings, the ``policymaker`` tag. An unknown id is 404
``unknown_half``, a commit of a rolled-back half (or the reverse) 409 ``half_settled``.
A check request of an unsettled half is a message on the topic ``%CHECK%<group>``,
which the producers pop (``/api/pop/<pop group>/%25CHECK%25<group>/receive``), or, with a
``check_url``, POSTed there (the answer ``{"action": "commit" | "rollback" | "unknown"}``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.web import resource, server

from ...core.errors import LogbusError
from .alarms import AlarmGate
from .credentials import require, require_topic
from .request import json_object, read_json
from .resource import ApiResource, NotFound
from .responses import HttpError, Response
from .topics import parse_message

if TYPE_CHECKING:
    from ...core.ports import Halves as HalvesPort
    from .services import Services


def _half_error(e: LogbusError) -> HttpError:
    code = getattr(e, "code", "")
    if code == "unknown_half":
        return HttpError(404, "unknown_half", str(e))
    if code == "half_settled":
        return HttpError(409, "half_settled", str(e))
    raise e


class Halves(ApiResource):
    def __init__(self, services: Services) -> None:
        super().__init__()
        self.doors, self.halves = services.doors, services.halves
        self.gate = AlarmGate(services.doors, services.metrics)  # a send stores, a commit appends

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self
        try:
            half_id = path.decode("ascii")
        except UnicodeDecodeError:
            return NotFound()
        action = (request.postpath or [b""])[0]
        request.postpath = []
        if action not in (b"", b"commit", b"rollback"):
            return NotFound()
        return Half(self.doors, self.halves, half_id, action.decode(), self.gate)

    def handle_GET(self, request: server.Request) -> Response:
        require(request, self.doors, "manage")
        args: dict[bytes, list[bytes]] = request.args or {}
        raw = args.get(b"group")
        group = raw[0].decode("utf-8", "replace") if raw else None
        return Response.json(200, self.halves.unsettled(group))

    def handle_POST(self, request: server.Request) -> Response:
        body = json_object(read_json(request), ("group", "topic", "message", "partition"))
        group, topic = body.get("group"), body.get("topic")
        if not isinstance(group, str) or not group or not isinstance(topic, str) or not topic:
            raise HttpError(400, "bad_request", '"group" and "topic" must be non-empty strings')
        partition = body.get("partition")
        if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
            raise HttpError(400, "bad_request", '"partition" must be an integer')
        require_topic(request, self.doors, "write", topic)
        self.gate.check()
        message = parse_message(body.get("message"), int(time.time() * 1000))
        half_id = self.halves.send(group, topic, message, partition)
        return Response.json(201, {"id": half_id})


class Half(ApiResource):
    isLeaf = True

    def __init__(self, doors: Any, halves: HalvesPort, half_id: str, action: str, gate: AlarmGate) -> None:
        super().__init__()
        self.doors, self.halves, self.half_id, self.action, self.gate = doors, halves, half_id, action, gate

    def _described(self, request: server.Request) -> dict[str, Any]:
        try:
            half = self.halves.describe(self.half_id)
        except LogbusError as e:
            raise _half_error(e) from None
        require_topic(request, self.doors, "write", half["topic"])
        return half

    def handle_GET(self, request: server.Request) -> Response:
        if self.action:
            raise HttpError(405, "method_not_allowed", f"POST /api/halves/<id>/{self.action}")
        return Response.json(200, self._described(request))

    def handle_POST(self, request: server.Request) -> Response | Deferred[Response]:
        if not self.action:
            raise HttpError(405, "method_not_allowed", "GET /api/halves/<id>, or POST .../commit or .../rollback")
        self._described(request)
        if self.action == "rollback":
            try:
                self.halves.rollback(self.half_id)
            except LogbusError as e:
                raise _half_error(e) from None
            return Response.json(200, {"id": self.half_id, "state": "rolled back"})
        self.gate.check()

        def committed(offsets: list[int]) -> Response:
            return Response.json(200, {"id": self.half_id, "state": "committed", "offsets": offsets})

        def refused(f: Any) -> Any:
            if f.check(LogbusError):
                raise _half_error(f.value)
            return f

        return self.halves.commit(self.half_id).addCallbacks(committed, refused)


class HalfGroups(ApiResource):
    def __init__(self, services: Services) -> None:
        super().__init__()
        self.doors, self.halves = services.doors, services.halves

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if not path or request.postpath:
            return NotFound()
        return HalfGroup(self.doors, self.halves, path.decode("utf-8", "replace"))


class HalfGroup(ApiResource):
    isLeaf = True

    def __init__(self, doors: Any, halves: HalvesPort, group: str) -> None:
        super().__init__()
        self.doors, self.halves, self.group = doors, halves, group

    def handle_GET(self, request: server.Request) -> Response:
        require(request, self.doors, "manage")
        s = self.halves.settings(self.group)
        return Response.json(200, {"group": self.group, "check_interval_ms": s.check_interval_ms,
                                   "max_checks": s.max_checks, "check_url": s.check_url or None})

    def handle_PUT(self, request: server.Request) -> Response:
        require(request, self.doors, "policy")
        body = json_object(read_json(request), ("check_interval_ms", "max_checks", "check_url"))
        interval, checks = body.get("check_interval_ms", 60_000), body.get("max_checks", 15)
        url = body.get("check_url") or ""
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (interval, checks)):
            raise HttpError(400, "bad_request", "check_interval_ms and max_checks must be integers")
        if not isinstance(url, str):
            raise HttpError(400, "bad_request", "check_url must be a string")
        try:
            self.halves.set_group(self.group, interval, checks, url)
        except ValueError as e:
            raise HttpError(400, "bad_request", str(e)) from None
        return Response.empty(204)
