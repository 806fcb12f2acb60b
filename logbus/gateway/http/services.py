"""The ports the HTTP gateway is built from (``site.build_site``), in one value that the
site and its resources share: no resource holds the broker.

    doors    every request's login and access check (credentials.py), the connection registry
    admin    the operator's view and changes, the HTTP publish (core/admin.py)
    topics   topics made, changed, listed (core/ports.Topics)
    pop      pop groups' receive, ack, nack (core/pop_service.py)
    halves   half messages: sent, committed, rolled back (core/halves.py)
    topology exchanges, queues and bindings declared by an operator, a message published to
             an exchange (core/ports.Topology: the AMQP gateway's operator.py)
    metrics  the broker's Prometheus metrics: /metrics and the gateway's own counters
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...core.ports import Admin, Doors, Halves, Pop, Topics, Topology
    from ...core.types import Metrics


@dataclass(frozen=True, slots=True)
class Services:
    doors: Doors
    admin: Admin
    topics: Topics
    pop: Pop
    metrics: Metrics
    halves: Halves
    topology: Topology
