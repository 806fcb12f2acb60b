"""Sparse offset and time indexes against a linear model; damage detection."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logbus.core.log.index import IndexDamaged, OffsetIndex, TimeIndex

increasing = st.lists(st.integers(1, 1000), min_size=0, max_size=50).map(
    lambda steps: [sum(steps[: i + 1]) for i in range(len(steps))]
)


@given(increasing, st.integers(-5, 60_000))
def test_offset_floor_matches_model(offsets: list[int], probe: int) -> None:
    idx = OffsetIndex()
    for o in offsets:
        idx.append(o, o * 7)
    below = [o for o in offsets if o <= probe]
    assert idx.floor(probe) == ((below[-1], below[-1] * 7) if below else (0, 0))
    again = OffsetIndex.from_bytes(idx.to_bytes(), log_size=10**9)
    assert list(again.rel_offsets) == offsets and list(again.positions) == [o * 7 for o in offsets]


@given(increasing, st.integers(0, 60_000))
def test_time_start_for_is_safe(stamps: list[int], target: int) -> None:
    # entry i: the largest timestamp up to batch i (offset 10*i) is stamps[i]
    idx = TimeIndex()
    for i, t in enumerate(stamps):
        idx.append(t, 10 * i)
    start = idx.start_for(target)
    # every entry at or before ``start`` whose timestamp is < target is skipped safely
    older = [10 * i for i, t in enumerate(stamps) if t < target]
    assert start == (older[-1] if older else 0)
    again = TimeIndex.from_bytes(idx.to_bytes(), max_rel_offset=10**9)
    assert list(again.timestamps) == stamps


def test_damage_detected() -> None:
    idx = OffsetIndex()
    idx.append(0, 0)
    idx.append(5, 100)
    data = idx.to_bytes()
    with pytest.raises(IndexDamaged):
        OffsetIndex.from_bytes(data[:-1], 1000)
    with pytest.raises(IndexDamaged):
        OffsetIndex.from_bytes(data[8:] + data[:8], 1000)  # out of order
    with pytest.raises(IndexDamaged):
        OffsetIndex.from_bytes(data, 100)  # points past the log end
    t = TimeIndex()
    t.append(10, 0)
    t.append(5, 1)
    with pytest.raises(IndexDamaged):
        TimeIndex.from_bytes(t.to_bytes(), 10)


@given(st.binary(max_size=200), st.integers(0, 10**6))
def test_index_decoders_accept_or_refuse_any_bytes(data: bytes, limit: int) -> None:
    """Any file content either loads as an index that honours its invariants or is
    refused with IndexDamaged: nothing else escapes."""
    try:
        idx = OffsetIndex.from_bytes(data, limit)
    except IndexDamaged:
        pass
    else:
        offs, poss = list(idx.rel_offsets), list(idx.positions)
        assert offs == sorted(set(offs)) and poss == sorted(set(poss))
        assert all(p < limit for p in poss)
    try:
        tidx = TimeIndex.from_bytes(data, limit)
    except IndexDamaged:
        pass
    else:
        assert list(tidx.timestamps) == sorted(tidx.timestamps)
        assert all(o <= limit for o in tidx.rel_offsets)
