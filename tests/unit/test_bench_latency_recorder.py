"""The latency benches' receiver arithmetic (bench/common.py) on a known series: what a
round reports as its latencies, its duplicates and its slowest messages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.bench_path import bench_on_path


@pytest.fixture(scope="module")
def common() -> Iterator[Any]:
    with bench_on_path():
        import common
        yield common


def test_a_known_series(common: Any) -> None:
    rec = common.LatencyRecorder(total=5, warmup=2)
    head = common.LATENCY_HEAD
    t0 = 1000 * 10**9  # 1,000 s on CLOCK_MONOTONIC
    us = 1000
    # (sequence, due, sent, received), µs after t0; message 3 comes twice
    for seq, due, sent, now in [(0, 0, 10, 50), (1, 100, 110, 400), (2, 200, 205, 1205),
                                (3, 300, 300, 8300), (3, 300, 300, 9000), (4, 400, 450, 650)]:
        rec(head.pack(seq, t0 + due * us, t0 + sent * us) + b"pad", t0 + now * us)
    assert rec.duplicates == 1
    out = rec.result()
    assert out["latencies"] == [1000 * us, 8000 * us, 200 * us]  # the warm-up (0, 1) left out
    assert out["from_schedule"] == [1005 * us, 8000 * us, 250 * us]
    assert out["received"] == [t0 + 1205 * us, t0 + 8300 * us, t0 + 650 * us]
    slowest = common.slowest(out["latencies"], out["received"], count=2)
    assert slowest == [{"sent_s": 1000.0003, "ms": 8.0}, {"sent_s": 1000.000205, "ms": 1.0}]
