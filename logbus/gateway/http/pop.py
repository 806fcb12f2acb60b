"""Pop consumption over HTTP (RocketMQ 5's SimpleConsumer model; docs/consumption.md).

    GET  /api/pop                                   200 [{"pop_group", "topic", "ready", "invisible",
                                                         "dead_lettered", "dead_letters_waiting"}, ...]
    POST /api/pop/<pop_group>/<topic>/receive       200 {"messages": [...]}
         body {"max": 32, "invisible_ms": 30000, "member": "worker-1", "wait_ms": 20000}
    POST /api/pop/<pop_group>/<topic>/ack           200 {"acked": n, "failed": [...]}
         body {"handles": ["<handle>", ...]}        (or {"handle": "<handle>"}: 204)
    POST /api/pop/<pop_group>/<topic>/nack          as ack: the messages come back after the backoff
    POST /api/pop/<pop_group>/<topic>/invisible     204
         body {"handle": "<handle>", "invisible_ms": 60000}
    POST /api/pop/<pop_group>/dlq/replay            200 {"pop_group", "replayed", "topics": {t: n}, "skipped",
                                                         "more"}
         body {"topic": "orders", "max": 100}       (both optional, as the body; core/queues/replay.py);
                                                    503 + Retry-After while a resource alarm is set (alarms.py)

A received message is ``{"handle", "topic", "partition", "offset", "deliveries", "key",
"value", "headers", "timestamp"}``; key and value are UTF-8 text when they decode,
else base64 under ``key_base64`` / ``value_base64``. A handle that names no current
lease is 409 ``stale_receipt``, a malformed one or an invisible time out of range 400
``invalid_request``, an unknown topic or pop group 404. A replay answers once the replayed
messages are durable; while one of a pop group is in progress another is 409
``replay_in_progress``.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.web import resource, server

from ...core.errors import LogbusError
from ...core.types import Message
from ...core.types import Popped
from ...core.types import dlq_topic
from ...core.types import topic_exchange
from ...core.types import Resource
from .alarms import AlarmGate
from .credentials import require, require_topic
from .request import json_object, read_json, request_body
from .resource import ApiResource, NotFound
from .responses import HttpError, Response, status_for

if TYPE_CHECKING:
    from .services import Services

DEFAULT_INVISIBLE_MS = 30_000


def _segment(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise HttpError(400, "invalid_request", f"{what} {raw!r} is not UTF-8") from None


def encode_bytes(out: dict[str, Any], name: str, value: bytes | None) -> None:
    """``value`` as UTF-8 text under ``name``, else base64 under ``name_base64``."""
    if value is None:
        out[name] = None
        return
    try:
        out[name] = value.decode("utf-8")
    except UnicodeDecodeError:
        out[name + "_base64"] = base64.b64encode(value).decode()


def message_json(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    encode_bytes(out, "key", m.key)
    encode_bytes(out, "value", m.value)
    out["headers"] = {k: (v.decode("utf-8", "replace") if v is not None else None) for k, v in m.headers}
    out["timestamp"] = m.timestamp
    return out


class Pop(ApiResource):
    def __init__(self, services: Services) -> None:
        super().__init__()
        self.services = services
        self.doors, self.admin = services.doors, services.admin
        self.gate = AlarmGate(services.doors, services.metrics)  # a replay appends; receive, ack, nack go on

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self
        postpath = request.postpath or []
        if len(postpath) != 2:
            return NotFound()
        topic, action = postpath
        request.postpath = []
        if (topic, action) == (b"dlq", b"replay"):  # no topic action is named "replay"
            return DlqReplay(self.services, _segment(path, "pop group"), self.gate)
        handler = _ACTIONS.get(action)
        if handler is None:
            return NotFound()
        return PopAction(self.services, _segment(path, "pop group"), _segment(topic, "topic"), handler)

    def handle_GET(self, request: server.Request) -> Response:
        user = require(request, self.doors, "manage")
        return Response.json(200, [g for g in self.admin.pop_groups()
                                   if self.doors.sees_vhost(user, topic_exchange(g["topic"])[0])])


class PopAction(ApiResource):
    isLeaf = True

    def __init__(self, services: Services, group: str, topic: str, action: Any) -> None:
        super().__init__()
        self.doors, self.pop = services.doors, services.pop
        self.group, self.topic, self.action = group, topic, action
        self.record: Any = None  # the connection's, in the registry: a receive counts its messages sent

    def handle_POST(self, request: server.Request) -> Response | Deferred[Response]:
        # a pop group reads a topic as a queue bound to its exchange: read on both
        require_topic(request, self.doors, "read", self.topic)
        require(request, self.doors, "read", Resource(topic_exchange(self.topic)[0], "queue", self.group))
        self.record = getattr(request.channel, "record", None)
        response: Response | Deferred[Response] = self.action(self, read_json(request))
        return response


class DlqReplay(ApiResource):
    isLeaf = True

    def __init__(self, services: Services, group: str, gate: AlarmGate) -> None:
        super().__init__()
        self.doors, self.admin = services.doors, services.admin
        self.group, self.gate = group, gate

    def handle_POST(self, request: server.Request) -> Deferred[Response]:
        # read the group's dead letters; write to each topic they go back to (checked
        # by the replay before it publishes anything)
        require_topic(request, self.doors, "read", dlq_topic(self.group))
        self.gate.check()
        body = read_json(request) if request_body(request).strip() else {}
        b = json_object(body, ("topic", "max"))
        topic = b.get("topic")
        if topic is not None and not isinstance(topic, str):
            raise HttpError(400, "invalid_request", "topic must be a string")
        d = self.admin.dlq_replay(self.group, topic, b.get("max"),
                                   lambda target: require_topic(request, self.doors, "write", target))
        return d.addCallback(lambda result: Response.json(200, result))


def _receive(a: PopAction, body: Any) -> Response | Deferred[Response]:
    b = json_object(body, ("max", "invisible_ms", "member", "wait_ms", "filter_tag", "filter_sql"))
    n = b.get("max", 1)
    invisible = b.get("invisible_ms", DEFAULT_INVISIBLE_MS)
    member = b.get("member", "")
    if not isinstance(member, str):
        raise HttpError(400, "invalid_request", "member must be a string")
    tag, sql = b.get("filter_tag"), b.get("filter_sql")
    wait = b.get("wait_ms", 0)
    if wait:
        return a.pop.receive_wait(a.group, a.topic, member, n, invisible, wait, tag, sql).addCallback(
            _received, a.record)
    return _received(a.pop.receive(a.group, a.topic, member, n, invisible, tag, sql), a.record)


def _received(got: list[Popped], record: Any) -> Response:
    if record is not None:
        record.sent += len(got)
    return Response.json(200, {"messages": [
        {"handle": p.handle, "topic": p.topic, "partition": p.partition, "offset": p.offset,
         "deliveries": p.deliveries, **message_json(p.message)} for p in got]})


def _settle_all(a: PopAction, body: Any, settle: Any) -> Response:
    b = json_object(body, ("handle", "handles"))
    if "handle" in b:  # one handle: its own status
        settle(a.group, a.topic, b["handle"])
        return Response.empty(204)
    handles = b.get("handles")
    if not isinstance(handles, list):
        raise HttpError(400, "invalid_request", "give \"handle\" or a list \"handles\"")
    done, failed = 0, []
    for h in handles:
        try:
            settle(a.group, a.topic, h)
            done += 1
        except LogbusError as e:
            if status_for(e.code) == 404:
                raise
            failed.append({"handle": h, "error": e.code, "message": str(e)})
    return Response.json(200, {"acked": done, "failed": failed})


def _ack(a: PopAction, body: Any) -> Response:
    return _settle_all(a, body, a.pop.ack)


def _nack(a: PopAction, body: Any) -> Response:
    return _settle_all(a, body, a.pop.nack)


def _invisible(a: PopAction, body: Any) -> Response:
    b = json_object(body, ("handle", "invisible_ms"))
    if "handle" not in b or "invisible_ms" not in b:
        raise HttpError(400, "invalid_request", "give \"handle\" and \"invisible_ms\"")
    a.pop.change_invisible(a.group, a.topic, b["handle"], b["invisible_ms"])
    return Response.empty(204)


_ACTIONS = {b"receive": _receive, b"ack": _ack, b"nack": _nack, b"invisible": _invisible}
