"""Resource limits at run time, as ``rabbitmqctl set_vm_memory_high_watermark`` and
``set_disk_free_limit`` change them (core/pressure.py).

    GET /api/limits   200 {"memory_high_watermark": 0.4, "memory_limit_bytes": ...,
                           "disk_free_limit": 50000000, "alarms": ["disk"],
                           "memory_used_bytes": ..., "disk_free_bytes": ...}
    PUT /api/limits   200, the same shape after the change and a fresh check
                      body {"memory_high_watermark": 0.5, "disk_free_limit": 1000000000}
                      (either key or both)

A watermark in (0, 1] is a fraction of RAM, an integer above 1 a byte count. A bad
value is 400 ``invalid_config`` and changes nothing. The change lasts until the broker
stops; the settings (--memory-high-watermark, --disk-free-limit) apply at start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.web import server

from .credentials import require
from .request import json_object, read_json
from .resource import ApiResource
from .responses import HttpError, Response

if TYPE_CHECKING:
    from .services import Services

FIELDS = ("memory_high_watermark", "disk_free_limit")


class Limits(ApiResource):
    isLeaf = True
    audited = True

    def __init__(self, services: Services) -> None:
        super().__init__()
        self.doors = services.doors
        self.admin = services.admin

    def handle_GET(self, request: server.Request) -> Response:
        require(request, self.doors, "monitor")
        return Response.json(200, self.admin.limits())

    def handle_PUT(self, request: server.Request) -> Response:
        require(request, self.doors, "administer")
        return Response.json(200, self.admin.set_limits(**parse_limits(read_json(request))))


def parse_limits(body: Any) -> dict[str, Any]:
    """The PUT body -> keyword arguments of Admin.set_limits, or HttpError.
    The values themselves are checked by the monitor (InvalidConfig: 400)."""
    body = json_object(body, FIELDS)
    if not body:
        raise HttpError(400, "bad_request", f"give at least one of {', '.join(FIELDS)}")
    if any(value is None for value in body.values()):
        raise HttpError(400, "invalid_config", "a limit must be a number, not null")
    return body
