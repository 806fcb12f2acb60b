"""Syncs through io_uring (``core/log/uring.py``) on a temp dir and the real kernel: the
ring itself, and the flusher's use of it (asynchronous small syncs, later ones waiting
behind, in append order, and a close that waits for them)."""

from __future__ import annotations

import errno
import os
import select
import shutil
import tempfile
import time
from typing import Any, Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from logbus.core.errors import StorageError
from logbus.core.log import LogManager, Record
from logbus.core.log import flusher as F
from logbus.core.log.filecache import Handle
from logbus.core.log.uring import Ring
from tests.core.conftest import topic_config
from tests.loop import ReaderLoop


@pytest.fixture
def ring() -> Iterator[Ring]:
    r = Ring.open()
    if r is None:
        pytest.skip("io_uring is not available on this kernel")
    yield r
    r.close()


@pytest.fixture
def rloop() -> ReaderLoop:
    return ReaderLoop()


@pytest.fixture
def ring_log(tmp_path: Any, rloop: ReaderLoop, ring: Ring) -> Iterator[Callable[..., LogManager]]:
    managers: list[LogManager] = []

    def make(**kw: Any) -> LogManager:
        lm = LogManager(tmp_path, rloop, **kw)
        assert lm.flusher.ring is not None
        managers.append(lm)
        return lm

    yield make
    for lm in managers:
        lm.close()


def test_the_ring_syncs_files_and_hands_back_each_submissions_token(tmp_path: Any, ring: Ring) -> None:
    fds = [os.open(tmp_path / name, os.O_RDWR | os.O_CREAT, 0o644) for name in ("a", "b")]
    try:
        for fd in fds:
            os.write(fd, b"x" * 100)
        ring.fdatasync(fds[:1], "one")
        ring.fdatasync(fds, "both")
        assert ring.in_flight == 2
        done = dict(ring.wait())
        assert done == {"one": None, "both": None} and ring.in_flight == 0
        assert ring.reap() == []  # nothing twice
    finally:
        for fd in fds:
            os.close(fd)


def test_the_ring_reports_a_failed_sync_with_its_errno(ring: Ring) -> None:
    ring.fdatasync([987_654], "bad")
    [(token, error)] = ring.wait()
    assert token == "bad" and isinstance(error, OSError) and error.errno == errno.EBADF


def test_a_small_sync_goes_to_the_ring_and_fires_when_the_kernel_completes(
        ring_log: Callable[..., LogManager], rloop: ReaderLoop) -> None:
    lm = ring_log()
    p = lm.open_topic("t", topic_config(flush="sync"), create=True).partition(0)
    fired: list[Any] = []
    p.append([Record(None, b"x")]).addCallback(fired.append)
    lm.drain()
    assert fired == [] and lm.flusher.ring_syncs == 0  # the reactor did not wait for the disk
    # not durable yet: readers below the high watermark see nothing; the broker's own
    # queues (whose entry exists from the append on) read what is written
    assert p.read(0, 1).next_offset == 0 and p.read(0, 1, written=True).next_offset == 1
    rloop.run_until(lambda: bool(fired))
    assert [r.base_offset for r in fired] == [0]
    assert lm.flusher.ring_syncs == 1 and lm.flusher.inline_syncs == 0 and lm.flusher.thread_syncs == 0


def test_appends_during_a_ring_sync_wait_behind_it_and_are_synced_together_in_order(
        ring_log: Callable[..., LogManager], rloop: ReaderLoop) -> None:
    lm = ring_log()
    parts = [lm.open_topic(name, topic_config(flush="sync"), create=True).partition(0) for name in ("a", "b")]
    order: list[tuple[str, int]] = []

    def append(i: int, size: int = 10) -> None:
        p = parts[i % 2]
        p.append([Record(None, b"v" * size)]).addCallback(lambda r: order.append((p.topic, r.base_offset)))
        lm.drain()

    append(0)  # to the ring
    append(1)  # behind it, in its own tick
    append(2)
    append(3, F.INLINE_MAX_BYTES)  # large: behind it too, although it would go to the thread
    assert order == [] and lm.flusher.ring.in_flight == 1  # type: ignore[union-attr]
    rloop.run_until(lambda: len(order) == 4)
    assert order[0] == ("a", 0)  # synced first; then each partition's in append order
    assert [o for o in order if o[0] == "a"] == [("a", 0), ("a", 1)]
    assert [o for o in order if o[0] == "b"] == [("b", 0), ("b", 1)]
    # the three behind were merged into one submission (large enough for the thread)
    assert lm.flusher.ring_syncs + lm.flusher.thread_syncs == 2


def test_close_waits_for_ring_syncs_and_what_waits_behind_them(
        ring_log: Callable[..., LogManager], rloop: ReaderLoop) -> None:
    lm = ring_log()
    p = lm.open_topic("t", topic_config(flush="sync"), create=True).partition(0)
    fired: list[int] = []
    for _ in range(3):
        p.append([Record(None, b"x")]).addCallback(lambda r: fired.append(r.base_offset))
        lm.drain()
    lm.close()  # no loop turn: the ring is waited for and drained
    assert fired == [0, 1, 2]


