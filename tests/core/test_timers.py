"""The timer index (core/queues/timers.py) on real RocksDB in a temp dir, with Twisted's
deterministic clock as the reactor: what happens when handing a released timer over
fails (issue 30, item 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from twisted.internet.task import Clock

from logbus.core.errors import StorageError
from logbus.core.queues.journal import QueueStore
from logbus.core.queues.timers import LEAD_MS, Timers
from logbus.core.state import StateStore
from logbus.core.state_pb2 import TimerRecord

T0 = 1_700_000_000_000  # epoch ms at the start of each test


class Bench:
    """Timers on a state store in ``path``; ``on_due`` records what it was handed and
    raises for the offsets in ``bad``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.reactor = Clock()
        self.reactor.advance(T0 / 1000)
        self.handled: list[int] = []
        self.bad: set[int] = set()
        self.refused: set[int] = set()  # offsets whose hand-over the state store refuses
        self.failures = 0
        self.store: StateStore | None = None
        self.open()

    def now(self) -> int:
        return round(self.reactor.seconds() * 1000)

    def open(self) -> None:
        self.store = StateStore(self.path)
        self.qs = QueueStore(self.store)
        self.timers = Timers(self.qs, self.store, self.now, self.reactor, failed=self.failed)

    def failed(self) -> None:
        self.failures += 1

    def on_due(self, *args: Any) -> None:
        # one timer at a time (due_ms, record); the code before issue 30 passed a list
        batch = args[0] if len(args) == 1 else [args]
        for _, rec in batch:
            if rec.offset in self.bad:
                raise RuntimeError(f"routing offset {rec.offset} failed")
            if rec.offset in self.refused:
                raise StorageError(f"state store write failed: offset {rec.offset}")
            self.handled.append(rec.offset)

    def add(self, due_ms: int, offset: int) -> None:
        self.timers.add(due_ms, TimerRecord(kind=TimerRecord.DELAY, topic="t", partition=0, offset=offset))

    def restart(self) -> None:
        self.timers.disarm()
        self.qs.commit()
        assert self.store is not None
        self.store.close()
        self.open()

    def close(self) -> None:
        self.timers.disarm()
        if self.store is not None:
            self.store.close()


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path / "state")
    yield b
    b.close()


def test_one_failing_timer_loses_nothing_and_stops_no_other(bench: Bench) -> None:
    """on_due raises for one timer of a batch: the others are handled, the failed one
    stays stored (across a restart too), is counted, and is handed over again later."""
    for i in range(5):
        bench.add(T0 + LEAD_MS + 100 + i, i)
    bench.bad = {2}
    bench.timers.arm(bench.on_due)
    bench.reactor.advance(0.2)  # within LEAD_MS of every due time: released
    assert sorted(bench.handled) == [0, 1, 3, 4]
    assert bench.failures == 1
    assert bench.timers.pending() == 1  # the failed one is kept
    bench.restart()
    assert bench.timers.pending() == 1
    bench.bad = set()
    bench.timers.arm(bench.on_due)
    for _ in range(200):  # retried after a backoff, whatever it is (bounded: 200 s)
        if 2 in bench.handled:
            break
        bench.reactor.advance(1)
    assert sorted(bench.handled) == [0, 1, 2, 3, 4]
    assert bench.timers.pending() == 0


def test_a_timer_that_keeps_failing_is_retried_with_a_growing_backoff(bench: Bench) -> None:
    bench.add(T0 + 10, 7)
    bench.bad = {7}
    bench.timers.arm(bench.on_due)
    fails_at: list[int] = []
    for _ in range(400):
        before = bench.failures
        bench.reactor.advance(0.5)
        if bench.failures > before:
            fails_at.append(bench.now())
        if len(fails_at) == 4:
            break
    assert len(fails_at) == 4 and bench.timers.pending() == 1
    gaps = [b - a for a, b in zip(fails_at, fails_at[1:])]
    assert gaps[0] >= 1000 and gaps[0] < gaps[1] < gaps[2]  # backed off, not retried every turn
    bench.bad = set()
    for _ in range(400):
        if bench.handled:
            break
        bench.reactor.advance(0.5)
    assert bench.handled == [7] and bench.timers.pending() == 0


def test_a_hand_over_the_store_refused_is_a_warning_line_and_a_bugs_keeps_its_traceback(bench: Bench,
                                                                                       caplog: Any) -> None:
    """A StorageError handing a timer over (the disk, not a bug) is one warning line naming
    the timer, with no traceback; any other exception is logged with its traceback. Both
    timers are kept and handed over again later."""
    bench.add(T0 + 10, 1)
    bench.add(T0 + 10, 2)
    bench.refused, bench.bad = {1}, {2}
    with caplog.at_level("INFO", logger="logbus.core.queues.timers"):
        bench.timers.arm(bench.on_due)
        bench.reactor.advance(0.2)
    [refused] = [r for r in caplog.records if "t/0 offset 1 " in r.getMessage()]
    [bug] = [r for r in caplog.records if "t/0 offset 2 " in r.getMessage()]
    assert refused.levelno == 30 and refused.exc_info is None
    assert "state store write failed" in refused.getMessage()
    assert bug.levelno == 40 and bug.exc_info is not None
    assert bench.failures == 2 and bench.timers.pending() == 2


def test_timer_ids_are_never_given_twice_across_restarts(bench: Bench) -> None:
    """Timers due in the same millisecond before and after restarts keep distinct keys:
    the block of ids the first timer of a run reserved (in the journal's batch with it)
    is not given again after a restart."""
    keys = []
    for run in range(3):
        for i in range(3):
            keys.append(bench.timers.add(T0 + 10, TimerRecord(kind=TimerRecord.DELAY, topic="t", offset=run * 3 + i)))
        bench.restart()
    assert len(set(keys)) == 9 and bench.timers.pending() == 9
