"""Topic admin.

    GET    /api/topics          200 [TopicInfo, ...]
    POST   /api/topics          201 TopicInfo
                                body {"name": "t", "partitions": 3, "config": {"flush": "none"}}
    GET    /api/topics/<name>   200 TopicInfo | 404
    PUT    /api/topics/<name>   200 TopicInfo | 400 | 404
                                body {"config": {"retention.ms": 3600000, "flush": null}}
    DELETE /api/topics/<name>   204 | 404

``<name>`` is URL-encoded (one path segment). ``config`` takes the keys of
TopicConfig.from_mapping ("flush", "retention.ms", ...); ``partitions`` may be given at the
top level or in ``config``. PUT changes the settings named in ``config`` on the live topic
(null: back to the broker's default) and keeps the others; the partition count is not
changed this way. Validation of names and settings is the broker's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from twisted.web import resource, server

from .request import json_object, read_json
from .resource import ApiResource
from .responses import HttpError, Response

if TYPE_CHECKING:
    from ...core.broker import Broker

CREATE_FIELDS = ("name", "partitions", "config")
ALTER_FIELDS = ("config",)


class Topics(ApiResource):
    def __init__(self, broker: Broker) -> None:
        super().__init__()
        self.broker = broker

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self  # /api/topics/
        return Topic(self.broker, path)

    def handle_GET(self, request: server.Request) -> Response:
        return Response.json(200, [info.to_json() for info in self.broker.list_topics()])

    def handle_POST(self, request: server.Request) -> Response:
        name, settings = parse_create(read_json(request))
        info = self.broker.create_topic(name, settings)
        location = "/api/topics/" + quote(info.name, safe="")
        return Response.json(201, info.to_json(), (("Location", location),))


class Topic(ApiResource):
    isLeaf = True

    def __init__(self, broker: Broker, raw_name: bytes) -> None:
        super().__init__()
        self.broker = broker
        self.raw_name = raw_name

    def name(self) -> str:
        try:
            return self.raw_name.decode("utf-8")
        except UnicodeDecodeError:
            raise HttpError(
                400, "invalid_topic_name", f"topic name {self.raw_name!r} is not UTF-8"
            ) from None

    def handle_GET(self, request: server.Request) -> Response:
        return Response.json(200, self.broker.describe_topic(self.name()).to_json())

    def handle_PUT(self, request: server.Request) -> Response:
        name = self.name()
        settings = parse_alter(read_json(request))
        return Response.json(200, self.broker.alter_topic(name, settings).to_json())

    def handle_DELETE(self, request: server.Request) -> Response:
        self.broker.delete_topic(self.name())
        return Response.empty(204)


def parse_create(body: Any) -> tuple[str, dict[str, Any]]:
    """The create request body -> (name, settings for Broker.create_topic), or HttpError."""
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
    """The alter request body -> settings for Broker.alter_topic, or HttpError."""
    body = json_object(body, ALTER_FIELDS)
    if "config" not in body:
        raise HttpError(400, "bad_request", "field 'config' is required")
    config = body["config"]
    if not isinstance(config, dict):
        raise HttpError(400, "invalid_config", "'config' must be a JSON object")
    return dict(config)
