"""Syncs through io_uring (``core/log/uring.py``) on a temp dir and the real kernel: the
ring itself, and the flusher's use of it (asynchronous small syncs, later ones waiting
behind, in append order, and a close that waits for them)."""

from __future__ import annotations

import errno
import os
import select
from typing import Any, Callable, Iterator

import pytest

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
    flusher = F.Flusher(rloop.callFromThread, ring=ring)
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
