"""Topic admin.

    GET    /api/topics          200 [TopicInfo, ...] (with "message_rate": records appended per
                                second over the last 5 s; each partition's "records_appended")
    POST   /api/topics          201 TopicInfo
                                body {"name": "t", "partitions": 3, "config": {"flush": "none"}}
    GET    /api/topics/<name>   200 TopicInfo | 404
    PUT    /api/topics/<name>   200 TopicInfo | 400 | 404
                                body {"config": {"retention.ms": 3600000, "flush": null}}
    DELETE /api/topics/<name>   204 | 404
    GET    /api/topics/<name>/search?key=K   200 {"messages": [message, ...], "truncated": bool}:
                                by key, message_id or time range (from, to: epoch ms), through
                                the indexes; truncated: more matched than limit
    POST   /api/topics/<name>/messages   200 {"partition": p, "offsets": [...]} once durable;
                                503 + Retry-After while a resource alarm is set (alarms.py)
                                body {"messages": [{"key": "k", "value": "v", "headers": {"h": "x"},
                                      "delay_ms": 5000}], "partition": 0}

A published message takes ``key`` and ``value`` as UTF-8 text (or ``key_base64`` /
``value_base64``), ``headers`` as a JSON object of strings, ``tag`` (the message's tag,
docs/filters.md), ``ttl_ms`` (dead in queues
after that long), and ``delay_ms`` or ``deliver_at`` (epoch ms) to reach queues and pop
groups later (any delay up to 40
days; Kafka consumers see the record at once). Without ``partition`` the first
message's key picks it. The answer comes once the append is durable under the topic's
flush policy.

``<name>`` is URL-encoded (one path segment). ``config`` takes the keys of
TopicConfig.from_mapping ("flush", "retention.ms", ...); ``partitions`` may be given at the
top level or in ``config``. PUT changes the settings named in ``config`` on the live topic
(null: back to the broker's default) and keeps the others; the partition count is not
changed this way. Validation of names and settings is the broker's.
"""

from __future__ import annotations

import base64
import binascii
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from twisted.internet.defer import Deferred
from twisted.web import resource, server

from ...core.types import Envelope
from ...core.types import Message
from ...core.types import check_delay
from ...retry.policy import MAX_DELAY_MS

from ...core.types import TopicInfo, topic_exchange
from .alarms import AlarmGate
from .credentials import require, require_topic, user_of
from .request import json_object, query_flag, read_json
from .resource import ApiResource
from .responses import HttpError, Response

if TYPE_CHECKING:
    from .services import Services
    from .overview import RateSampler

CREATE_FIELDS = ("name", "partitions", "config")


def with_rate(info: dict[str, Any], sampler: RateSampler | None) -> dict[str, Any]:
    """A topic's JSON with ``message_rate``: records appended per second over the last
    5 s (null until two samples are taken)."""
    info["message_rate"] = None if sampler is None else sampler.topic_rate(info["name"])
    return info
ALTER_FIELDS = ("config",)


class Topics(ApiResource):
    audited = True

    def __init__(self, services: Services, sampler: RateSampler | None = None) -> None:
        super().__init__()
        self.services = services
        self.doors, self.admin, self.topics = services.doors, services.admin, services.topics
        self.gate = AlarmGate(services.doors, services.metrics)
        self.sampler = sampler  # each topic's append rate (overview.py)

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self  # /api/topics/
        if request.postpath == [b"messages"]:
            request.postpath = []
            return TopicMessages(self.services, path, self.gate)
        if request.postpath == [b"search"]:
            request.postpath = []
            return TopicSearch(self.services, path)
        return Topic(self.services, path, self.sampler)

    def handle_GET(self, request: server.Request) -> Response:
        user = require(request, self.doors, "manage")
        return Response.json(200, [with_rate(info.to_json(), self.sampler) for info in self.topics.list_topics()
                                   if self.doors.sees_vhost(user, topic_exchange(info.name)[0])])

    def handle_POST(self, request: server.Request) -> Response:
        info = create_topic(request, self.services, read_json(request))
        location = "/api/topics/" + quote(info.name, safe="")
        return Response.json(201, with_rate(info.to_json(), self.sampler), (("Location", location),))


