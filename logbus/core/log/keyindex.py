"""The key index of a segment: which records may hold a key or a message id.

Theory of operation. An entry is one uint64, ``(hash << 32) | relative_offset``, for
each record key (``format.key_hash``) and each envelope message id
(``format.message_id_hash``) of a segment; sorted, the entries of one hash are
neighbours, in offset order. A lookup finds them by binary search and hands back
relative offsets: candidates, which the caller checks against the records (hashes
collide; an entry never decides an answer).

- The active segment's entries live in memory as ``Runs``: new entries gather in a tail
  list, sorted into a run every TAIL_MAX, and small neighbouring runs are merged (never
  past ``RUN_MERGE_MAX`` entries, so a merge stays within a slice's budget). A lookup
  bisects every run and scans the tail.
- A sealed segment's entries are merged once into the ``.keyindex`` file (layout:
  ``format.KEY_HEADER``, docs/format.md) by ``Writer``, one hash range (``Runs.piece``)
  per step. A written or found file is checked whole once (length, CRC-32C) by
  ``Checker``, one chunk per step, which keeps every ``FENCE``-th entry in memory; then
  ``SealedKeys`` answers a lookup with one bisect of those and one ``pread`` of at most
  ``2 * FENCE`` entries.

A file that is missing, short, or fails its checks raises ``KeyIndexDamaged``: the
caller rebuilds it from the log. Nothing here knows records or Twisted.
"""

from __future__ import annotations

import errno
import os
import sys
from array import array
from bisect import bisect_left
from typing import Iterable

from crc32c import crc32c

from .format import KEY_ENTRY, KEY_HEADER, KEYINDEX_MAGIC, KEYINDEX_VERSION, TMP_SUFFIX

FENCE = 128  # a sealed file's entries kept in memory: one in FENCE (1/16 byte per entry)
RUN_MERGE_MAX = 16384  # in-memory runs are merged up to this many entries
TAIL_MAX = 2048  # entries added before they are sorted into a run
CHECK_CHUNK = FENCE * 1024  # entries a Checker step reads (1 MiB)
PIECE_ENTRIES = 16384  # entries a Writer step merges and writes, about
HEADER_SIZE = KEY_HEADER.size
ENTRY_SIZE = KEY_ENTRY.size
LOW32 = 0xFFFFFFFF
_SWAP = sys.byteorder == "little"


class KeyIndexDamaged(Exception):
    """A ``.keyindex`` file (or bytes said to be one) that cannot be trusted."""


def entries_from(data: bytes | bytearray | memoryview) -> array[int]:
    """Big-endian uint64 entries -> an array (``len(data)`` a multiple of 8)."""
    arr = array("Q")
    arr.frombytes(data)
    if _SWAP:
        arr.byteswap()
    return arr


def entries_bytes(arr: array[int]) -> bytes:
    """An array of entries -> big-endian bytes."""
    if not _SWAP:
        return arr.tobytes()
    out = array("Q", arr)
    out.byteswap()
    return out.tobytes()


def encode(entries: Iterable[int], log_size: int) -> bytes:
    """A whole ``.keyindex`` file: ``entries`` (sorted here) covering ``log_size`` bytes."""
    body = entries_bytes(array("Q", sorted(entries)))
    return KEY_HEADER.pack(KEYINDEX_MAGIC, KEYINDEX_VERSION, 0, log_size, len(body) // ENTRY_SIZE,
                           crc32c(body)) + body


def decode_header(data: bytes, file_size: int, log_size: int | None) -> tuple[int, int]:
    """(count, crc) of a file's first HEADER_SIZE bytes, checked against the file's size
    and, when given, the size of the ``.log`` it must cover."""
    if len(data) < HEADER_SIZE:
        raise KeyIndexDamaged(f"key index of {file_size} bytes is shorter than its header")
    magic, version, flags, covered, count, crc = KEY_HEADER.unpack_from(data)
    if magic != KEYINDEX_MAGIC or version != KEYINDEX_VERSION or flags:
        raise KeyIndexDamaged(f"not a key index (magic {magic!r}, version {version}, flags {flags})")
    if file_size != HEADER_SIZE + count * ENTRY_SIZE:
        raise KeyIndexDamaged(f"key index of {file_size} bytes, its header says {count} entries")
    if log_size is not None and covered != log_size:
        raise KeyIndexDamaged(f"key index covers {covered} bytes of a {log_size}-byte log")
    return count, crc


