"""Group commit on a temp dir: when a sync runs on the reactor thread (small, nothing
queued for the flusher thread, the disk fast) and when it goes to the thread."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from logbus.core.log import LogManager, Record
from logbus.core.log import flusher as F
from tests.core.conftest import topic_config
from tests.loop import LoopReactor

OpenLog = Callable[..., LogManager]


def flushes(lm: LogManager) -> float:
    return lm.metrics.flushes.files


def test_a_small_sync_completes_in_the_tick_that_wrote_it(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(flush="sync"), create=True).partition(0)
    fired: list[Any] = []
    p.append([Record(None, b"x")]).addCallback(fired.append)
    before = flushes(lm)
    lm.drain()  # no loop turn: written, synced and fired here
    assert [r.base_offset for r in fired] == [0]
    assert flushes(lm) == before + 1 and p.high_watermark == 1


def test_a_large_tick_goes_to_the_thread_and_later_ones_queue_behind_it(
        open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(flush="sync"), create=True).partition(0)
    order: list[int] = []
    n = F.INLINE_MAX_BYTES // 65536 + 1
    for _ in range(n):
        p.append([Record(None, b"b" * 65536)]).addCallback(lambda r: order.append(r.base_offset))
    lm.drain()
    assert order == []  # more than INLINE_MAX_BYTES in the tick: the thread syncs it
    # small, but the thread still holds the first: inline would confirm out of order
    p.append([Record(None, b"small")]).addCallback(lambda r: order.append(r.base_offset))
    lm.drain()
    assert order == []
    loop.run_until(lambda: len(order) == n + 1)
    assert order == list(range(n + 1))
    p.append([Record(None, b"again")]).addCallback(lambda r: order.append(r.base_offset))
    lm.drain()  # the thread is idle again
    assert order == list(range(n + 2))


def test_a_slow_disk_sends_syncs_to_the_thread_and_is_probed_again(
        open_log: OpenLog, loop: LoopReactor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(F, "INLINE_MAX_SECONDS", 0.0)  # any measured sync counts as slow
    monkeypatch.setattr(F, "INLINE_PROBE", 2)
    lm = open_log()
    p = lm.open_topic("t", topic_config(flush="sync"), create=True).partition(0)
    inline: list[bool] = []
    for i in range(5):
        fired: list[Any] = []
        p.append([Record(None, b"%d" % i)]).addCallback(fired.append)
        lm.drain()
        inline.append(bool(fired))
        loop.run_until(lambda: bool(fired))
    # the first measures the disk; two go to the thread; the probe runs inline
    assert inline == [True, False, False, True, False]


def test_interval_and_thread_only_logs_never_sync_inline(open_log: OpenLog, loop: LoopReactor) -> None:
    for lm, flush in ((open_log(), "interval:1"), (open_log(inline_flush=False), "sync")):
        p = lm.open_topic(f"t-{flush[:4]}", topic_config(flush=flush), create=True).partition(0)
        before = flushes(lm)
        d = p.append([Record(None, b"x")])
        lm.drain()
        assert flushes(lm) == before  # nothing synced on this thread
        loop.wait(d)
        loop.run_until(lambda: flushes(lm) > before)
