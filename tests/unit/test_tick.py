"""core/tick.py against a simple model (decision 0055): a driven Tick runs the turn's
``later`` work at every ``run_pending``, and its ``paced`` work first when ``pace`` has
passed since the last pass that ran paced work began (or the reactor stops); ``later`` work
asked for during a pass runs in that pass, ``paced`` work asked for during one waits."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from logbus.core.tick import Tick

PACE = 1.0


class Driving:
    """The reactor's side of a driven tick: nothing is asked of it."""

    def callLater(self, *args: Any) -> None:  # noqa: N802 - Twisted's name
        raise AssertionError("a driven tick asks for no timed call")


# an op: ("later", id, asks) / ("paced", id, asks), asks: what the item asks for when it
# runs ("later" or "paced" with id + 1000, or None); ("run", dt): time moves by dt, then
# run_pending; ("stop",): run_pending(-1)
ops = st.lists(st.one_of(
    st.tuples(st.sampled_from(["later", "paced"]), st.integers(0, 999), st.sampled_from([None, "later", "paced"])),
    st.tuples(st.just("run"), st.sampled_from([0.0, 0.3, 0.7, 1.0, 2.5])),
    st.tuples(st.just("stop")),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_a_driven_tick_runs_what_the_model_says(program: list[tuple[Any, ...]]) -> None:
    tick = Tick(Driving(), pace=PACE)
    tick._driven = True
    ran: list[int] = []
    now = 100.0

    def item(i: int, asks: str | None) -> Any:
        def run() -> None:
            ran.append(i)
            if asks == "later":
                tick.later(item(i + 1000, None))
            elif asks == "paced":
                tick.paced(item(i + 1000, None))
        return run

    # the model
    m_work: list[tuple[int, str | None]] = []
    m_paced: list[tuple[int, str | None]] = []
    m_last = -1e9
    expected: list[int] = []

    def model_pass(with_paced: bool) -> None:
        nonlocal m_work, m_paced
        batch: list[tuple[int, str | None]] = []
        if with_paced:
            batch, m_paced = m_paced, []
        while batch or m_work:
            if not batch:
                batch, m_work = m_work, []
            i, asks = batch.pop(0)
            expected.append(i)
            if asks == "later":
                m_work.append((i + 1000, None))
            elif asks == "paced":
                m_paced.append((i + 1000, None))

    for op in program:
        stop = False
        if op[0] in ("later", "paced"):
            _, i, asks = op
            (tick.later if op[0] == "later" else tick.paced)(item(i, asks))
            (m_work if op[0] == "later" else m_paced).append((i, asks))
        else:
            stop = op[0] == "stop"
            if not stop:
                now += op[1]
            tick.run_pending(-1.0 if stop else now)
            if m_paced and (stop or now - m_last >= PACE):
                m_last = -1.0 if stop else now
                model_pass(True)
            elif m_work:
                model_pass(False)
        assert ran == expected
        assert tick.pending == bool(m_work or m_paced)
        if tick.pending and not stop:
            assert tick.wait(now) == (0.0 if m_work else max(0.0, m_last + PACE - now))
