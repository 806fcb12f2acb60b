"""The operator's Prometheus series, computed at scrape time from the inventory
(inventory.py): nothing is counted per message for them beyond the queues' plain
counters. Named after RabbitMQ's Prometheus plugin where it has the figure.

Two sets, as RabbitMQ splits them: the default ``/metrics`` carries bounded series,
aggregated per protocol or queue kind (a broker with 10,000 MQTT sessions still has a
dozen series); ``/metrics/per-object`` carries one series per queue and per consumer
group partition (``PerObjectCollector``).

    logbus_connections{protocol}                      gauge
    logbus_queues{kind}                               gauge
    logbus_queue_messages_ready{kind}                 gauge   (per object: {vhost,queue,kind})
    logbus_queue_messages_unacked{kind}               gauge   (idem)
    logbus_queue_messages_scheduled{kind}             gauge   (idem)
    logbus_queue_consumers{kind}                      gauge   (idem)
    logbus_global_messages_<event>_total{protocol}    counter: received, confirmed, sent, routed,
                                                      delivered, redelivered, acknowledged, dead_lettered
    logbus_consumer_group_lag{group}                  gauge   (per object: {group,topic,partition})
    logbus_consumer_group_uncommitted_partitions{group} gauge: partitions counted from the log start
    logbus_disk_free_bytes                            gauge
(and the process_* series of prometheus_client's ProcessCollector: RSS, descriptors, CPU.)
"""

from __future__ import annotations

import os

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .pressure import free_disk

if TYPE_CHECKING:
    from .inventory import Inventory

KIND_LABEL = ("kind",)
# Inventory.message_totals' counters (docs/operations.md, "Message counters", defines each)
EVENTS = (("received", "received", "Messages received from clients, by their protocol"),
          ("confirmed", "confirmed", "Messages confirmed to publishers (AMQP confirms, MQTT PUBACK/PUBREC, "
           "Kafka produce acks, HTTP answers), by their protocol"),
          ("sent", "sent", "Messages sent to clients (Kafka: records fetched), by their protocol"),
          ("routed", "routed", "Queue entries made (one per queue a message reached), by the publisher's "
           "protocol"),
          ("delivered", "delivered", "Messages delivered to consumers or taken from queues, by the consumer's "
           "protocol"),
          ("redelivered", "redelivered", "Messages delivered again, by the consumer's protocol"),
          ("acked", "acknowledged", "Messages acknowledged by consumers, by the consumer's protocol"),
          ("dead_lettered", "dead_lettered", "Messages dead-lettered, by the protocol that consumes their queue"))
QUEUE_GAUGES = (("ready", "logbus_queue_messages_ready", "Messages ready to be delivered"),
                ("unacked", "logbus_queue_messages_unacked", "Messages delivered, not yet acknowledged"),
                ("scheduled", "logbus_queue_messages_scheduled",
                 "Messages waiting for a delay or a retry backoff"),
                ("consumers", "logbus_queue_consumers", "Consumers of queues"))


class OperatorCollector(Collector):
    def __init__(self, inventory: Inventory, data_dir: str | os.PathLike[str]) -> None:
        self.inventory = inventory
        self.data_dir = data_dir

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        b = self.inventory
        if b.log is None:
            return  # not started
        conns = GaugeMetricFamily("logbus_connections", "Open client connections", labels=("protocol",))
        by_protocol = {p: 0 for p in ("amqp", "mqtt", "kafka", "http")}
        for conn in b.connections:
            by_protocol[conn.protocol] += 1
        for p, n in by_protocol.items():
            conns.add_metric([p], n)
        yield conns
        count = GaugeMetricFamily("logbus_queues", "Queues, by kind", labels=KIND_LABEL)
        gauges = [GaugeMetricFamily(name, doc, labels=KIND_LABEL) for _, name, doc in QUEUE_GAUGES]
        for kind, row in b.queue_sums().items():
            count.add_metric([kind], row[0])
            for i, g in enumerate(gauges):
                g.add_metric([kind], row[i + 1])
        yield count
        yield from gauges
        totals = b.message_totals()
        for key, event, doc in EVENTS:
            counter = CounterMetricFamily(f"logbus_global_messages_{event}", doc, labels=("protocol",))
            for protocol, counts in totals.items():
                counter.add_metric([protocol], counts[key])
            yield counter
        lag = GaugeMetricFamily("logbus_consumer_group_lag", "Records a consumer group has not committed, "
                                "over its partitions (one with no committed offset from its log start)",
                                labels=("group",))
        uncommitted = GaugeMetricFamily("logbus_consumer_group_uncommitted_partitions",
                                        "Partitions a consumer group reads and has committed no offset on",
                                        labels=("group",))
        for group in b.list_consumer_groups():
            lag.add_metric([group.group], group.lag)
            uncommitted.add_metric([group.group], group.uncommitted_partitions)
        yield lag
        yield uncommitted
        yield GaugeMetricFamily("logbus_disk_free_bytes", "Free space of the data directory's filesystem",
                                value=free_disk(self.data_dir))


class PerObjectCollector(Collector):
    """One series per queue and per consumer group partition (``/metrics/per-object``)."""

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory

    def collect(self) -> Iterator[GaugeMetricFamily]:
        b = self.inventory
        if b.log is None:
            return
        labels = ("vhost", "queue", "kind")
        gauges = [GaugeMetricFamily(name, doc, labels=labels) for _, name, doc in QUEUE_GAUGES]
        ready, unacked, scheduled, consumers = gauges
        for vhost, name, qs in b.each_queue():
            key = [vhost, name, qs.kind]
            q = qs.queue
            ready.add_metric(key, q.ready_count)
            unacked.add_metric(key, len(q.leases))
            scheduled.add_metric(key, q.staged_count)
            consumers.add_metric(key, len(qs.consumers))
        yield from gauges
        lag = GaugeMetricFamily("logbus_consumer_group_lag", "Records a consumer group has not committed (no "
                                "committed offset: from the log start)", labels=("group", "topic", "partition"))
        offset = GaugeMetricFamily("logbus_consumer_group_committed_offset", "A group's committed offset",
                                   labels=("group", "topic", "partition"))
        for group in b.list_consumer_groups():
            for p in group.partitions:
                key = [group.group, p.topic, str(p.partition)]
                lag.add_metric(key, p.lag)
                if p.committed is not None:
                    offset.add_metric(key, p.committed)
        yield lag
        yield offset