def decode(data: bytes, log_size: int | None = None) -> array[int]:
    """The entries of a whole file's bytes; KeyIndexDamaged if they fail any check."""
    data = bytes(data)
    count, crc = decode_header(data, len(data), log_size)
    body = memoryview(data)[HEADER_SIZE:]
    if crc32c(body) != crc:
        raise KeyIndexDamaged("key index entries fail their CRC-32C")
    return entries_from(body)


def probe(arr: array[int], h: int, out: list[int]) -> None:
    """Append to ``out`` the relative offsets of the entries of hash ``h`` in the sorted
    ``arr``."""
    lo = h << 32
    i = bisect_left(arr, lo)
    n = len(arr)
    hi = lo | LOW32
    while i < n:
        e = arr[i]
        if e > hi:
            break
        out.append(e & LOW32)
        i += 1


class Runs:
    """The entries of a segment being indexed, as sorted runs in memory, and the latest
    few (under TAIL_MAX) in a list not sorted yet."""

    __slots__ = ("runs", "tail", "count")

    def __init__(self) -> None:
        self.runs: list[array[int]] = []
        self.tail: list[int] = []
        self.count = 0

    def add(self, entries: list[int]) -> None:
        """One slice's entries."""
        self.tail += entries
        self.count += len(entries)
        if len(self.tail) >= TAIL_MAX:
            self.flush()

    def flush(self) -> None:
        """The tail sorted into a run (small neighbouring runs merged)."""
        entries = self.tail
        if not entries:
            return
        self.tail = []
        entries.sort()
        runs = self.runs
        runs.append(array("Q", entries))
        while len(runs) > 1 and len(runs[-2]) <= 2 * len(runs[-1]) and len(runs[-2]) + len(runs[-1]) <= RUN_MERGE_MAX:
            b = runs.pop()
            merged = runs[-1].tolist()
            merged += b.tolist()
            merged.sort()
            runs[-1] = array("Q", merged)

    def candidates(self, h: int) -> list[int]:
        """Relative offsets of the entries of hash ``h``, ascending."""
        out: list[int] = []
        for run in self.runs:
            probe(run, h, out)
        if self.tail:
            lo = h << 32
            hi = lo | LOW32
            out += [e & LOW32 for e in self.tail if lo <= e <= hi]
        if len(self.runs) > 1 or self.tail:
            out.sort()
        return out

    def pieces(self) -> int:
        """How many hash ranges a Writer merges this in, one per step (a power of 2);
        the tail is sorted into a run first."""
        self.flush()
        n = 1
        while self.count // n > PIECE_ENTRIES and n < 1 << 16:
            n <<= 1
        return n

    def piece(self, k: int, n: int) -> array[int]:
        """The sorted entries whose hash is in the ``k``-th of ``n`` equal ranges."""
        shift = 64 - (n.bit_length() - 1)
        lo = k << shift if n > 1 else 0
        hi = (k + 1) << shift if n > 1 else 1 << 64
        merged: list[int] = []
        for run in self.runs:
            i, j = bisect_left(run, lo), bisect_left(run, hi)
            if i < j:
                merged += run[i:j].tolist()
        merged.sort()
        return array("Q", merged)


