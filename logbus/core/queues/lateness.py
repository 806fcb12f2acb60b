"""How late staged entries (delayed messages, retries) became ready after their due
time: a histogram kept as plain counts, read at scrape time.

A staged entry waits in its queue until ``visible_ms`` (queue.py); ``Queue.unstage``
makes it ready at ``now_ms`` and adds ``now_ms - visible_ms`` here. A burst of 100,000
delayed messages due in one second is 100,000 additions, so each is a bisect and an
increment (well under a microsecond), not a ``prometheus_client.Histogram.observe``
(a lock and a loop over the buckets). Exposed as ``logbus_release_lateness_seconds``.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Iterator

from prometheus_client.core import HistogramMetricFamily

BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 30000)  # upper bounds (le), ms


class Lateness:
    def __init__(self) -> None:
        self.counts = [0] * (len(BOUNDS_MS) + 1)  # the last: over every bound
        self.total_ms = 0

    def add(self, late_ms: int) -> None:
        """One entry made ready ``late_ms`` after it was due (0 or more)."""
        self.counts[bisect_left(BOUNDS_MS, late_ms)] += 1
        self.total_ms += late_ms

    def collect(self) -> Iterator[HistogramMetricFamily]:
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(BOUNDS_MS, self.counts):
            running += count
            buckets.append((repr(bound / 1000), running))
        buckets.append(("+Inf", running + self.counts[-1]))
        yield HistogramMetricFamily(
            "logbus_release_lateness_seconds",
            "How late staged entries (delayed messages, retries) became ready after their due time",
            buckets=buckets, sum_value=self.total_ms / 1000)

    def describe(self) -> list[object]:
        return []
