"""Failed logins from one host slowed down after a burst (core/access/throttle.py), on a
clock the test moves."""

from __future__ import annotations

from logbus.core.access.throttle import LoginThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_is_free_then_each_failure_waits_twice_as_long_up_to_the_longest() -> None:
    clock = Clock()
    t = LoginThrottle(clock, burst=3, window=60, first=0.25, longest=2.0)
    assert [t.failed("10.0.0.1") for _ in range(8)] == [0, 0, 0, 0.25, 0.5, 1.0, 2.0, 2.0]
    assert t.failed("10.0.0.2") == 0  # another host: its own count


def test_a_success_or_time_forgets_failures() -> None:
    clock = Clock()
    t = LoginThrottle(clock, burst=2, window=60, first=1.0, longest=8.0)
    for _ in range(4):
        t.failed("h")
    t.succeeded("h")
    assert t.failed("h") == 0
    for _ in range(3):
        t.failed("h")
    clock.now += 61  # all older than the window
    assert t.failed("h") == 0


def test_the_table_is_bounded() -> None:
    t = LoginThrottle(Clock(), burst=1, max_hosts=100)
    for i in range(1000):
        t.failed(f"10.0.{i // 256}.{i % 256}")
    assert len(t._failures) == 100
    assert t.failed("10.0.3.231") > 0  # among the most recent: still counted
