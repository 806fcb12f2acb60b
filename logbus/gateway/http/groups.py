"""Kafka consumer groups with their lag, and offset resets as kafka-consumer-groups does
them (``monitoring`` tag to look; ``administrator`` to reset).

    GET  /api/consumer-groups                       200 [group, ...]
    GET  /api/consumer-groups/<group>               200 group | 404
    POST /api/consumer-groups/<group>/reset-offsets 200 [{"topic", "partition",
                                                          "current_offset", "new_offset"}, ...]
         body {"to": "earliest" | "latest" | "datetime" | "offset" | "shift",
               "value": N (epoch ms for datetime, the offset, or the shift),
               "topics": ["orders", ...] (default: the partitions it has committed),
               "execute": false}

A consumer group is ``{"consumer_group", "state", "protocol_type", "protocol", "members":
[{"member_id", "client_id", "host", "group_instance_id", "assignment": [{"topic",
"partition"}]}], "lag", "uncommitted_partitions", "partitions": [{"topic", "partition",
"committed_offset", "uncommitted", "log_start_offset", "log_end_offset", "lag",
"member_id", "client_id", "host"}]}``. The partitions are every partition of each topic
the group committed on or is assigned. ``log_end_offset`` is the high watermark and
``lag`` its distance from the committed offset, or, for a partition with no committed
offset (``"committed_offset": null, "uncommitted": true``), from ``log_start_offset``:
what a new consumer with ``auto.offset.reset=earliest`` reads. The group's ``lag`` is the
sum over its partitions, uncommitted ones included.

A reset is a dry run (the plan is answered, nothing changes) unless ``execute`` is true;
the new offsets are kept between the log's start and end. A group with members is
refused with 409 ``group_active``, as Kafka refuses to reset an active group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.web import resource, server

from ...core.types import Action
from .auth import AdminResource, path_name
from .credentials import require
from .request import json_object, read_json
from .responses import HttpError, Response

if TYPE_CHECKING:
    from .services import Services


class ConsumerGroups(AdminResource):
    needs: Action | None = "monitor"

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self
        return OneGroup(self.services, path_name(path, "group"))

    def handle_GET(self, request: server.Request) -> Response:
        return Response.json(200, [g.to_json() for g in self.admin.list_consumer_groups()])


class OneGroup(AdminResource):
    needs: Action | None = "monitor"

    def __init__(self, services: Services, group: str, action: str = "") -> None:
        super().__init__(services)
        self.group, self.action = group, action

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if self.action or path != b"reset-offsets":
            raise HttpError(404, "not_found", f"no such resource: {request.uri.decode('latin-1', 'replace')}")
        return OneGroup(self.services, self.group, "reset-offsets")

    def handle_GET(self, request: server.Request) -> Response:
        if self.action:
            raise HttpError(405, "method_not_allowed", "POST to reset offsets")
        return Response.json(200, self.admin.consumer_group_offsets(self.group).to_json())

    def handle_POST(self, request: server.Request) -> Response:
        if not self.action:
            raise HttpError(405, "method_not_allowed", "POST .../reset-offsets")
        require(request, self.doors, "administer")
        body = json_object(read_json(request), ("to", "value", "topics", "execute"))
        to, value, topics, execute = body.get("to"), body.get("value"), body.get("topics"), body.get("execute", False)
        if not isinstance(to, str):
            raise HttpError(400, "bad_request", "to must be earliest, latest, datetime, offset or shift")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise HttpError(400, "bad_request", "value must be a whole number")
        if topics is not None and (not isinstance(topics, list) or not all(isinstance(t, str) for t in topics)):
            raise HttpError(400, "bad_request", "topics must be a list of topic names")
        if not isinstance(execute, bool):
            raise HttpError(400, "bad_request", "execute must be true or false")
        plan = self.admin.reset_group_offsets(self.group, to, value, topics=topics, execute=execute)
        return Response.json(200, [r.to_json() for r in plan])
