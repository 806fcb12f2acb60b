"""Prometheus metrics of one broker. Each Broker owns a registry of its own, so several
brokers (tests) can live in one process. Per-append counters are not here: the log
keeps them as plain integers and a collector reads them at scrape time; so are the
flusher's (``Flushes``: a sync a message or two under a device fleet's load, where
prometheus_client's histogram took a lock and a Python bucket search per sync)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

FLUSH_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)


class Flushes(Collector):
    """The flusher's syncs, as plain numbers read at scrape time: ``logbus_flush_seconds``
    (a histogram of the duration of one group-commit flush: fdatasync/syncfs) and
    ``logbus_flush_files_total`` (files made durable)."""

    def __init__(self) -> None:
        self.buckets = [0] * (len(FLUSH_BUCKETS) + 1)  # per bound (not cumulative), then +Inf
        self.count = 0
        self.seconds = 0.0
        self.files = 0

    def observe(self, seconds: float, files: int) -> None:
        self.buckets[bisect_left(FLUSH_BUCKETS, seconds)] += 1
        self.count += 1
        self.seconds += seconds
        self.files += files

    def collect(self) -> Iterator[Metric]:
        h = HistogramMetricFamily("logbus_flush_seconds",
                                  "Duration of one group-commit flush cycle (fdatasync/syncfs)")
        cumulative, total = [], 0
        for bound, n in zip([*map(str, FLUSH_BUCKETS), "+Inf"], self.buckets):
            total += n
            cumulative.append((bound, total))
        h.add_metric([], cumulative, self.seconds)
        yield h
        yield CounterMetricFamily("logbus_flush_files", "Files made durable by the flusher", value=self.files)


class Tally(Collector):
    """A counter kept as a plain int where it is counted (a method call and an add, where
    prometheus_client's Counter takes a lock), read at scrape time as ``NAME_total``."""

    def __init__(self, name: str, documentation: str) -> None:
        self.name = name
        self.documentation = documentation
        self.value = 0

    def inc(self) -> None:
        self.value += 1

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, value=self.value)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # one series per queue and consumer-group partition (/metrics/per-object): unbounded,
        # so not in the default set (core/inventory_metrics.py)
        self.per_object = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)  # process_resident_memory_bytes, process_open_fds, CPU
        self.flushes = Flushes()
        r.register(self.flushes)
        self.partitions = Gauge("logbus_partitions", "Open partitions", registry=r)
        self.topics = Gauge("logbus_topics", "Topics", registry=r)
        self.open_files = Gauge("logbus_open_files", "Segment files held open", registry=r)
        self._counters: dict[str, Counter] = {}
        self._tallies: dict[str, Tally] = {}

    def counter(self, name: str, documentation: str) -> Counter:
        """A gateway's own counter, made on first use and shared by every later caller
        (a broker may serve one protocol through several factories)."""
        c = self._counters.get(name)
        if c is None:
            c = self._counters[name] = Counter(name, documentation, registry=self.registry)
        return c

    def tally(self, name: str, documentation: str) -> Tally:
        """A counter counted where it happens often (per message, per delivery round), made
        on first use and shared by every later caller."""
        t = self._tallies.get(name)
        if t is None:
            t = self._tallies[name] = Tally(name, documentation)
            self.registry.register(t)
        return t