class Topic(ApiResource):
    isLeaf = True
    audited = True

    def __init__(self, services: Services, raw_name: bytes, sampler: RateSampler | None = None) -> None:
        super().__init__()
        self.services = services
        self.doors, self.admin, self.topics = services.doors, services.admin, services.topics
        self.raw_name = raw_name
        self.sampler = sampler

    def name(self) -> str:
        try:
            return self.raw_name.decode("utf-8")
        except UnicodeDecodeError:
            raise HttpError(
                400, "invalid_topic_name", f"topic name {self.raw_name!r} is not UTF-8"
            ) from None

    def handle_GET(self, request: server.Request) -> Response:
        user = require(request, self.doors, "manage")
        name = self.name()
        vhost = topic_exchange(name)[0]
        if not self.doors.sees_vhost(user, vhost):
            raise HttpError(403, "forbidden", f"access to vhost '{vhost}' refused for user '{user}'")
        return Response.json(200, with_rate(self.topics.describe_topic(name).to_json(), self.sampler))

    def handle_PUT(self, request: server.Request) -> Response:
        info = alter_topic(request, self.services, self.name(), read_json(request))
        return Response.json(200, with_rate(info.to_json(), self.sampler))

    def handle_DELETE(self, request: server.Request) -> Response:
        """``?force=true``: a topic queues read is deleted too, their entries with it."""
        delete_topic(request, self.services, self.name(), force=query_flag(request, "force"))
        return Response.empty(204)


# the checks and calls the API and the console share (console/pages/topics.py)


def create_topic(request: server.Request, services: Services, body: Any) -> TopicInfo:
    """``management`` and configure on the topic, then the create."""
    require(request, services.doors, "manage")
    name, settings = parse_create(body)
    require_topic(request, services.doors, "configure", name)
    return services.topics.create_topic(name, settings)


def alter_topic(request: server.Request, services: Services, name: str, body: Any) -> TopicInfo:
    """``policymaker`` (a topic's settings are its policy) and configure on it, then the alter."""
    require(request, services.doors, "policy")
    require_topic(request, services.doors, "configure", name)
    return services.topics.alter_topic(name, parse_alter(body))


def delete_topic(request: server.Request, services: Services, name: str, *, force: bool = False) -> None:
    """``management`` and configure on it, then the delete (``force``: queues reading it too)."""
    require(request, services.doors, "manage")
    require_topic(request, services.doors, "configure", name)
    services.topics.delete_topic(name, force=force)


class TopicMessages(Topic):
    """POST /api/topics/<name>/messages: publish."""

    handle_GET = handle_PUT = handle_DELETE = None  # type: ignore[assignment]
    audited = False  # publishing is data, not management

    def __init__(self, services: Services, raw_name: bytes, gate: AlarmGate) -> None:
        super().__init__(services, raw_name)
        self.gate = gate

    def handle_POST(self, request: server.Request) -> Deferred[Response]:
        name = self.name()
        require_topic(request, self.doors, "write", name)
        self.gate.check()
        body = json_object(read_json(request), ("messages", "partition"))
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw or len(raw) > MAX_PUBLISH:
            raise HttpError(400, "bad_request", f"\"messages\" must be a list of 1 to {MAX_PUBLISH} messages")
        partition = body.get("partition")
        if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
            raise HttpError(400, "bad_request", "\"partition\" must be an integer")
        now = int(time.time() * 1000)
        messages = [parse_message(m, now) for m in raw]
        vhost, exchange = topic_exchange(name)
        if self.doors.topic_restricted(user_of(request), vhost, exchange):  # the key is the routing key
            for key in {m.key or b"" for m in messages}:
                require_topic(request, self.doors, "write", name, key.decode("utf-8", "replace"))
        if partition is None:
            partition = self.admin.partition_for(name, messages[0].key)
        d = self.admin.publish(name, messages, partition=partition)
        record = getattr(request.channel, "record", None)  # the connection's, in the registry

        def published(offsets: list[int]) -> Response:
            if record is not None:  # durable, and answered: received and confirmed
                record.received += len(offsets)
                record.confirmed += len(offsets)
            return Response.json(200, {"partition": partition, "offsets": offsets})

        return d.addCallback(published)


class TopicSearch(Topic):
    """GET /api/topics/<name>/search?key=K | key_base64=B | message_id=M | from=MS | to=MS
    [&partition=P][&limit=N]: the records with record key K (or the envelope message id
    M), or a timestamp in [from, to] (epoch ms), found through the key and time indexes
    (never a scan of the topic); partitions in order, offsets ascending, at most N
    (default 100), and whether more matched (``truncated``). On ``amq.topic`` a key is an
    MQTT topic or its AMQP routing key alike. Management and read permission on the
    topic."""

    def handle_GET(self, request: server.Request) -> Response:
        name = self.name()
        require(request, self.doors, "manage")
        require_topic(request, self.doors, "read", name)
        args: dict[bytes, list[bytes]] = request.args or {}
        unknown = sorted(k.decode("latin-1") for k in args) if not set(args) <= SEARCH_ARGS else []
        if unknown:
            raise HttpError(400, "bad_request", f"unknown search parameters: {', '.join(unknown)}"
                            f" (known: {', '.join(sorted(a.decode() for a in SEARCH_ARGS))})")

        def text(arg: bytes) -> str | None:
            raw = args.get(arg)
            return raw[0].decode("utf-8", "replace") if raw else None

        def number(arg: bytes) -> int | None:
            raw = text(arg)
            if raw is None:
                return None
            try:
                return int(raw)
            except ValueError:
                raise HttpError(400, "bad_request", f"{arg.decode()} must be a whole number") from None

        key: bytes | None = None
        if text(b"key_base64") is not None:
            try:
                key = base64.b64decode(text(b"key_base64") or "", validate=True)
            except (ValueError, binascii.Error):
                raise HttpError(400, "bad_request", "key_base64 is not base64") from None
        elif b"key" in args:
            key = args[b"key"][0]
        limit = number(b"limit")
        found = self.admin.search_messages(name, key=key, message_id=text(b"message_id"), start_ms=number(b"from"),
                                            end_ms=number(b"to"), partition=number(b"partition"),
                                            limit=100 if limit is None else limit)
        return Response.json(200, found.to_json())


