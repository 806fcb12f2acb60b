"""Group commit: one thread makes appended bytes durable and then fires the waiters.

Theory of operation. Appends write to the page cache on the reactor thread. For a
``sync`` topic the partition then adds the caller's Deferred to the partition's open
*ticket*; an ``interval`` topic opens a ticket with a deadline and no waiters. A ticket
is queued when opened. The flusher thread takes every due ticket at once (under the
lock, so each taken ticket holds only waiters whose bytes were written before the take),
makes the union of their files durable, and hands the tickets back to the reactor
thread, which fires the waiters in append order. One fsync therefore covers every
append that arrived while the previous one ran.

Small flushes skip the thread: when nothing is queued or in flight there, the tick wrote
at most ``INLINE_MAX_BYTES`` and every item has waiters. Handing a small flush to the
thread cost more than the sync: two GIL hand-offs, a pipe write and the context switches
around them, about a fifth of an AMQP publish's broker CPU (docs/decisions/0007).

- With io_uring (``uring.Ring``; docs/decisions/0015), the reactor thread submits the
  sync to the kernel and goes on; the ring's eventfd calls ``ring_ready``, which fires
  the waiters. While a ring sync is in flight, every later submission waits *behind*
  it and is submitted, merged into one, when it completes: group commit, and the
  waiters fire in append order. The reactor never blocks on the disk. What waited
  behind starts no sooner than ``RING_PACE_SECONDS`` after the sync before it began: a
  steady load gets one sync per millisecond, not one per previous sync's few messages.
- Without it, the reactor thread syncs at once and fires the waiters itself, as Redis
  does with ``appendfsync always``. Whatever arrives meanwhile waits in the socket
  buffers and is read as one larger batch next tick, so group commit still happens.
  While such syncs take longer than ``INLINE_MAX_SECONDS`` on average (a slow disk), the
  thread takes them all again, trying inline once in ``INLINE_PROBE`` submissions to
  notice a faster disk.

With one dirty file it is ``fdatasync``-ed; with two or more (up to a write spread over
hundreds of partitions) one ``syncfs`` of the filesystem is cheaper than one call per file
(measured here: 1,000 dirty files take 290 ms by fdatasync, 10 ms by syncfs; see
docs/decisions/0002-group-commit-syncfs.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
import time
from typing import Any, Callable

from twisted.internet.defer import Deferred

from ..errors import StorageError
from .filecache import Handle
from .uring import Ring

log = logging.getLogger(__name__)

SYNCFS_MIN_FILES = 2
INLINE_MAX_BYTES = 256 << 10
INLINE_MAX_SECONDS = 0.004
INLINE_PROBE = 100
RING_MAX_FILES = 16  # more dirty files than this: one syncfs (inline or on the thread)
# A ring sync that waited behind another starts this long after the one before it began,
# at the earliest (decision 0033): under a steady load syncs would run back to back, each
# for the few messages that came during the last, and their cost (a kernel worker's
# fdatasync, an io_uring_enter, an eventfd wake-up: about 100 µs of CPU here) is paid
# per sync, not per message. A sync with nothing in flight before it starts at once: a
# lone publisher's confirm does not wait for the pace. Paced always, not only while the
# reactor thread is busy (decision 0054: a quarter less broker CPU per message at 5,000
# devices, where the thread was rarely "busy" and syncs ran back to back).
RING_PACE_SECONDS = 0.001

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def syncfs(fd: int) -> None:
    if _libc.syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


Waiter = tuple[Any, Any]  # (Deferred or callable, result)


def fire_waiters(waiters: list[Waiter], error: Exception | None = None) -> None:
    """Fire each waiter: a Deferred gets callback(result) or errback(error); a plain
    callable is called with the result or the error."""
    for target, result in waiters:
        if type(target) is Deferred:
            if error is None:
                target.callback(result)
            else:
                target.errback(error)
        else:
            target(result if error is None else error)


class Ticket:
    __slots__ = ("owner", "handles", "waiters", "deadline")

    def __init__(self, owner: Any, deadline: float) -> None:
        self.owner = owner  # has a ``ticket`` attribute the flusher clears on take
        self.handles: dict[int, Handle] = {}
        self.waiters: list[Waiter] = []
        self.deadline = deadline


class Flusher:
    def __init__(
        self,
        call_in_reactor: Callable[..., Any],
        on_flush: Callable[[float, int], None] | None = None,
        *,
        inline: bool = True,
        ring: Ring | None = None,
        call_later: Callable[..., Any] | None = None,
    ) -> None:
        """``call_later(seconds, f)``: the reactor's timer, for the pace of back-to-back
        ring syncs (``RING_PACE_SECONDS``); without it, no pace."""
        self._call = call_in_reactor
        self._call_later = call_later
        self._ring_started = 0.0  # when the last ring sync was submitted (perf_counter)
        self._paced: Any = None  # the timer that submits what waits behind (``_pace``)
        self._on_flush = on_flush
        self.inline = inline
        self.ring = ring  # small syncs go to the kernel through it (see the module's text)
        self._behind: list[tuple[list[Any], int]] = []  # submissions waiting for the ring's sync
        self.ring_syncs = 0
        self._outstanding = 0  # tickets queued for the thread and not yet completed
        self._inline_seconds = 0.0  # moving average of an inline sync
        self._skipped = 0  # eligible submissions sent to the thread since the last inline one
        self.inline_syncs = 0  # syncs run on the reactor thread
        self.thread_syncs = 0
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: list[Ticket] = []
        self._stopping = False
        self._worker = threading.Thread(target=self._run, name="logbus-flusher", daemon=True)
        self._worker.start()

    # -- reactor thread ------------------------------------------------------------

    def submit(self, items: list[tuple[Any, list[Handle], list[Waiter] | None, float]], written: int = -1) -> None:
        """Hand over this tick's writes (``written`` bytes; -1: unknown), one ``(owner,
        handles, waiters, delay)`` per partition: with ``waiters`` (sync), fire them once
        the bytes written so far to ``handles`` are durable; with None (interval), make
        them durable within ``delay`` seconds."""
        ring = self.ring
        if ring is not None and (ring.in_flight or self._paced is not None):
            _pin(items, 1)
            self._behind.append((items, written))
            return
        if self.inline and not self._outstanding and 0 <= written <= INLINE_MAX_BYTES:
            if all(waiters is not None for _, _, waiters, _ in items):
                if ring is not None:
                    fds = {h.fd for _, handles, _, _ in items for h in handles}
                    if len(fds) <= RING_MAX_FILES:
                        self._ring_submit(items, fds)
                        return
                if self._inline_seconds <= INLINE_MAX_SECONDS or self._skipped >= INLINE_PROBE:
                    self._flush_now(items)
                    return
                self._skipped += 1
        notify = False
        now = 0.0
        with self._lock:
            for owner, handles, waiters, delay in items:
                t = owner.ticket
                if t is None:
                    if waiters is None:
                        now = now or time.monotonic()
                        t = Ticket(owner, now + delay)
                    else:
                        t = Ticket(owner, 0.0)
                    owner.ticket = t
                    self._queue.append(t)
                    self._outstanding += 1
                    notify = True
                elif waiters is not None and t.deadline:
                    t.deadline = 0.0  # an interval ticket now has waiters: flush at once
                    notify = True
                for handle in handles:
                    if handle.fd not in t.handles:
                        handle.pins += 1
                        t.handles[handle.fd] = handle
                if waiters:
                    t.waiters.extend(waiters)
            if notify:
                self._cond.notify()

    def _ring_submit(self, items: list[Any], fds: set[int]) -> None:
        assert self.ring is not None
        _pin(items, 1)
        self._ring_started = now = time.perf_counter()
        try:
            self.ring.fdatasync(fds, (items, len(fds), now))
        except OSError as e:  # not submitted: sync here instead, as without a ring
            log.warning("io_uring sync submission failed (%s): syncing on the reactor thread", e)
            _pin(items, -1)
            self._flush_now(items)

    def ring_ready(self) -> None:
        """The ring's eventfd is readable: fire the waiters of completed syncs, then
        submit what waited behind them."""
        assert self.ring is not None
        for token, error in self.ring.reap():
            self._ring_done(token, error)
        if self._behind and not self.ring.in_flight and self._paced is None:
            rest = self._ring_started + RING_PACE_SECONDS - time.perf_counter()
            if rest > 0 and self._call_later is not None:
                self._paced = self._call_later(rest, self._pace)
                return
            self._submit_behind()

    def _pace(self) -> None:
        self._paced = None
        if self._behind and self.ring is not None and not self.ring.in_flight:
            self._submit_behind()

    def _submit_behind(self) -> None:
        if self._behind:
            behind, self._behind = self._behind, []
            items = [item for part, _ in behind for item in part]
            _pin(items, -1)
            written = -1 if any(w < 0 for _, w in behind) else sum(w for _, w in behind)
            self.submit(items, written)

    def _ring_done(self, token: tuple[list[Any], int, float], error: OSError | None) -> None:
        items, files, t0 = token
        self.ring_syncs += 1
        if self._on_flush is not None:
            self._on_flush(time.perf_counter() - t0, files)
        _pin(items, -1)
        if error is not None:
            log.error("flush of %d files failed: %s", files, error)
        _fire_items(items, error)

    def stop(self, timeout: float = 30.0) -> None:
        """Flush everything queued, then end the thread (its last hand-back is queued
        with ``call_in_reactor``). Ring syncs are waited for here, and fired."""
        ring = self.ring
        if self._paced is not None:
            self._paced.cancel()
            self._paced = None
        self._call_later = None  # no pace from here on
        while ring is not None and ring.in_flight:
            for token, error in ring.wait():
                self._ring_done(token, error)
            self.ring_ready()  # what waited behind: submitted again, perhaps to the ring
        with self._lock:
            self._stopping = True
            for t in self._queue:
                t.deadline = 0.0
            self._cond.notify()
        self._worker.join(timeout)

    def _flush_now(self, items: list[tuple[Any, list[Handle], list[Waiter] | None, float]]) -> None:
        """Sync on this thread and fire the waiters (submit() checked that nothing is
        queued for the thread, so they fire in append order)."""
        self._skipped = 0
        self.inline_syncs += 1
        fds = {h.fd for _, handles, _, _ in items for h in handles}
        t0 = time.perf_counter()
        error = _sync(fds)
        dt = time.perf_counter() - t0
        self._inline_seconds = 0.9 * self._inline_seconds + 0.1 * dt
        if self._on_flush is not None:
            self._on_flush(dt, len(fds))
        _fire_items(items, error)

    def _complete(self, tickets: list[Ticket], error: OSError | None) -> None:
        self._outstanding -= len(tickets)
        failure = _failure(error)
        for t in tickets:
            for h in t.handles.values():
                h.pins -= 1
            fire_waiters(t.waiters, _outcome(t.owner, failure))

    # -- flusher thread ------------------------------------------------------------

    def _take(self) -> list[Ticket] | None:
        with self._lock:
            while True:
                now = time.monotonic()
                due = [t for t in self._queue if t.deadline <= now]
                if due:
                    if len(due) == len(self._queue):
                        self._queue = []
                    else:
                        self._queue = [t for t in self._queue if t.deadline > now]
                    for t in due:
                        t.owner.ticket = None
                    return due
                if self._stopping and not self._queue:
                    return None
                timeout = min((t.deadline for t in self._queue), default=now + 3600) - now
                self._cond.wait(timeout)

    def _run(self) -> None:
        while True:
            tickets = self._take()
            if tickets is None:
                return
            fds = {fd for t in tickets for fd in t.handles}
            self.thread_syncs += 1
            t0 = time.perf_counter()
            error = _sync(fds)
            dt = time.perf_counter() - t0
            if self._on_flush is not None:
                self._on_flush(dt, len(fds))
            self._call(self._complete, tickets, error)


def _pin(items: list[Any], by: int) -> None:
    """Pin (``by`` 1) or unpin (-1) the files of submitted items."""
    for _, handles, _, _ in items:
        for h in handles:
            h.pins += by


def _failure(error: OSError | None) -> StorageError | None:
    return None if error is None else StorageError(f"flush failed, appends not durable: {error}")


def _outcome(owner: Any, failure: StorageError | None) -> StorageError | None:
    """What a sync means for one owner's waiters. A failed sync takes its owner (a
    partition) offline (``sync_failed``); and once one has failed, a later sync that
    succeeds proves nothing about the pages the failed one lost (Linux reports a
    writeback error once), so the owner's waiters fail from then on (``offline``)."""
    if failure is not None:
        failed = getattr(owner, "sync_failed", None)
        if failed is not None:
            failed(failure)
        return failure
    return getattr(owner, "offline", None)


def _fire_items(items: list[Any], error: OSError | None) -> None:
    """Fire the waiters of synced items, in order (failed if ``error``)."""
    failure = _failure(error)
    for owner, _, waiters, _ in items:
        outcome = _outcome(owner, failure)
        if waiters:
            fire_waiters(waiters, outcome)


def _sync(fds: set[int]) -> OSError | None:
    """Make ``fds`` durable: one ``fdatasync``, or one ``syncfs`` for several."""
    try:
        if len(fds) >= SYNCFS_MIN_FILES:
            syncfs(next(iter(fds)))
        else:
            for fd in fds:
                os.fdatasync(fd)
    except OSError as e:
        log.error("flush of %d files failed: %s", len(fds), e)
        return e
    return None
