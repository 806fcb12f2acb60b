"""The HTTP request clock (gateway/http/timeouts.py): which deadline holds in each phase
of a connection's requests, with no socket and no reactor."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from logbus.gateway.http.timeouts import Phase, RequestClock, Timeouts

T = Timeouts(head=10.0, idle=75.0, body=60.0)


def test_first_head_counts_from_the_accept() -> None:
    clock = RequestClock(T, 100.0)
    assert (clock.phase, clock.deadline) == (Phase.HEAD, 110.0)
    clock.data(105.0)  # bytes of the head do not move it
    assert clock.deadline == 110.0 and clock.started
    assert clock.expired(109.9) is None
    assert clock.expired(110.0) is Phase.HEAD


def test_body_counts_from_the_end_of_the_head_and_handling_has_no_deadline() -> None:
    clock = RequestClock(T, 0.0)
    clock.data(1.0)
    clock.head_done(2.0)
    assert (clock.phase, clock.deadline) == (Phase.BODY, 62.0)
    clock.data(50.0)  # body bytes do not move it either
    assert clock.expired(62.0) is Phase.BODY
    clock.body_done()
    assert (clock.phase, clock.deadline) == (Phase.HANDLING, None)
    assert clock.expired(1e9) is None


def test_kept_alive_connection_idles_then_a_new_head_counts_from_its_first_byte() -> None:
    clock = RequestClock(T, 0.0)
    clock.head_done(1.0)
    clock.body_done()
    clock.answered(5.0)
    assert (clock.phase, clock.deadline, clock.started) == (Phase.IDLE, 80.0, False)
    assert clock.expired(80.0) is Phase.IDLE
    clock.data(70.0)
    assert (clock.phase, clock.deadline, clock.started) == (Phase.HEAD, 80.0, True)


def test_stop_ends_every_deadline() -> None:
    clock = RequestClock(T, 0.0)
    clock.stop()
    assert clock.deadline is None and clock.expired(1e9) is None


EVENTS = st.lists(st.sampled_from(["data", "head_done", "body_done", "answered"]), max_size=30)


@given(EVENTS, st.lists(st.floats(0, 100), min_size=30, max_size=30))
def test_a_deadline_exactly_when_a_phase_has_one(events: list[str], gaps: list[float]) -> None:
    """In any order of events: HANDLING has no deadline, every other phase one no later
    than its timeout from now, and expired() names the phase once it has passed."""
    now = 0.0
    clock = RequestClock(T, now)
    limit = {Phase.HEAD: T.head, Phase.BODY: T.body, Phase.IDLE: T.idle}
    for event, gap in zip(events, gaps):
        now += gap
        if event in ("data",):
            clock.data(now)
        elif event == "body_done":
            clock.body_done()
        else:
            getattr(clock, event)(now)
        if clock.phase is Phase.HANDLING:
            assert clock.deadline is None
        else:
            assert clock.deadline is not None and clock.deadline <= now + limit[clock.phase]
            assert clock.expired(clock.deadline) is clock.phase
