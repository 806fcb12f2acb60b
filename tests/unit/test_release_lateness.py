"""The release lateness histogram (core/queues/lateness.py) on a known series."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from logbus.core.queues.lateness import BOUNDS_MS, Lateness


def test_counts_fall_in_the_first_bucket_at_or_above_them() -> None:
    late = Lateness()
    for ms in (0, 1, 2, 3, 100, 101, 30_000, 30_001, 99_999):
        late.add(ms)
    assert late.counts[BOUNDS_MS.index(1)] == 2  # 0, 1 (le 1 ms)
    assert late.counts[BOUNDS_MS.index(2)] == 1
    assert late.counts[BOUNDS_MS.index(5)] == 1  # 3
    assert late.counts[BOUNDS_MS.index(100)] == 1
    assert late.counts[BOUNDS_MS.index(200)] == 1  # 101
    assert late.counts[BOUNDS_MS.index(30000)] == 1
    assert late.counts[-1] == 2  # over every bound
    assert late.total_ms == sum((0, 1, 2, 3, 100, 101, 30_000, 30_001, 99_999))


def test_scraped_as_a_cumulative_histogram_in_seconds() -> None:
    late = Lateness()
    for ms in (0, 7, 7, 250, 40_000):
        late.add(ms)
    registry = CollectorRegistry()
    registry.register(late)
    text = generate_latest(registry).decode()
    assert 'logbus_release_lateness_seconds_bucket{le="0.001"} 1.0' in text
    assert 'logbus_release_lateness_seconds_bucket{le="0.01"} 3.0' in text
    assert 'logbus_release_lateness_seconds_bucket{le="0.5"} 4.0' in text
    assert 'logbus_release_lateness_seconds_bucket{le="30.0"} 4.0' in text
    assert 'logbus_release_lateness_seconds_bucket{le="+Inf"} 5.0' in text
    assert "logbus_release_lateness_seconds_count 5.0" in text
    assert "logbus_release_lateness_seconds_sum 40.264" in text
