"""GET /api/overview: the broker at a glance, in RabbitMQ's field names where it has them
(``management`` tag).

    200 {"product_name", "product_version", "node", "uptime_ms",
         "object_totals": {"connections", "queues", "vhosts", "topics", "consumers", "consumer_groups"},
         "connections_by_protocol": {"amqp", "mqtt", "kafka", "http"},
         "queue_totals": {"messages", "messages_ready", "messages_unacknowledged", "messages_scheduled"},
         "message_totals": {protocol: {"received", "confirmed", "sent", "routed", "delivered", "redelivered",
                                       "acked", "dead_lettered"}},
         "message_rates": {protocol: {the same, per second over the last sample}},
         "alarms", "health", "mem_used", "fd_used", "disk_free", "disk_free_limit"}

Rates are computed from the totals of two samples: the one a ``RateSampler`` takes every
``SAMPLE_SECONDS`` (RabbitMQ's collect_statistics_interval, 5 s) and the one before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet.task import LoopingCall
from twisted.web import server

from ...core.types import Action
from .auth import AdminResource
from .rates import ReadRates
from .responses import Response

if TYPE_CHECKING:
    from ...core.ports import Admin
    from .services import Services

SAMPLE_SECONDS = 5.0
KEEP = 120  # samples kept: 10 minutes of history for the console's charts


class RateSampler:
    """The broker's message totals, sampled every ``SAMPLE_SECONDS`` while the site runs:
    O(protocols + vhosts) per sample, never a walk over the queues."""

    def __init__(self, admin: Admin, clock: Any) -> None:
        self.admin, self.clock = admin, clock
        self.reads = ReadRates(clock.seconds)  # per-object rates of the API's answers (rates.py)
        self.samples: list[tuple[float, dict[str, dict[str, int]]]] = []
        self.topics: list[tuple[float, dict[str, int]]] = []  # records appended per topic
        self._loop: LoopingCall | None = None

    def start(self) -> None:
        if self._loop is None:
            self._loop = LoopingCall(self.sample)
            self._loop.clock = self.clock
            self._loop.start(SAMPLE_SECONDS, now=True)

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None

    def sample(self) -> None:
        now = self.clock.seconds()
        self.samples.append((now, self.admin.message_totals()))
        del self.samples[:-KEEP]
        self.topics.append((now, self.admin.topic_append_counts()))
        del self.topics[:-2]

    def rates(self) -> dict[str, dict[str, float]]:
        if len(self.samples) < 2:
            return {}
        (t0, a), (t1, b) = self.samples[-2], self.samples[-1]
        dt = max(t1 - t0, 1e-3)
        return {p: {k: round((n - a.get(p, {}).get(k, 0)) / dt, 2) for k, n in row.items()} for p, row in b.items()}


    def topic_rate(self, topic: str) -> float | None:
        """Records appended to ``topic`` per second over the last sample interval."""
        if len(self.topics) < 2:
            return None
        (t0, a), (t1, b) = self.topics
        return round((b.get(topic, 0) - a.get(topic, 0)) / max(t1 - t0, 1e-3), 2)


class Overview(AdminResource):
    isLeaf = True
    needs: Action | None = "manage"

    def __init__(self, services: Services, sampler: RateSampler) -> None:
        super().__init__(services)
        self.sampler = sampler

    def handle_GET(self, request: server.Request) -> Response:
        body = self.admin.overview()
        body["message_rates"] = self.sampler.rates()
        return Response.json(200, body)
