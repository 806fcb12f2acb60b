"""What a partition does when the disk fails it: a mixin of ``partition.Partition``.

Theory of operation. A failed write (ENOSPC, EIO on pwrite) loses only what it
held: the segment is cut back to the end of the last write that succeeded, and the
offsets handed out for the lost records are never given again (the log gets a gap
there: queue entries and timers that point into it find no record, and are
dropped). Appends are refused at once, without queueing, until ``_repair`` starts
a new segment at the next offset, tried at most every WRITE_RETRY_SECONDS: writes
resume by themselves once there is space. A failed sync is different: the kernel
may have dropped the dirty pages and reports that once, so a later sync that
succeeds would silently cover the hole. The partition goes offline for good
(``offline``), readable up to its last durable offset, until the broker restarts
and recovery checks what is on disk (docs/operations.md).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable

from ..errors import StorageError
from .flusher import Waiter, fire_waiters

if TYPE_CHECKING:
    from .segment import Segment

log = logging.getLogger("logbus.core.log.partition")

WRITE_RETRY_SECONDS = 1.0  # after a failed write, how often an append tries a new segment


class Failures:
    """The failure states of a partition and the moves between them (the attributes
    are the partition's, set in its ``__init__``)."""

    topic: str
    index: int
    next_offset: int
    durable_offset: int
    active: Segment
    offline: StorageError | None
    on_lost: Callable[..., object] | None
    _failed: StorageError | None
    _broken: StorageError | None
    _retry_at: float
    _wend: tuple[Segment, int, int]
    _pending: list
    _pending_bytes: int
    _wbuf: list
    _wbytes: int
    _mode: str

    def _new_segment(self, base: int) -> Segment:
        raise NotImplementedError  # the subclass's


    def unavailable(self) -> StorageError | None:
        """Why appends are refused now (None: they are not). A partition whose write
        failed tries to start a new segment first."""
        if self._failed is not None:
            return StorageError(str(self._failed))  # a new one each time: it gathers a traceback
        if self._broken is not None and not self._repair():
            return StorageError(str(self._broken))
        return None

    @property
    def failure(self) -> StorageError | None:
        """Why this partition refuses appends, without trying to repair (health)."""
        return self._failed if self.offline is not None else self._broken

    def _write_failed(self, e: OSError) -> StorageError:
        """A write failed: forget every record placed but not written (the active
        segment ends where the last good write did) and refuse appends until a new
        segment can start past the offsets given to them."""
        seg, position, nxt = self._wend
        active = self.active
        if active is seg:
            active.cut_back(position, nxt)
        else:  # rolled since: nothing of the new segment was written
            active.cut_back(0, active.base_offset)
        self._pending = []
        self._pending_bytes = 0
        self._wbuf = []
        self._wbytes = 0
        self._retry_at = time.monotonic() + WRITE_RETRY_SECONDS
        if self._broken is None:
            log.error("write to %s/%d failed at offset %d: %s; appends are refused until it can be written again",
                      self.topic, self.index, active.next_offset, e)
        self._broken = StorageError(f"partition {self.topic}/{self.index} could not be written: {e}")
        return self._broken

    def _repair(self) -> bool:
        """Start a new segment at the next offset, after a failed write (at most once
        per WRITE_RETRY_SECONDS); True when appends may go on."""
        now = time.monotonic()
        if now < self._retry_at:
            return False
        self._retry_at = now + WRITE_RETRY_SECONDS
        try:
            self._new_segment(self.next_offset)
        except OSError as e:
            log.debug("%s/%d still cannot be written: %s", self.topic, self.index, e)
            return False
        log.warning("%s/%d is written again, from offset %d", self.topic, self.index, self.next_offset)
        self._broken = None
        self._wend = (self.active, 0, self.next_offset)
        return True

    def _lose(self, waiters: list[Waiter], error: StorageError) -> None:
        """Refuse appends whose offsets were given (``waiters``, in offset order): the
        owner hears of the offsets first (``on_lost``: queue entries made for them go),
        then each waiter fails."""
        if waiters and self.on_lost is not None:
            first = waiters[0][1].base_offset
            if first < self.next_offset:
                self.on_lost(self, first, self.next_offset, error)
        fire_waiters(waiters, error)

    def sync_failed(self, error: StorageError) -> None:
        """The flusher's hook: a sync of this partition's files failed. Offline for good
        (see above); appends whose sync had not completed are lost to queues."""
        if self.offline is not None:
            return
        log.critical("sync of %s/%d failed: %s; the partition is offline (readable below offset %d) "
                     "until the broker is restarted", self.topic, self.index, error, self.durable_offset)
        self.offline = self._failed = StorageError(
            f"partition {self.topic}/{self.index} is offline after a failed sync: {error}")
        if self._mode == "sync" and self.on_lost is not None and self.durable_offset < self.next_offset:
            self.on_lost(self, self.durable_offset, self.next_offset, self.offline)