class SealedKeys:
    """A checked ``.keyindex`` file, looked up in place: every FENCE-th entry in memory,
    the rest read with ``pread`` from the file descriptor the caller gives."""

    __slots__ = ("path", "count", "fence")

    def __init__(self, path: str, count: int, fence: array[int]) -> None:
        self.path = path
        self.count = count
        self.fence = fence

    def candidates(self, fd: int, h: int) -> list[int]:
        """Relative offsets of the entries of hash ``h``, ascending; KeyIndexDamaged if the
        file is shorter than it was when checked."""
        lo = h << 32
        hi = lo | LOW32
        pos = max(bisect_left(self.fence, lo) - 1, 0) * FENCE
        out: list[int] = []
        while pos < self.count:
            n = min(2 * FENCE, self.count - pos)
            data = os.pread(fd, n * ENTRY_SIZE, HEADER_SIZE + pos * ENTRY_SIZE)
            if len(data) != n * ENTRY_SIZE:
                raise KeyIndexDamaged(f"{self.path} is shorter than when it was checked")
            arr = entries_from(data)
            i = bisect_left(arr, lo)
            while i < n:
                e = arr[i]
                if e > hi:
                    return out
                out.append(e & LOW32)
                i += 1
            pos += n
        return out


class Checker:
    """Checks a ``.keyindex`` file whole, one chunk per ``step``: its header against the
    ``.log`` size, then its CRC-32C, keeping the fence. KeyIndexDamaged (from the
    constructor or a step) when it fails; a missing file is damaged too."""

    __slots__ = ("path", "count", "crc", "_fd", "_pos", "_crc", "_fence")

    def __init__(self, path: str, log_size: int) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise KeyIndexDamaged("missing") from None
        try:
            size = os.fstat(self._fd).st_size
            self.count, self.crc = decode_header(os.pread(self._fd, HEADER_SIZE, 0), size, log_size)
        except BaseException:
            self.close()
            raise
        self._pos = 0
        self._crc = 0
        self._fence = array("Q")

    def step(self) -> SealedKeys | None:
        """Check the next chunk; the SealedKeys once the whole file passed, else None."""
        try:
            n = min(CHECK_CHUNK, self.count - self._pos)
            if n:
                data = os.pread(self._fd, n * ENTRY_SIZE, HEADER_SIZE + self._pos * ENTRY_SIZE)
                if len(data) != n * ENTRY_SIZE:
                    raise KeyIndexDamaged("key index is shorter than its header says")
                self._crc = crc32c(data, self._crc)
                self._fence.extend(entries_from(data)[::FENCE])  # chunks start at multiples of FENCE
                self._pos += n
            if self._pos < self.count:
                return None
            if self._crc != self.crc:
                raise KeyIndexDamaged("key index entries fail their CRC-32C")
        except BaseException:
            self.close()
            raise
        self.close()
        return SealedKeys(self.path, self.count, self._fence)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Writer:
    """Writes a sealed segment's ``Runs`` as its ``.keyindex``, one hash range per
    ``step``: to ``<path>.tmp``, then renamed (no fsync: the file is a cache, checked
    when read). ``abort`` removes the temporary file."""

    __slots__ = ("path", "runs", "log_size", "_tmp", "_fd", "_k", "_n", "_count", "_crc", "_fence")

    def __init__(self, path: str, runs: Runs, log_size: int) -> None:
        self.path = path
        self.runs = runs
        self.log_size = log_size
        self._tmp = path + TMP_SUFFIX
        self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self._k = 0
        self._n = runs.pieces()
        self._count = 0
        self._crc = 0
        self._fence = array("Q")

    def step(self) -> SealedKeys | None:
        """Merge and write the next hash range; the SealedKeys once the file is in place.
        OSError (a full disk) propagates after ``abort``."""
        try:
            if self._k < self._n:
                arr = self.runs.piece(self._k, self._n)
                self._k += 1
                if arr:
                    self._fence.extend(arr[(-self._count) % FENCE :: FENCE])
                    data = entries_bytes(arr)
                    self._crc = crc32c(data, self._crc)
                    if os.pwrite(self._fd, data, HEADER_SIZE + self._count * ENTRY_SIZE) != len(data):
                        raise OSError(errno.ENOSPC, "short write", self._tmp)
                    self._count += len(arr)
                if self._k < self._n:
                    return None
            header = KEY_HEADER.pack(KEYINDEX_MAGIC, KEYINDEX_VERSION, 0, self.log_size, self._count, self._crc)
            os.pwrite(self._fd, header, 0)
            os.close(self._fd)
            self._fd = -1
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        return SealedKeys(self.path, self._count, self._fence)

    def abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            os.unlink(self._tmp)
        except FileNotFoundError:
            pass
