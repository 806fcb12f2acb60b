"""The queue journal writes a turn's changes at most once per ``interval`` (decision 0057):
several turns go as one batch, an entry settled within the interval never reaches the
state store, a quiet spell is written by a timer with the marks owed, and every other
commit writes at once. (A refused batch is tried again at every turn: the storage fault
tests, tests/core/test_storage_faults.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest
from twisted.internet.task import Clock

from logbus.core.log import LogManager, Record
from logbus.core.queues.entry import Entry
from logbus.core.queues.journal import QueueStore, stored_marks
from logbus.core.state import CF_QUEUES, StateStore, queue_entry_key
from tests.core.conftest import topic_config

INTERVAL = 0.010


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    s = StateStore(tmp_path / "state")
    yield s
    s.close()


def entry(seq: int) -> Entry:
    return Entry(seq, "t", 0, seq, 10)


def turn(clock: Clock, seconds: float = 0.0) -> None:
    """The end of a turn (the tick's callLater(0)), ``seconds`` later."""
    clock.advance(seconds)


def stored(store: StateStore, seq: int) -> bool:
    return store.get(CF_QUEUES, queue_entry_key("/", "q", seq)) is not None


def test_turns_within_the_interval_are_one_batch_and_a_settled_entry_never_reaches_the_store(
        store: StateStore) -> None:
    clock = Clock()
    qs = QueueStore(store, clock, INTERVAL)
    j = qs.journal("/", "q", exact=True)
    j.added(entry(0))
    turn(clock)
    assert qs.commits == 1 and stored(store, 0)  # the first: at once (none written yet)
    j.added(entry(1))
    turn(clock, 0.001)
    j.settled(1)  # acked two turns later, within the interval
    j.added(entry(2))
    turn(clock, 0.001)
    assert qs.commits == 1 and not stored(store, 2)  # waiting
    j.added(entry(3))
    turn(clock, INTERVAL)  # a turn past the interval writes the batch
    assert qs.commits == 2 and stored(store, 2) and stored(store, 3) and not stored(store, 1)
    # entry 1: put and deleted in the same batch's span, so neither was written
    assert qs.pending is False


def test_a_quiet_spell_is_written_by_the_timer_with_the_marks_owed(
        store: StateStore, open_log: Callable[..., LogManager]) -> None:
    clock = Clock()
    qs = QueueStore(store, clock, INTERVAL)
    p = open_log().open_topic("t", topic_config(), create=True).partition(0)

    def appended(n: int) -> None:
        for _ in range(n):
            p.append([Record(None, b"x")], callback=lambda _: None)

    appended(5)
    qs.commit_due([p])  # the log's drain: first mark, at once
    assert stored_marks(store) == {("t", 0): 5}
    j = qs.journal("/", "q", exact=True)
    j.added(entry(5))
    appended(1)
    qs.commit_due([p])  # 0 s later: deferred, its end (6) noted now
    turn(clock)  # the turn's end: deferred too
    appended(3)  # appended to since, not yet routed: not what the batch may mark
    assert p.next_offset == 9
    assert stored_marks(store) == {("t", 0): 5} and not stored(store, 5)
    clock.advance(INTERVAL)  # no turn: the batch is due, not yet written
    assert qs.commits == 1
    clock.advance(INTERVAL)  # the fallback timer, an interval after the batch was due
    assert stored_marks(store) == {("t", 0): 6} and stored(store, 5) and qs.commits == 2


def test_a_commit_asked_for_by_name_writes_at_once(store: StateStore) -> None:
    clock = Clock()
    qs = QueueStore(store, clock, INTERVAL)
    j = qs.journal("/", "q", exact=True)
    j.added(entry(0))
    turn(clock)
    assert qs.commits == 1
    j.added(entry(1))
    turn(clock)
    assert qs.commits == 1 and not stored(store, 1)  # a turn's: deferred
    qs.commit()  # a queue's load, a timer scan, a stop, an MQTT PUBREC: now
    assert qs.commits == 2 and stored(store, 1)
    clock.advance(2 * INTERVAL)
    assert qs.commits == 2  # the fallback timer finds nothing left to write
