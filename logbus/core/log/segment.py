"""One segment: a ``.log`` file of record batches plus its two sparse indexes.

Theory of operation. Only the newest (active) segment of a partition is written; its
batches are appended at ``size`` with ``pwrite`` and its index entries live in memory
until the segment is sealed (rolled) or the broker shuts down cleanly, when the index
files are written whole. Small appends to a ``sync`` topic keep zeros written ahead of
the data (``file_end`` > ``size``), so that the ``fdatasync`` after each of them finds
the file's length and blocks unchanged and writes no metadata (decision
0016); sealing and a clean close cut the file back to ``size``. A sealed segment loads
its indexes lazily on first lookup, and rebuilds them from the log when they are
missing or fail validation. Lookups take the floor index entry and walk batch headers
from there (one ``pread`` per 64 KiB).
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_left
from typing import Iterator

from . import format as F
from .filecache import FileCache, Handle
from .format import HEADER_SIZE, BatchInfo, InvalidBatch, parse_header, segment_name
from .index import IndexDamaged, OffsetIndex, TimeIndex, read_file, write_file

log = logging.getLogger(__name__)

WALK_CHUNK = 64 * 1024
MAX_IOVECS = 512  # below IOV_MAX (1024); more buffers are joined first
ZERO_WRITE_MAX = 64 * 1024  # writes up to this size keep zeroed space ahead of them
ZERO_AHEAD_MIN = 16 * 1024  # zeroed space written at once: a quarter of the segment,
ZERO_AHEAD_MAX = 1024 * 1024  # between these bounds (many quiet partitions stay small)
_ZEROS = bytes(ZERO_AHEAD_MAX)


class Segment:
    __slots__ = (
        "base_offset",
        "log_path",
        "index_path",
        "time_path",
        "key_path",
        "size",
        "file_end",
        "next_offset",
        "max_timestamp",
        "created_ms",
        "sealed",
        "index_interval",
        "_cache",
        "_index",
        "_tindex",
        "_since_index",
    )

    def __init__(self, directory: str, base_offset: int, cache: FileCache, index_interval: int) -> None:
        name = os.path.join(directory, segment_name(base_offset))
        self.base_offset = base_offset
        self.log_path = name + F.LOG_SUFFIX
        self.index_path = name + F.INDEX_SUFFIX
        self.time_path = name + F.TIMEINDEX_SUFFIX
        self.key_path = name + F.KEYINDEX_SUFFIX  # written by keyindexer.py, not here
        self.size = 0
        self.file_end = 0  # the file's length: ``size`` plus the zeroed space ahead
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.created_ms: int | None = None
        self.sealed = False
        self.index_interval = index_interval
        self._cache = cache
        self._index: OffsetIndex | None = OffsetIndex()
        self._tindex: TimeIndex | None = TimeIndex()
        self._since_index = 0

    def __repr__(self) -> str:
        return f"<Segment {self.log_path} size={self.size} next={self.next_offset}>"

    # -- writing -----------------------------------------------------------------

    def write_at(self, bufs: list[bytes | bytearray | memoryview], position: int, zero_ahead: bool = False) -> Handle:
        """Write ``bufs`` (whole batches, back to back) at ``position`` with one
        ``pwritev``; returns the handle written to. With ``zero_ahead`` (a ``sync``
        topic), a small write that leaves less than a quarter of the zeroed space ahead
        of it writes more zeros after it. On a failed write the file is cut back to
        ``position`` and OSError propagates."""
        h = self._cache.get(self.log_path, writable=True)
        if len(bufs) > MAX_IOVECS:
            bufs = [b"".join(bufs)]
        try:
            n = os.pwritev(h.fd, bufs, position)
            total = sum(len(b) for b in bufs) if len(bufs) > 1 else len(bufs[0])
            if n < total:  # short write: disk full or a signal; finish or fail
                rest = memoryview(b"".join(bufs))[n:]
                while rest:
                    k = os.pwrite(h.fd, rest, position + n)
                    rest, n = rest[k:], n + k
        except OSError:
            os.ftruncate(h.fd, position)
            self.file_end = position
            raise
        end = position + total
        if end > self.file_end:
            self.file_end = end
        if zero_ahead and total <= ZERO_WRITE_MAX:
            ahead = min(ZERO_AHEAD_MAX, max(ZERO_AHEAD_MIN, end >> 2))
            if self.file_end - end < ahead >> 2:
                self._write_zeros(h.fd, end + ahead)
        return h

    def cut_back(self, position: int, next_offset: int) -> None:
        """Forget the batches placed from ``position`` on (their write failed; the file
        was cut there or never reached): the segment ends at ``position`` and
        ``next_offset``, its in-memory indexes without the entries past them."""
        self.size = position
        self.next_offset = next_offset
        idx, tidx = self.index, self.time_index
        keep = bisect_left(idx.positions, position)
        del idx.positions[keep:], idx.rel_offsets[keep:]
        keep = bisect_left(tidx.rel_offsets, next_offset - self.base_offset)
        del tidx.timestamps[keep:], tidx.rel_offsets[keep:]
        last = idx.positions[-1] if len(idx) else 0
        self.max_timestamp = tidx.last_timestamp()
        for _, info in self.walk(last, position):  # the batches after the last entry
            self.max_timestamp = max(self.max_timestamp, info.max_timestamp)
        self._since_index = position - last

    def _write_zeros(self, fd: int, until: int) -> None:
        """Zeros from ``file_end`` to ``until``; a failure (disk full) just ends them:
        the next append meets it again and fails as it should."""
        at = self.file_end
        try:
            while at < until:
                at += os.pwrite(fd, memoryview(_ZEROS)[: min(until - at, ZERO_AHEAD_MAX)], at)
                self.file_end = at
        except OSError as e:
            log.debug("zeroing ahead in %s stopped at %d: %s", self.log_path, at, e)

    def trim(self, sync: bool = False) -> None:
        """Cut the zeroed space off the end of the file (and, with ``sync``, make that
        durable)."""
        if self.file_end <= self.size:
            return
        fd = self._cache.get(self.log_path, writable=True).fd
        os.ftruncate(fd, self.size)
        if sync:
            os.fdatasync(fd)
        self.file_end = self.size

    def on_append(self, position: int, base: int, next_offset: int, max_ts: int, size: int, now: int) -> None:
        """Bookkeeping for a batch just placed at ``position``: size, next offset and the
        index entries, by the same rule rebuild_from applies."""
        if self.created_ms is None:
            self.created_ms = now
        self._index_batch(position, base, max_ts, size)
        self.size = position + size
        self.next_offset = next_offset

    def _index_batch(self, position: int, base: int, max_ts: int, size: int) -> None:
        """The one indexing rule: an offset entry for a segment's first batch and then for
        the first batch at or past ``index_interval`` bytes since the last entry, with a
        time entry beside it whenever the largest timestamp grew."""
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
        if self._since_index >= self.index_interval or not position:
            self._add_entry(base, position)
        self._since_index += size

    def _add_entry(self, base: int, position: int) -> None:
        idx, tidx = self._index, self._tindex
        assert idx is not None and tidx is not None
        rel = base - self.base_offset
        idx.append(rel, position)
        self._since_index = 0
        if self.max_timestamp > tidx.last_timestamp():
            tidx.append(self.max_timestamp, rel)

    def seal(self) -> None:
        """No more appends: cut the zeroed space off (durably: a sealed segment ends at
        its last batch before the next segment exists), add the final time entry and
        write both indexes."""
        if self.sealed:
            return
        self.trim(sync=True)
        self._final_time_entry()
        self.sealed = True
        self.write_indexes()

    def _final_time_entry(self) -> None:
        idx, tidx = self.index, self.time_index
        if self.max_timestamp > tidx.last_timestamp() and idx.rel_offsets:
            tidx.append(self.max_timestamp, idx.rel_offsets[-1])

    def remove_index_files(self) -> None:
        for path in (self.index_path, self.time_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def write_indexes(self) -> None:
        write_file(self.index_path, self.index.to_bytes())
        write_file(self.time_path, self.time_index.to_bytes())

    # -- reading -----------------------------------------------------------------

    @property
    def index(self) -> OffsetIndex:
        if self._index is None:
            self._load_indexes()
        assert self._index is not None
        return self._index

    @property
    def time_index(self) -> TimeIndex:
        if self._tindex is None:
            self._load_indexes()
        assert self._tindex is not None
        return self._tindex

    def _load_indexes(self) -> None:
        try:
            self.load_indexes_strict()
        except IndexDamaged as e:
            log.warning("rebuilding index of %s (%s)", self.log_path, e)
            self.rebuild_indexes()

    def load_indexes_strict(self) -> None:
        """Load both index files; IndexDamaged if either is missing or inconsistent."""
        data = read_file(self.index_path)
        tdata = read_file(self.time_path)
        if data is None or tdata is None:
            raise IndexDamaged("missing")
        idx = OffsetIndex.from_bytes(data, self.size)
        tidx = TimeIndex.from_bytes(tdata, max(self.next_offset - self.base_offset - 1, 0))
        if self.size and (not idx.rel_offsets or idx.positions[0] != 0 or idx.rel_offsets[0] != 0):
            raise IndexDamaged("first batch not indexed")
        self._index, self._tindex = idx, tidx

    def rebuild_indexes(self) -> None:
        """Recreate both indexes from the batch headers (and write them if sealed)."""
        self.rebuild_from(list(self.walk(0)))
        if self.sealed:
            self._final_time_entry()
            self.write_indexes()

    def rebuild_from(self, batches: list[tuple[int, BatchInfo]]) -> None:
        """Recreate the in-memory indexes from (position, header) of every batch."""
        self._index, self._tindex = OffsetIndex(), TimeIndex()
        self._since_index = 0
        self.max_timestamp = -1
        for pos, info in batches:
            self._index_batch(pos, info.base_offset, info.max_timestamp, info.size)

    def extend_from(self, batches: list[tuple[int, BatchInfo]]) -> None:
        """Continue loaded indexes with batches walked from the last index entry on
        (the first of which is that entry's batch), as appends would have."""
        idx = self.index
        self.max_timestamp = self.time_index.last_timestamp()
        self._since_index = 0
        last_pos = idx.last()[1] if idx.rel_offsets else -1
        for pos, info in batches:
            if pos == last_pos:
                self.max_timestamp = max(self.max_timestamp, info.max_timestamp)
                self._since_index = info.size
                continue
            self._index_batch(pos, info.base_offset, info.max_timestamp, info.size)

    def pread(self, position: int, size: int) -> bytes:
        return os.pread(self._cache.get(self.log_path).fd, size, position)

    def walk(self, position: int, end: int | None = None) -> Iterator[tuple[int, BatchInfo]]:
        """(position, header) of each batch from ``position`` to ``end`` (default: size)."""
        end = self.size if end is None else end
        buf = b""
        buf_start = position
        while position + HEADER_SIZE <= end:
            rel = position - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf = self.pread(position, min(WALK_CHUNK, end - position))
                buf_start, rel = position, 0
                if len(buf) < HEADER_SIZE:
                    return
            try:
                info = parse_header(buf, rel)
            except InvalidBatch:
                return
            if position + info.size > end:
                return
            yield position, info
            position += info.size

    def position_of(self, offset: int) -> tuple[int, BatchInfo] | None:
        """Position and header of the batch holding ``offset``, or None if it is past the end."""
        if offset >= self.next_offset:
            return None
        _, start = self.index.floor(offset - self.base_offset)
        for pos, info in self.walk(start):
            if info.next_offset > offset:
                return pos, info
        return None

    def start_for_time(self, timestamp: int) -> int:
        """A position at or before the first batch that may hold a record >= ``timestamp``."""
        rel = self.time_index.start_for(timestamp)
        return self.index.floor(rel)[1]
