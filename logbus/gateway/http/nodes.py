"""GET /api/nodes: this broker as the one node of RabbitMQ's list (``monitoring`` tag,
as RabbitMQ asks), in RabbitMQ's field names where it has them; exact numbers (bytes,
milliseconds), the console's node page (console/pages/node.py) shows them for a reader.

    GET /api/nodes          200 [node]
    GET /api/nodes/<name>   200 node | 404 (another node's name)

    node = {"name", "type": "disc", "running": true, "os_pid": "4242", "processors",
            "product_version", "uptime" (ms), "started_ms", "started_at" (UTC ISO 8601),
            "mem_used" (resident bytes), "mem_limit", "mem_alarm", "mem_calculation_strategy": "rss",
            "memory_high_watermark" (a fraction of RAM, or bytes), "total_memory",
            "disk_free" (bytes on the data directory's filesystem), "disk_free_limit", "disk_free_alarm",
            "fd_used", "fd_total" (the soft RLIMIT_NOFILE; null: unlimited),
            "resource_alarms": [{"resource": "memory" | "disk", "value", "limit", "reason"}],
            "health": [why the broker does not serve as it should, as /healthz],
            "data_dir", "db_dir", "log_dir", "state_store_bytes", "log_bytes",
            "listeners": [{"name", "protocol", "ip_address", "port", "address", "tls", "listening",
                           "started_ms", "started_at", "uptime", "problem"}],
            "python_version", "python_implementation", "interpreter", "compiled", "build"}

``state_store_bytes`` (the files of the RocksDB directory) is measured at most every 5
seconds; ``log_bytes`` is the sum of the topics' sizes (``/api/topics``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.web import resource, server

from ...core.types import Action
from .auth import AdminResource, path_name
from .responses import HttpError, Response

if TYPE_CHECKING:
    from .services import Services


class Nodes(AdminResource):
    needs: Action | None = "monitor"

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self
        return OneNode(self.services, path_name(path, "node"))

    def handle_GET(self, request: server.Request) -> Response:
        return Response.json(200, [self.admin.node()])


class OneNode(AdminResource):
    isLeaf = True
    needs: Action | None = "monitor"

    def __init__(self, services: Services, name: str) -> None:
        super().__init__(services)
        self.name = name

    def handle_GET(self, request: server.Request) -> Response:
        node = self.admin.node()
        if node["name"] != self.name:
            raise HttpError(404, "not_found", f"no node {self.name!r} (this one is {node['name']!r})")
        return Response.json(200, node)
