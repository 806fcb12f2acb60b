"""A queue's rows of ready entries (core/queues/ready.py) against a dict of seq -> entry,
under appends, takes at the head and out of order, with the taken prefix cut and the
removed rows squeezed out early; and ``Entries``, the seq -> entry mapping over rows and
objects."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logbus.core.queues import ready
from logbus.core.queues.entry import Entry
from logbus.core.queues.ready import Entries, Rows

TOPICS = ("a", "b", "c")

ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3), st.sampled_from(TOPICS), st.integers(0, 2**40),
              st.integers(0, 2**33), st.integers(0, 2**40), st.integers(0, 5)),
    st.tuples(st.just("head")),
    st.tuples(st.just("take"), st.integers(0, 10**6)),
    st.tuples(st.just("find"), st.integers(-2, 400)),
), max_size=120)


@pytest.fixture(autouse=True)
def small_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ready, "CUT_ROWS", 3)
    monkeypatch.setattr(Rows, "slack", 1)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_rows_against_a_dict(program: list[tuple]) -> None:
    rows = Rows(7)
    model: dict[int, Entry] = {}  # in seq order
    seq = 0
    for op in program:
        if op[0] == "append":
            _, gap, topic, offset, size, expires, deliveries = op
            seq += gap
            rows.append(seq, topic, 1, offset, size, expires, deliveries)
            model[seq] = Entry(seq, topic, 1, offset, size, 7, expires, deliveries)
        elif op[0] == "head":
            if model:
                first = next(iter(model))
                assert rows.pop_head() == model.pop(first)
            else:
                assert rows.first() == -1
        elif op[0] == "take":
            if model:
                want = list(model)[op[1] % len(model)]
                row = rows.find(want)
                assert row >= 0 and rows.take(row) == model.pop(want)
        else:
            assert (rows.find(op[1]) >= 0) == (op[1] in model)
        assert rows.live == len(model)
        assert rows.ready_seqs() == list(model)
        assert [rows.entry(row) for row in rows.rows()] == list(model.values())
        assert rows.removed <= rows.live + Rows.slack  # squeezed
        assert rows.head <= max(ready.CUT_ROWS, len(rows.seqs) // 2)  # cut
        first = rows.first()
        assert (rows.seqs[first] if first >= 0 else None) == next(iter(model), None)
    while model:
        first = next(iter(model))
        assert rows.pop_head() == model.pop(first)
    assert all(len(col) == 0 for col in rows._columns()) and rows.names == []


def test_entries_over_rows_and_objects() -> None:
    high, low = Rows(5), Rows(0)
    for seq in (1, 4, 6):
        high.append(seq, "t", 0, seq * 10, 1, 0, 0)
    for seq in (2, 3, 8):
        low.append(seq, "u", 2, seq * 10, 1, 0, 0)
    objects = {7: Entry(7, "t", 0, 70, 1), 0: Entry(0, "t", 0, 0, 1), 5: Entry(5, "t", 0, 50, 1, visible_ms=9)}
    entries = Entries(objects, {5: high, 0: low})
    assert list(entries) == list(range(9)) and len(entries) == 9 and entries
    assert [e.seq for e in entries.values()] == list(range(9))
    assert entries[7] is objects[7] and entries.get(4) == Entry(4, "t", 0, 40, 1, 5)
    assert entries.get(3) == Entry(3, "u", 2, 30, 1, 0) and 3 in entries and 9 not in entries
    assert entries.get(9) is None
    with pytest.raises(KeyError):
        entries[9]
    low.take(low.find(3))
    assert 3 not in entries and entries.locate(4) == (high, 1)
    assert not Entries({}, {0: Rows(0)})