SEARCH_ARGS = {b"key", b"key_base64", b"message_id", b"from", b"to", b"partition", b"limit"}
MAX_PUBLISH = 1000
MESSAGE_FIELDS = ("key", "value", "key_base64", "value_base64", "headers", "tag", "delay_ms", "deliver_at", "ttl_ms")


def _bytes(m: dict[str, Any], name: str) -> bytes | None:
    if name + "_base64" in m:
        try:
            return base64.b64decode(m[name + "_base64"], validate=True)
        except (TypeError, ValueError, binascii.Error):
            raise HttpError(400, "bad_request", f"{name}_base64 is not base64") from None
    value = m.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise HttpError(400, "bad_request", f"{name} must be a string (or {name}_base64)")
    return value.encode()


def parse_message(raw: Any, now_ms: int) -> Message:
    m = json_object(raw, MESSAGE_FIELDS)
    headers = m.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) or v is None for v in headers.values()):
        raise HttpError(400, "bad_request", "headers must be a JSON object of strings")
    message = Message(_bytes(m, "key"), _bytes(m, "value"), None,
                      [(k, None if v is None else v.encode()) for k, v in headers.items()])
    message.envelope.protocol = Envelope.HTTP
    if "tag" in m:  # the message's tag (docs/filters.md)
        if not isinstance(m["tag"], str) or not m["tag"]:
            raise HttpError(400, "bad_request", "tag must be a non-empty string")
        message.envelope.tag = m["tag"]
    if "delay_ms" in m and "deliver_at" in m:
        raise HttpError(400, "invalid_request", "give delay_ms or deliver_at, not both")
    if "delay_ms" in m:
        message.envelope.deliver_at_ms = now_ms + check_delay(m["delay_ms"])
    elif "deliver_at" in m:
        at = m["deliver_at"]
        if not isinstance(at, int) or isinstance(at, bool):
            raise HttpError(400, "invalid_request", "deliver_at must be an integer (epoch ms)")
        message.envelope.deliver_at_ms = now_ms + check_delay(max(0, at - now_ms))
    if "ttl_ms" in m:  # counted from when it reaches the queues
        ttl = m["ttl_ms"]
        if not isinstance(ttl, int) or isinstance(ttl, bool) or not 1 <= ttl <= MAX_DELAY_MS:
            raise HttpError(400, "invalid_request", f"ttl_ms must be an integer from 1 to {MAX_DELAY_MS}")
        message.envelope.expires_at_ms = (message.envelope.deliver_at_ms or now_ms) + ttl
    return message


def parse_create(body: Any) -> tuple[str, dict[str, Any]]:
    """The create request body -> (name, settings for Topics.create_topic), or HttpError."""
    body = json_object(body, CREATE_FIELDS)
    if "name" not in body:
        raise HttpError(400, "bad_request", "field 'name' is required")
    name = body["name"]
    if not isinstance(name, str):
        raise HttpError(400, "invalid_topic_name", f"topic name must be a string, not {name!r}")
    config = body.get("config", {})
    if not isinstance(config, dict):
        raise HttpError(400, "invalid_config", "'config' must be a JSON object")
    settings = dict(config)
    if "partitions" in body:
        partitions = body["partitions"]
        if isinstance(partitions, bool) or not isinstance(partitions, int):
            raise HttpError(
                400, "invalid_config", f"partitions must be an integer, not {partitions!r}"
            )
        if "partitions" in config and config["partitions"] != partitions:
            raise HttpError(
                400, "invalid_config", "'partitions' and 'config.partitions' disagree"
            )
        settings["partitions"] = partitions
    return name, settings


def parse_alter(body: Any) -> dict[str, Any]:
    """The alter request body -> settings for Topics.alter_topic, or HttpError."""
    body = json_object(body, ALTER_FIELDS)
    if "config" not in body:
        raise HttpError(400, "bad_request", "field 'config' is required")
    config = body["config"]
    if not isinstance(config, dict):
        raise HttpError(400, "invalid_config", "'config' must be a JSON object")
    return dict(config)