def test_a_failed_ring_sync_fails_its_waiters_and_unpins_the_files(rloop: ReaderLoop, ring: Ring) -> None:
    flusher = F.Flusher(rloop.callFromThread, ring=ring, call_later=rloop.callLater)
    try:
        handle = Handle("/nonexistent", 987_654, True)
        got: list[Any] = []
        flusher.submit([(object(), [handle], [(got.append, None)], 0.0)], 10)
        assert handle.pins == 1 and got == []
        for _ in range(100):
            if select.select([ring], [], [], 0.1)[0]:
                flusher.ring_ready()
            if got:
                break
        assert isinstance(got[0], StorageError) and handle.pins == 0
    finally:
        flusher.stop()


def test_a_sync_that_waited_behind_another_starts_a_pace_after_it(rloop: ReaderLoop, ring: Ring,
                                                                    tmp_path: Any) -> None:
    """Decision 0032: under a steady load, syncs do not run back to back, each for the few
    appends that came during the last; what waited behind a ring sync starts
    ``RING_PACE_SECONDS`` after that one began, at the earliest. A sync with nothing in
    flight before it (and the last one long ago) starts at once. Waiters fire in order."""
    starts: list[float] = []
    submit = ring.fdatasync

    def timed(fds: Any, token: Any, **kw: Any) -> None:
        starts.append(time.perf_counter())
        submit(fds, token, **kw)

    ring.fdatasync = timed  # type: ignore[method-assign]
    flusher = F.Flusher(rloop.callFromThread, ring=ring, call_later=rloop.callLater)

    class Reader:
        def fileno(self) -> int:
            return ring.fileno()

        def doRead(self) -> None:
            flusher.ring_ready()

    rloop.addReader(Reader())
    fd = os.open(tmp_path / "seg", os.O_RDWR | os.O_CREAT)
    try:
        handle = Handle(str(tmp_path / "seg"), fd, True)
        fired: list[int] = []
        for round_ in range(3):
            before = time.perf_counter()
            os.write(fd, b"a")
            flusher.submit([(object(), [handle], [(fired.append, 2 * round_)], 0.0)], 1)
            assert len(starts) == 2 * round_ + 1 and starts[-1] >= before  # at once: nothing in flight
            os.write(fd, b"b")
            flusher.submit([(object(), [handle], [(fired.append, 2 * round_ + 1)], 0.0)], 1)
            assert len(starts) == 2 * round_ + 1  # behind the one in flight
            rloop.run_until(lambda: len(fired) == 2 * round_ + 2)
            assert starts[-1] - starts[-2] >= F.RING_PACE_SECONDS
            time.sleep(2 * F.RING_PACE_SECONDS)  # the next round's first sync owes no pace
        assert fired == list(range(6)) and handle.pins == 0
    finally:
        flusher.stop()
        os.close(fd)


def _have_ring() -> bool:
    r = Ring.open()
    if r is None:
        return False
    r.close()
    return True


class RingFlushMachine(RuleBasedStateMachine):
    """Appends to three ``sync`` partitions, small and large, with ticks (drain) and
    loop turns in any order, against a model: every append is confirmed exactly once,
    each partition's in append order, never before its offset is durable; the broker's
    queues read every written record; the ring and the thread never hold syncs at once."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="logbus-ring-")
        self.loop = ReaderLoop()
        self.lm = LogManager(self.dir, self.loop)
        assert self.lm.flusher.ring is not None
        self.parts = [self.lm.open_topic(f"t{i}", topic_config(flush="sync"), create=True).partition(0)
                      for i in range(3)]
        self.sent: list[list[int]] = [[], [], []]  # offsets appended, per partition
        self.confirmed: list[list[int]] = [[], [], []]

    def _confirm(self, i: int, result: Any) -> None:
        assert not isinstance(result, BaseException), result
        assert self.parts[i].high_watermark > result.base_offset  # durable before confirmed
        self.confirmed[i].append(result.base_offset)

    @rule(i=st.integers(0, 2), large=st.booleans())
    def append(self, i: int, large: bool) -> None:
        p = self.parts[i]
        self.sent[i].append(p.next_offset)
        value = b"L" * (F.INLINE_MAX_BYTES // 2 + 1) if large else b"s"
        d = p.append([Record(None, value)])
        assert d is not None
        d.addCallback(lambda r: self._confirm(i, r))

    @rule()
    def drain(self) -> None:
        self.lm.drain()

    @rule()
    def turn(self) -> None:
        self.loop.run_once(block=0.001)

    @invariant()
    def confirmed_in_order_and_written_readable(self) -> None:
        for i, p in enumerate(self.parts):
            assert self.confirmed[i] == self.sent[i][: len(self.confirmed[i])]
            if p.next_offset:
                assert p.read(p.next_offset - 1, 1, written=True).next_offset == p.next_offset

    @invariant()
    def never_the_ring_and_the_thread_at_once(self) -> None:
        ring = self.lm.flusher.ring
        assert ring is not None and not (ring.in_flight and self.lm.flusher._outstanding)

    def teardown(self) -> None:
        try:
            self.lm.drain()
            self.loop.run_until(lambda: all(len(c) == len(s) for c, s in zip(self.confirmed, self.sent)))
            assert self.confirmed == self.sent
        finally:
            self.lm.close()
            shutil.rmtree(self.dir, ignore_errors=True)


RingFlushMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=50, deadline=None,
                                              suppress_health_check=[HealthCheck.too_slow])
TestRingFlushMachine = pytest.mark.skipif(not _have_ring(), reason="io_uring is not available")(
    RingFlushMachine.TestCase)
