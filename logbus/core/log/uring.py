"""Asynchronous ``fdatasync`` through Linux io_uring, for syncs the reactor must not wait on.

Theory of operation. A sync on the reactor thread blocks it for the disk's flush (p50
0.2 ms, p99 0.7 ms and up to several ms here), and whatever arrives meanwhile waits; a
sync on a Python thread costs GIL hand-offs that delay the reactor as much
(docs/decisions/0015). io_uring hands the sync to the kernel instead: the reactor
writes a submission entry (``IORING_OP_FSYNC`` with ``IORING_FSYNC_DATASYNC``) into a
ring shared with the kernel, one ``io_uring_enter`` submits it, a kernel worker runs
the sync, and its completion entry wakes the reactor through an eventfd registered
with the ring. No Python thread and no GIL are involved.

The ring is used from one thread only (the reactor's). Stores into the shared rings are
ordered by the system calls around them (``io_uring_enter`` after a submission; the
eventfd read, or an ``io_uring_enter`` that waits, before completions are read), which
is all x86-64 and arm64 need here. ``Ring.open`` returns None where io_uring is missing
or forbidden (an old kernel, ``kernel.io_uring_disabled``, a seccomp profile): the
caller then syncs as it did before.

Layouts, from ``<linux/io_uring.h>``: ``io_uring_params`` (120 bytes) is ten u32 then
the SQ and CQ ring offsets (ten u32-sized fields each, the last a u64); a submission
entry is 64 bytes (opcode u8 at 0, fd s32 at 4, op flags u32 at 28, user_data u64 at
32); a completion entry is 16 bytes (user_data u64, res s32, flags u32).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import struct
from typing import Any, Iterable

SYS_SETUP, SYS_ENTER, SYS_REGISTER = 425, 426, 427  # the same on x86-64 and arm64
OFF_SQ_RING, OFF_SQES = 0, 0x10000000
FEAT_SINGLE_MMAP = 1
ENTER_GETEVENTS = 1
REGISTER_EVENTFD = 4
OP_FSYNC = 3
SQE_IO_LINK = 4  # the next entry starts when this one completed
FSYNC_DATASYNC = 1
SQE_SIZE, CQE_SIZE = 64, 16

_PARAMS = struct.Struct("=10I" "7IIQ" "8IQ")  # params, sq_off, cq_off
_U32 = struct.Struct("=I")
_SQE = struct.Struct("=BBHiQQIIQ24x")  # opcode, flags, ioprio, fd, off, addr, len, op flags, user_data
_CQE = struct.Struct("=QiI")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(*args: int) -> int:
    r = _libc.syscall(*[ctypes.c_long(a) for a in args])
    if r < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(r)


class Ring:
    """A submission ring for data syncs; ``fileno()`` is an eventfd that becomes readable
    when syncs complete (then ``reap``)."""

    def __init__(self, entries: int = 64) -> None:
        params = ctypes.create_string_buffer(_PARAMS.size)
        self.fd = _syscall(SYS_SETUP, entries, ctypes.addressof(params))
        try:
            self._map(_PARAMS.unpack(params.raw))
            self.eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            efd = ctypes.c_int(self.eventfd)
            _syscall(SYS_REGISTER, self.fd, REGISTER_EVENTFD, ctypes.addressof(efd), 1)
        except BaseException:
            self.close()
            raise
        self._next_id = 1
        self._groups: dict[int, list[Any]] = {}  # group id -> [token, syncs left, first error]
        self.in_flight = 0  # groups submitted and not reaped

    def _map(self, p: tuple[int, ...]) -> None:
        self.sq_entries, self.cq_entries, _flags, _cpu, _idle, features = p[:6]
        sq_head, sq_tail, sq_mask, _sq_n, _sq_flags, _dropped, sq_array = p[10:17]
        cq_head, cq_tail, cq_mask, _cq_n, _overflow, cqes = p[19:25]
        if not features & FEAT_SINGLE_MMAP:
            raise OSError(errno.ENOSYS, "io_uring without a single ring mapping (kernel older than 5.4)")
        size = max(sq_array + 4 * self.sq_entries, cqes + CQE_SIZE * self.cq_entries)
        self._rings = mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                                offset=OFF_SQ_RING)
        self._sqes = mmap.mmap(self.fd, SQE_SIZE * self.sq_entries, mmap.MAP_SHARED,
                               mmap.PROT_READ | mmap.PROT_WRITE, offset=OFF_SQES)
        self._sq_head, self._sq_tail, self._sq_array = sq_head, sq_tail, sq_array
        self._cq_head, self._cq_tail, self._cqes = cq_head, cq_tail, cqes
        self._sq_mask = _U32.unpack_from(self._rings, sq_mask)[0]
        self._cq_mask = _U32.unpack_from(self._rings, cq_mask)[0]

    @classmethod
    def open(cls, entries: int = 64) -> Ring | None:
        """A ring, or None where io_uring cannot be used."""
        if platform.system() != "Linux" or not hasattr(os, "eventfd"):
            return None
        try:
            return cls(entries)
        except OSError:
            return None

    def fileno(self) -> int:
        return self.eventfd

    def fdatasync(self, fds: Iterable[int], token: Any, *, linked: bool = False) -> None:
        """Submit one data sync per fd; ``token`` comes out of ``reap`` when all are done.
        ``linked``: one after the other, by one kernel worker (``IOSQE_IO_LINK``; measured
        by bench/uring_sync_probe.py, not used by the broker: no cheaper here)."""
        fds = list(fds)
        if not 0 < len(fds) <= self.sq_entries:
            raise ValueError(f"{len(fds)} files: one to {self.sq_entries} per submission")
        group = self._next_id
        self._next_id += 1
        rings = self._rings
        old_tail = tail = _U32.unpack_from(rings, self._sq_tail)[0]
        head = _U32.unpack_from(rings, self._sq_head)[0]
        if ((tail - head) & 0xFFFFFFFF) + len(fds) > self.sq_entries:  # the kernel consumes at enter
            raise OSError(errno.EBUSY, "io_uring submission queue full")
        last = len(fds) - 1
        for k, fd in enumerate(fds):
            i = tail & self._sq_mask
            flags = SQE_IO_LINK if linked and k < last else 0
            _SQE.pack_into(self._sqes, i * SQE_SIZE, OP_FSYNC, flags, 0, fd, 0, 0, 0, FSYNC_DATASYNC, group)
            _U32.pack_into(rings, self._sq_array + 4 * i, i)
            tail = (tail + 1) & 0xFFFFFFFF
        _U32.pack_into(rings, self._sq_tail, tail)
        try:
            submitted = _syscall(SYS_ENTER, self.fd, len(fds), 0, 0, 0, 0)
        except OSError:  # nothing was taken: the entries are withdrawn
            _U32.pack_into(rings, self._sq_tail, old_tail)
            raise
        if not submitted:
            _U32.pack_into(rings, self._sq_tail, old_tail)
            raise OSError(errno.EAGAIN, "io_uring took none of the syncs")
        # fewer than asked (not seen with fsync entries): the token waits for those taken,
        # and fails, as the others were never run. Those others stay in the ring and go
        # with the next submission, whose count they then upset: not handled further.
        error = None if submitted == len(fds) else OSError(errno.EIO, f"io_uring took {submitted} of {len(fds)}")
        self._groups[group] = [token, submitted, error]
        self.in_flight += 1

    def reap(self) -> list[tuple[Any, OSError | None]]:
        """The tokens whose syncs all completed, in completion order, each with the first
        error among its syncs (None: durable)."""
        try:
            os.read(self.eventfd, 8)
        except BlockingIOError:
            pass
        rings = self._rings
        head = _U32.unpack_from(rings, self._cq_head)[0]
        tail = _U32.unpack_from(rings, self._cq_tail)[0]
        done: list[tuple[Any, OSError | None]] = []
        while head != tail:
            user_data, res, _flags = _CQE.unpack_from(rings, self._cqes + CQE_SIZE * (head & self._cq_mask))
            head = (head + 1) & 0xFFFFFFFF
            g = self._groups.get(user_data)
            if g is None:
                continue
            if res < 0 and g[2] is None:
                g[2] = OSError(-res, os.strerror(-res))
            g[1] -= 1
            if not g[1]:
                del self._groups[user_data]
                self.in_flight -= 1
                done.append((g[0], g[2]))
        _U32.pack_into(rings, self._cq_head, head)
        return done

    def wait(self) -> list[tuple[Any, OSError | None]]:
        """Block until every submitted sync completed; their tokens (``reap``)."""
        done: list[tuple[Any, OSError | None]] = []
        while self.in_flight:
            _syscall(SYS_ENTER, self.fd, 0, 1, ENTER_GETEVENTS, 0, 0)
            done += self.reap()
        return done

    def close(self) -> None:
        for name in ("_sqes", "_rings"):
            m = getattr(self, name, None)
            if m is not None:
                m.close()
        for name in ("eventfd", "fd"):
            fd = getattr(self, name, -1)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)
