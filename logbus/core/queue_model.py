"""The queue model as the AMQP and MQTT gateways see it: ``ports.VHosts`` and, per open
vhost, ``ports.Queues`` (docs/decisions/0052).

A ``VHostQueues`` is made beside each ``VHost`` when the broker opens it and dropped
when the vhost is deleted. It is not the vhost: it holds the methods a gateway calls,
each bound once, here, to the object that does the work (the vhost's queue service for
consume, dispatch, ack, settle, release; the vhost for declarations, bindings and what
checks definitions; the broker's pipeline, with the vhost given, for publish), so a
gateway's call on a message's path is the one call it would make on that object, with
no layer of its own. The routing and definitions internals (``target``,
``record_queues``, ``load``, the router, the stored definitions) stay in ``VHost``, which
no gateway holds.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from .pipeline import Pipeline
from .vhost import VHost


def _not_started() -> None:
    raise RuntimeError("broker is not started")


class VHostQueues:
    """``ports.Queues`` for one vhost (see the module's header)."""

    def __init__(self, vhost: VHost, pipeline: Pipeline) -> None:
        service = vhost.service
        self.name = vhost.name
        self.queues = vhost.queues  # the live dict
        # exchanges and bindings
        self.declare_exchange = vhost.declare_exchange
        self.delete_exchange = vhost.delete_exchange
        self.has_exchange = vhost.has_exchange
        self.exchange = vhost.exchange
        self.bind = vhost.bind
        self.unbind = vhost.unbind
        # queues
        self.declare_queue = vhost.declare_queue
        self.delete_queue = vhost.delete_queue
        self.purge_queue = service.purge
        self.queue = service.state
        self.open_queue = vhost.open_queue
        self.close_queue = vhost.close_queue
        # consumers and deliveries: the queue service's own methods
        self.consume = service.consume
        self.cancel = vhost.cancel  # an auto-delete queue goes with its last consumer
        self.dispatch = service.dispatch
        self.get = vhost.get
        self.ack = service.ack
        self.reject = vhost.reject
        self.settle = service.settle
        self.release = service.release
        self.holds = vhost.holds
        # publish: the pipeline's, for this vhost
        self.publish = partial(pipeline.publish, vhost)


class QueueModel:
    """``ports.VHosts``: the open vhosts' ``VHostQueues`` by name. Made with the broker,
    before it starts (gateways are built first); the broker adds and removes vhosts and
    binds ``commit`` to its queue journal at start."""

    def __init__(self) -> None:
        self.open: dict[str, VHostQueues] = {}
        self.commit: Callable[[], None] = _not_started  # the queue journal's, once started

    def queues(self, vhost: str) -> VHostQueues | None:
        return self.open.get(vhost)
