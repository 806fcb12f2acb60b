"""core/quiet.py: what a burst left behind is given back once per quiet spell, after
the work's count has stood still for QUIET_SECONDS, and not while it moves."""

from __future__ import annotations

import gc
import weakref

from logbus.core.quiet import Leftovers, QuietSpell


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_released_once_per_quiet_spell() -> None:
    clock, work, released = Clock(), [0], []
    spell = QuietSpell(lambda: work[0], lambda: released.append(clock.now), quiet_seconds=10, clock=clock)
    for _ in range(30):  # busy: the count moves every second
        work[0] += 1
        spell.check()
        clock.now += 1
    assert released == []
    for _ in range(25):  # quiet for 25 s: released once, 10 s in
        spell.check()
        clock.now += 1
    assert released == [139.0] and spell.spells == 1
    work[0] += 1  # a little work, then quiet again: a second spell
    for _ in range(12):
        spell.check()
        clock.now += 1
    assert len(released) == 2


def test_not_released_while_the_count_moves_now_and_then() -> None:
    clock, work, released = Clock(), [0], []
    spell = QuietSpell(lambda: work[0], lambda: released.append(1), quiet_seconds=10, clock=clock)
    for second in range(100):
        if second % 9 == 0:
            work[0] += 1
        spell.check()
        clock.now += 1
    assert released == []


class Node:
    me: Node | None = None


def cycle() -> weakref.ref[Node]:
    """An object only a reference cycle keeps (as a closed connection's protocol and
    transport): freed by a full collection, not by reference counting."""
    n = Node()
    n.me = n
    return weakref.ref(n)


def test_a_full_collection_only_when_connections_closed() -> None:
    closes = [0]
    leftovers = Leftovers(lambda: None, lambda: [], lambda: closes[0])
    gc.disable()
    try:
        ref = cycle()
        leftovers.release()
        assert ref() is not None  # nothing closed since start: no collection
        closes[0] += 1
        leftovers.release()
        assert ref() is None
        ref = cycle()
        leftovers.release()  # none closed since
        assert ref() is not None
    finally:
        gc.enable()


def test_the_routers_forget_their_routes() -> None:
    from logbus.core.routing.definitions import TOPIC
    from logbus.core.routing.router import Router

    r = Router("/")
    r.add_queue("q")
    r.declare("t", TOPIC)
    r.bind("t", "q", "#")
    assert r.route("t", "a") == {"q"}
    Leftovers(lambda: None, lambda: [], lambda: 0, lambda: [r]).release()
    assert r.forget_routes() == 0  # gone already
    assert r.route("t", "a") == {"q"}
