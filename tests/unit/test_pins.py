"""core/queues/pins.py against the slow, obvious version: the minimum of a multiset of
offsets per partition, under any sequence of adds and removes (Hypothesis)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logbus.compiled import status
from logbus.core.queues import pins as pins_mod
from logbus.core.queues.pins import OffsetPins, lowest

PARTS = [("a", 0), ("a", 1), ("b", 0)]
ops = st.lists(st.tuples(st.booleans(), st.sampled_from(PARTS), st.integers(0, 3000)), max_size=300)


@settings(max_examples=300, deadline=None)
@given(ops=ops, shift=st.sampled_from([0, 4, 10]))
def test_floor_is_the_lowest_pinned_offset(ops: list[tuple[bool, tuple[str, int], int]], shift: int) -> None:
    pins = OffsetPins(shift)
    ref: dict[tuple[str, int], Counter[int]] = {p: Counter() for p in PARTS}
    for add, part, offset in ops:
        if add:
            pins.add(*part, offset)
            ref[part][offset] += 1
        elif ref[part][offset]:  # removing what a holder pinned (nothing else is removed)
            pins.remove(*part, offset)
            ref[part][offset] -= 1
        for p in PARTS:
            live = [o for o, n in ref[p].items() if n > 0]
            want = None if not live else (min(live) >> shift) << shift
            assert pins.floor(*p) == want
            assert want is None or want <= min(live)
    assert sorted(pins.partitions()) == sorted(p for p in PARTS if +ref[p])


def test_the_heap_stays_bounded_while_the_lowest_is_stuck() -> None:
    """One old pin never removed, 100,000 offsets through above it: the heap holds
    about what is pinned, not what went through."""
    pins = OffsetPins()
    pins.add("t", 0, 0)
    for o in range(1, 100_000):
        pins.add("t", 0, o)
        pins.remove("t", 0, o)
        if o % 10_000 == 0:
            assert pins.floor("t", 0) == 0
    part = pins._parts[("t", 0)]
    assert len(part.heap) <= 2 * len(part.counts) + pins_mod._COMPACT_SLACK + 1


def test_lowest() -> None:
    assert lowest() is None and lowest(None, None) is None
    assert lowest(None, 5, 3, None) == 3


@pytest.mark.skipif(status()[0], reason="mypyc passes ints unboxed: a compiled holder's int is boxed anew "
                    "at the call whether or not pins.py is compiled; the pure build's property")
def test_an_offset_counted_is_the_holders_int_not_a_copy() -> None:
    """Without a shift the key is the offset the holder passed: a queue entry's own int,
    not a new one per pin (32 bytes each of a million queued entries)."""
    offset = 10**6 + 1
    pins = OffsetPins()
    pins.add("t", 0, offset)
    (key,) = pins._parts[("t", 0)].counts
    assert key is offset
