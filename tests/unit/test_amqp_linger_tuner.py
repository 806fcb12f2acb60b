"""The read linger's hill climber (gateway/amqp/linger.py) against model clients: one
bound by its rate sends more the longer we wait, one bound by its window sends the same
whatever we do. No sockets, no clocks: a model turns the linger into messages per read."""

from __future__ import annotations

import random
from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from logbus.gateway.amqp.linger import HOLD, WINDOW, LingerTuner

BASE = 0.001
TOP = 0.008


def rate_bound(per_ms: float, work_ms: float = 0.5) -> Callable[[float], int]:
    """A client that sends ``per_ms`` messages a millisecond: a read after a linger of L
    holds what arrived during L and during the previous read's processing."""
    return lambda linger: max(2, round(per_ms * (linger * 1000 + work_ms)))


def window_bound(window: int, per_ms: float = 15.0) -> Callable[[float], int]:
    """A client that may have ``window`` messages unanswered: it sends them and waits."""
    return lambda linger: min(window, max(2, round(per_ms * (linger * 1000 + 0.5))))


def drive(tuner: LingerTuner, client: Callable[[float], int], reads: int) -> list[int]:
    levels = []
    for _ in range(reads):
        levels.append(tuner.level)
        tuner.lingered(client(tuner.linger))
    return levels


def test_a_rate_bound_client_climbs_to_the_longest_linger_and_stays() -> None:
    tuner = LingerTuner(BASE, TOP)
    levels = drive(tuner, rate_bound(15), 4000)
    assert tuner.top_level == 8
    assert levels.index(8) <= 4 * WINDOW  # 1 -> 2 -> 4 -> 8, one window each
    after = levels[4 * WINDOW:]
    assert after.count(8) / len(after) >= HOLD / (HOLD + 1) - 0.01  # a probe down now and then


def test_a_window_bound_client_keeps_the_shortest_linger() -> None:
    for window in (2, 3, 10):
        tuner = LingerTuner(BASE, TOP)
        levels = drive(tuner, window_bound(window), 4000)
        assert max(levels) <= 2  # only probes, and each fails
        assert levels.count(1) / len(levels) >= HOLD / (HOLD + 1) - 0.01


def test_a_window_between_settles_where_the_window_fills() -> None:
    # 15/ms: 1 ms holds ~22 messages, so a window of 40 fills at 2 ms; 4 ms gains nothing
    tuner = LingerTuner(BASE, TOP)
    levels = drive(tuner, window_bound(40), 4000)
    tail = levels[1000:]
    assert max(tail) <= 4 and tail.count(2) / len(tail) >= 0.85


def test_it_follows_a_client_that_turns_window_bound_and_back() -> None:
    tuner = LingerTuner(BASE, TOP)
    drive(tuner, rate_bound(15), 500)
    assert tuner.level == 8
    levels = drive(tuner, window_bound(2), (HOLD + 1 + 4) * WINDOW)
    assert levels[-1] == 1  # back at the base within a hold and three probes down
    drive(tuner, rate_bound(15), (HOLD + 1 + 4) * WINDOW)
    assert tuner.level == 8


def test_noise_does_not_keep_a_rate_bound_client_down() -> None:
    rng = random.Random(7)
    clean = rate_bound(15)
    tuner = LingerTuner(BASE, TOP)
    levels = drive(tuner, lambda linger: max(2, round(clean(linger) * rng.uniform(0.7, 1.3))), 6000)
    assert sum(level == 8 for level in levels[1000:]) / 5000 >= 0.85


def test_a_fixed_linger_never_moves() -> None:
    tuner = LingerTuner(BASE, BASE)
    assert tuner.top_level == 1
    assert set(drive(tuner, rate_bound(15), 1000)) == {1}
    assert LingerTuner(BASE, 0.0).top_level == 1  # a top below the base: the base


def test_top_rounds_down_to_a_power_of_two_of_the_base() -> None:
    assert LingerTuner(0.001, 0.006).top_level == 4
    assert LingerTuner(0.002, 0.008).top_level == 4
    assert LingerTuner(0.0015, 0.012).top_level == 8


@given(st.lists(st.integers(2, 10_000), max_size=3000), st.sampled_from([1, 2, 3, 8, 16]))
def test_level_stays_a_power_of_two_within_bounds(reads: list[int], top: int) -> None:
    tuner = LingerTuner(BASE, BASE * top)
    for n in reads:
        tuner.lingered(n)
        assert 1 <= tuner.level <= tuner.top_level <= top
        assert tuner.level & (tuner.level - 1) == 0
        assert tuner.linger <= BASE * top * (1 + 1e-9)
