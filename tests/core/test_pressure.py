"""The resource monitor on a temporary directory, with the machine's real readings:
alarms are raised by moving the limits past them, never by faking the disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from logbus.core.errors import InvalidConfig
from logbus.core.pressure import (
    AlarmCollector,
    ResourceMonitor,
    check_watermark,
    resident_memory,
    total_memory,
)

ABOVE_ANY_DISK = 1 << 60  # more free bytes than any filesystem here has


def recorder(monitor: ResourceMonitor) -> list[frozenset[str]]:
    seen: list[frozenset[str]] = []
    monitor.subscribe(seen.append)
    return seen


def test_readings_are_sane(tmp_path: Path) -> None:
    monitor = ResourceMonitor(tmp_path)
    assert monitor.check() == frozenset()  # 40% of RAM, 50 MB free: not this test process
    st = os.statvfs(tmp_path)
    assert 0 < monitor.disk_free <= st.f_blocks * st.f_frsize
    assert 1 << 20 < monitor.memory_used < total_memory()  # a Python process: MBs, not all RAM
    assert monitor.memory_limit == int(0.4 * total_memory())


def test_disk_alarm_is_raised_and_cleared_once_each(tmp_path: Path) -> None:
    monitor = ResourceMonitor(tmp_path)
    seen = recorder(monitor)
    monitor.check()
    assert seen == []  # nothing changed: nobody is told

    assert monitor.set_limits(disk_free_limit=ABOVE_ANY_DISK) == {"disk"}
    assert seen == [{"disk"}]  # the setter re-checks at once
    monitor.check()
    monitor.check()
    assert seen == [{"disk"}] and monitor.alarms == {"disk"}  # still set: no repeat

    monitor.set_limits(disk_free_limit=1)
    assert seen == [{"disk"}, frozenset()]
    assert monitor.to_json()["alarms"] == []


def test_memory_limit_below_the_rss_raises_the_memory_alarm(tmp_path: Path) -> None:
    monitor = ResourceMonitor(tmp_path)
    seen = recorder(monitor)
    below = resident_memory() // 2  # an absolute watermark: bytes
    monitor.set_limits(memory_high_watermark=below)
    assert monitor.memory_limit == below
    assert seen == [{"memory"}]
    monitor.set_limits(memory_high_watermark=1.0)  # a fraction: all of RAM
    assert monitor.memory_limit == total_memory()
    assert seen == [{"memory"}, frozenset()]


def test_both_alarms_at_once(tmp_path: Path) -> None:
    monitor = ResourceMonitor(tmp_path, memory_high_watermark=2, disk_free_limit=ABOVE_ANY_DISK)
    seen = recorder(monitor)
    monitor.check()
    assert seen == [{"memory", "disk"}]
    info = monitor.to_json()
    assert info["alarms"] == ["memory", "disk"]
    assert (info["memory_high_watermark"], info["memory_limit_bytes"]) == (2, 2)
    assert info["disk_free_limit"] == ABOVE_ANY_DISK
    assert info["memory_used_bytes"] > 2 and info["disk_free_bytes"] > 0


def test_bad_limits_change_nothing(tmp_path: Path) -> None:
    monitor = ResourceMonitor(tmp_path)
    with pytest.raises(InvalidConfig, match="^disk_free_limit: "):
        monitor.set_limits(memory_high_watermark=0.9, disk_free_limit=-1)
    assert (monitor.memory_high_watermark, monitor.disk_free_limit) == (0.4, 50_000_000)
    with pytest.raises(InvalidConfig, match="^memory_high_watermark: "):
        ResourceMonitor(tmp_path, memory_high_watermark=0)


@pytest.mark.parametrize(
    "value, expected",
    [(0.4, 0.4), (1, 1.0), (1.0, 1.0), (2, 2), (2e9, 2_000_000_000), (1 << 40, 1 << 40)],
)
def test_watermark_is_a_fraction_or_bytes(value: float, expected: float) -> None:
    got = check_watermark(value)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("value", [0, -0.5, 1.5, float("nan"), float("inf"), True, "0.4", None])
def test_bad_watermarks(value: object) -> None:
    with pytest.raises(ValueError, match="fraction of RAM"):
        check_watermark(value)


def test_alarm_gauge(tmp_path: Path) -> None:
    monitor = ResourceMonitor(tmp_path)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(AlarmCollector(monitor))
    monitor.set_limits(disk_free_limit=ABOVE_ANY_DISK)

    def gauge(resource: str) -> float | None:
        return registry.get_sample_value("logbus_resource_alarm", {"resource": resource})

    assert (gauge("memory"), gauge("disk")) == (0.0, 1.0)
    monitor.set_limits(disk_free_limit=0)
    assert gauge("disk") == 0.0
