"""The flusher's metrics (core/metrics.Flushes), kept as plain numbers and read at scrape
time, read exactly as prometheus_client's own Histogram and Counter of the same
observations do."""

from __future__ import annotations

from hypothesis import given, strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from logbus.core.metrics import FLUSH_BUCKETS, Flushes

syncs = st.lists(st.tuples(st.sampled_from([*FLUSH_BUCKETS, 0.0, 2.0]) | st.floats(0, 3), st.integers(1, 50)),
                 max_size=40)


@given(syncs)
def test_flushes_scrape_as_prometheus_clients_histogram(observed: list[tuple[float, int]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    flushes = Flushes()
    ours.register(flushes)
    h = Histogram("logbus_flush_seconds", "Duration of one group-commit flush cycle (fdatasync/syncfs)",
                  buckets=FLUSH_BUCKETS, registry=theirs)
    c = Counter("logbus_flush_files", "Files made durable by the flusher", registry=theirs)
    for seconds, files in observed:
        flushes.observe(seconds, files)
        h.observe(seconds)
        c.inc(files)
    def lines(r: CollectorRegistry) -> list[str]:
        return sorted(line for line in generate_latest(r).decode().splitlines() if "_created" not in line)
    assert lines(ours) == lines(theirs)
