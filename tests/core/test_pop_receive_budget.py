"""A pop receive is bounded in time (core/queues/pop.py RECEIVE_BUDGET_S): past its
budget it returns fewer messages than asked, but never fewer than RECEIVE_AT_LEAST of
those ready (a receive of a few on a busy machine gets all it asked for), and the next
receive takes the rest; nothing is lost or taken twice."""

from __future__ import annotations

from typing import Any

from logbus.core.broker import Broker
from logbus.core.message import Message
from logbus.core.queues import pop
from tests.core.test_dlq_replay import settle
from tests.loop import LoopReactor


def test_a_receive_past_its_budget_returns_fewer_and_the_next_takes_the_rest(tmp_path: Any, monkeypatch: Any) -> None:
    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop)
    b.start()
    try:
        b.topics.create_topic("t", {"flush": "none", "partitions": 1})
        assert b.pop_service.receive("g", "t", "m", 1, 60_000) == []
        settle(loop, b.admin.publish("t", [Message(b"k", str(i).encode()) for i in range(300)]))

        monkeypatch.setattr(pop, "RECEIVE_BUDGET_S", 3600.0)  # a budget no machine spends
        unbounded = b.pop_service.receive("g", "t", "m", 100, 60_000)
        assert len(unbounded) == 100

        monkeypatch.setattr(pop, "RECEIVE_BUDGET_S", 1e-9)  # spent at the first message
        seen = [p.message.value for p in unbounded]
        few = b.pop_service.receive("g", "t", "m", 2, 60_000)  # a few: all of them, whatever the clock
        assert len(few) == 2
        seen.extend(p.message.value for p in few)
        while True:
            got = b.pop_service.receive("g", "t", "m", 100, 60_000)
            if not got:
                break
            assert len(got) == min(pop.RECEIVE_AT_LEAST, 198 - (len(seen) - 102))
            seen.extend(p.message.value for p in got)
        assert seen == [str(i).encode() for i in range(300)]
    finally:
        b.stop()
        while loop.run_once():
            pass
