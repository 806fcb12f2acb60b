"""Prometheus metrics of one broker. Each Broker owns a registry of its own, so several
brokers (tests) can live in one process. Per-append counters are not here: the log
keeps them as plain integers and a collector reads them at scrape time."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

FLUSH_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # one series per queue and consumer-group partition (/metrics/per-object): unbounded,
        # so not in the default set (core/inventory_metrics.py)
        self.per_object = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)  # process_resident_memory_bytes, process_open_fds, CPU
        self.flush_seconds = Histogram(
            "logbus_flush_seconds",
            "Duration of one group-commit flush cycle (fdatasync/syncfs)",
            buckets=FLUSH_BUCKETS,
            registry=r,
        )
        self.flush_files = Counter(
            "logbus_flush_files", "Files made durable by the flusher", registry=r
        )
        self.partitions = Gauge("logbus_partitions", "Open partitions", registry=r)
        self.topics = Gauge("logbus_topics", "Topics", registry=r)
        self.open_files = Gauge("logbus_open_files", "Segment files held open", registry=r)
        self._counters: dict[str, Counter] = {}

    def counter(self, name: str, documentation: str) -> Counter:
        """A gateway's own counter, made on first use and shared by every later caller
        (a broker may serve one protocol through several factories)."""
        c = self._counters.get(name)
        if c is None:
            c = self._counters[name] = Counter(name, documentation, registry=self.registry)
        return c
