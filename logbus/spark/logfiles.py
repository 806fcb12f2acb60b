"""A read-only view of a logbus data directory, for readers outside the broker (Spark).

Theory of operation. Everything here follows docs/format.md and nothing else: it lists
topics from the ``log/`` tree, partitions from their directories and segments from
their file names; it never writes, locks, renames or truncates a file. The byte layout,
the names and the valid-prefix rule come from ``logbus.core.log.format``, the one part of
the broker it imports (that module loads neither Twisted nor aiokafka).
A broker may be appending while we read, and retention may delete old segments:

- **The readable end** of a partition is the end of the longest prefix of complete,
  CRC-valid batches whose offsets continue (format.md section 5), found by walking the
  newest segment from a trusted ``.index`` entry (or from position 0: the active
  segment's index lives in the broker's memory). A batch being written fails the
  length or CRC check and is simply not there yet, so a reader never blocks a writer
  and never sees a torn record. Bytes still only in the page cache cannot be told
  from durable ones (format.md section 11): the end is "complete and CRC-valid".
- **Sealed segments** never change; the ``.index`` is a hint, checked before use
  (section 8): the floor entry must point at a batch with the expected base offset.
- **Retention** may delete a segment at any moment: a missing file is reported as
  ``DataLoss`` to the caller, who decides (``failOnDataLoss``).

``PartitionFiles.chunks(lo, hi)`` yields the bytes of the batches holding offsets
``[lo, hi)``, CRC-checked, a few MiB at a time, for ``decode.py``. A read_committed
reader stops at ``stable_end`` and leaves out the batches ``aborted()`` covers.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..core.log import format as F
from ..core.log.format import HEADER_SIZE, LOG_OVERHEAD, BatchInfo, InvalidBatch

WALK_CHUNK = 64 * 1024
READ_CHUNK = 8 * 1024 * 1024  # bytes of batches handed to the decoder at once
_scan = F.scan_valid
_crc = F.stored_crc
_declared = F.declared_size


class LogReadError(Exception):
    """The data directory cannot be read as asked (missing topic, corrupt batch)."""


class DataLoss(LogReadError):
    """Offsets that were asked for are gone (retention deleted their segment)."""


def header(buf: bytes, pos: int, end: int) -> BatchInfo | None:
    """The batch whose v2 header is at ``pos`` of ``buf`` (ending by ``end``), from the
    header alone: its bytes after the header are neither needed nor checked."""
    if end - pos < HEADER_SIZE:
        return None
    try:
        return F.parse_header(buf, pos)
    except InvalidBatch:
        return None


class DataDir:
    """The ``log/`` tree of one data directory."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        root = os.path.join(self.path, F.LOG_DIR)
        self.root = root if os.path.isdir(root) else self.path  # also accept <data>/log itself
        if not os.path.isdir(self.root):
            raise LogReadError(f"{self.path!r} is not a logbus data directory (no log/ in it)")

    def topics(self) -> list[str]:
        """Topic names found in the tree (may include an orphan of a crashed delete)."""
        names = []
        for entry in os.listdir(self.root):
            if entry.startswith("."):
                continue
            if os.path.isdir(os.path.join(self.root, entry)):
                names.append(F.topic_name(entry))
        return sorted(names)

    def partitions(self, topic: str) -> list[int]:
        tdir = os.path.join(self.root, F.topic_dirname(topic))
        try:
            entries = os.listdir(tdir)
        except FileNotFoundError:
            return []
        found = []
        for e in entries:
            index = F.partition_index(e)
            if index is not None and os.path.isdir(os.path.join(tdir, e)):
                found.append(index)
        return sorted(found)

    def partition(self, topic: str, index: int) -> PartitionFiles:
        path = os.path.join(self.root, F.topic_dirname(topic), F.partition_dirname(index))
        return PartitionFiles(path, topic, index)


class SegmentFile:
    """An open ``.log`` file: its ``size`` and ``pread(n, position)`` (a local file here;
    an object in a bucket in remotefiles.py)."""

    def __init__(self, path: str) -> None:
        self._f = open(path, "rb")
        self.fd = self._f.fileno()
        self.size = os.fstat(self.fd).st_size

    def pread(self, n: int, position: int) -> bytes:
        return os.pread(self.fd, n, position)

    def __enter__(self) -> SegmentFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()


@dataclass(frozen=True, slots=True)
class _EndHint:
    """Where an ``end()`` scan of the active segment stopped: ``pos`` in segment ``base``,
    where offset ``offset`` would start, after the batch at ``last`` (position, CRC).
    The segment may have been replaced since (the topic deleted and created again, a
    broker's recovery truncating a torn tail), so the hint is used only while that
    batch is still there, byte for byte as far as its CRC tells."""

    base: int
    pos: int
    offset: int
    last: tuple[int, int] | None

    def holds(self, f: SegmentFile) -> bool:
        if self.last is None:
            return self.pos == 0
        position, crc = self.last
        if self.pos > f.size:
            return False
        head = f.pread(HEADER_SIZE, position)
        b = header(head, 0, len(head))
        return (b is not None and position + b.size == self.pos and b.next_offset == self.offset
                and _crc(head, 0) == crc)


@dataclass
class _TxnScan:
    """``stable_end``'s walk: batches below ``at`` seen; the producers with a transaction
    open (its first offset), and aborted ones not yet in the index (producer, first, marker)."""

    at: int
    open: dict[int, int] = field(default_factory=dict)
    unindexed: list[tuple[int, int, int]] = field(default_factory=list)


class PartitionFiles:
    """The segment files of one partition, read without any lock."""

    def __init__(self, directory: str, topic: str = "", index: int = 0) -> None:
        self.directory = directory
        self.topic = topic
        self.index = index
        # streaming: where the last end() scan stopped, and stable_end()'s walk
        self._end_hint: _EndHint | None = None
        self._txns: _TxnScan | None = None

    def __repr__(self) -> str:
        return f"<PartitionFiles {self.topic}/{self.index}>"

    def _path(self, base: int, ext: str) -> str:
        return os.path.join(self.directory, F.segment_name(base) + ext)

    # -- file access (what remotefiles.py replaces) -----------------------------------------

    def open_segment(self, base: int) -> SegmentFile:
        """Segment ``base``'s ``.log``; FileNotFoundError when it is gone."""
        return SegmentFile(self._path(base, F.LOG_SUFFIX))

    def segment_exists(self, base: int) -> bool:
        return os.path.exists(self._path(base, F.LOG_SUFFIX))

    def index_bytes(self, base: int, suffix: str) -> bytes | None:
        """Segment ``base``'s ``.index`` or ``.timeindex`` bytes, None when absent."""
        try:
            with open(self._path(base, suffix), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def segments(self) -> list[int]:
        """Base offsets of the segments present, oldest first."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        bases = [F.segment_base(n) for n in names]
        return sorted(b for b in bases if b is not None)

    def start(self) -> int:
        """The log start offset: the oldest segment's base offset (0 if none)."""
        bases = self.segments()
        return bases[0] if bases else 0

    def end(self) -> int:
        """The readable end offset: the next offset after the last complete, CRC-valid
        batch of the newest segment (its base offset if it has none)."""
        bases = self.segments()
        if not bases:
            return 0
        base = bases[-1]
        try:
            with self.open_segment(base) as f:
                size = f.size
                hint = self._end_hint
                if hint is not None and hint.base == base and hint.holds(f):
                    pos, expected, last = hint.pos, hint.offset, hint.last
                else:
                    pos, expected = self._floor(base, None)
                    last = None
                while pos < size:
                    buf = f.pread(min(READ_CHUNK, size - pos), pos)
                    batches, at, _ = _scan(buf, 0, len(buf), expected)
                    if not batches:
                        need = _declared(buf) if len(buf) >= LOG_OVERHEAD else 0
                        if need > len(buf) and pos + need <= size:
                            buf = f.pread(need, pos)  # one batch larger than a chunk
                            batches, at, _ = _scan(buf, 0, len(buf), expected)
                        if not batches:
                            break
                    b = batches[-1]
                    last = (pos + b.position, _crc(buf, b.position))
                    expected = b.next_offset
                    pos += at
        except FileNotFoundError:
            return self.end() if self.segments() != bases else base
        self._end_hint = _EndHint(base, pos, expected, last)
        return expected

    def stable_end(self, end: int) -> int:
        """Where a read_committed reader stops (docs/format.md section 4.5), at or below
        ``end`` (``end()``): the first offset of the earliest transaction with no marker,
        or with an abort marker whose ``aborted.txnindex`` entry is not there yet (the
        broker writes it just after the marker). The batch headers are walked once from
        the log start, then on from where the last call stopped."""
        scan = self._txns
        if scan is None or scan.at > end or scan.at < self.start():
            scan = self._txns = _TxnScan(self.start())
        try:
            for data, batches in self.chunks(scan.at, end):
                for b in batches:
                    kind = F.control_type(data, b) if b.attributes & F.ATTR_CONTROL else None
                    aborted = F.follow_transactions(scan.open, b, kind)
                    if aborted is not None:
                        scan.unindexed.append((*aborted, b.base_offset))
                scan.at = batches[-1].next_offset
        except DataLoss:  # retention deleted the oldest segment meanwhile: walk again from the new start
            self._txns = None
            return self.stable_end(end)
        if scan.unindexed:
            entries = self.aborted()
            scan.unindexed = [(pid, first, marker) for pid, first, marker in scan.unindexed
                              if not any(e.producer_id == pid and e.first_offset <= first and e.last_offset >= marker
                                         for e in entries)]
        return min([end, *scan.open.values(), *(first for _, first, _ in scan.unindexed)])

    def aborted(self) -> list[F.AbortedTxn]:
        """The partition's aborted transactions (``aborted.txnindex``; none when absent)."""
        try:
            with open(os.path.join(self.directory, F.TXNINDEX_NAME), "rb") as f:
                return F.unpack_aborted(f.read())
        except FileNotFoundError:
            return []

    def _floor(self, base: int, offset: int | None) -> tuple[int, int]:
        """(position, base offset) of a batch at or before ``offset`` (None: the last
        index entry) in segment ``base``, from its ``.index`` when that checks out."""
        entries = _index_entries(self.index_bytes(base, F.INDEX_SUFFIX))
        if not entries:
            return 0, base
        rel = None if offset is None else offset - base
        try:
            with self.open_segment(base) as f:
                size = f.size
                if entries[0] != (0, 0):
                    return 0, base
                i = len(entries) if rel is None else bisect_right(entries, (rel, 1 << 40))
                while i > 1:
                    r, p = entries[i - 1]
                    if p < size:
                        head = header(f.pread(HEADER_SIZE, p), 0, HEADER_SIZE)
                        if head is not None and head.base_offset == base + r:
                            return p, base + r
                    i -= 1
        except FileNotFoundError:
            pass
        return 0, base

    def locate(self, offset: int, bases: list[int] | None = None) -> tuple[int, int, int] | None:
        """(segment base, position, batch base offset) of the batch holding ``offset``,
        walking headers from the floor index entry; None if it is not in the files."""
        bases = self.segments() if bases is None else bases
        i = bisect_right(bases, offset) - 1
        if i < 0:
            return None
        base = bases[i]
        pos, expected = self._floor(base, offset)
        try:
            with self.open_segment(base) as f:
                size = f.size
                buf, buf_at = b"", pos
                while pos + HEADER_SIZE <= size:
                    rel = pos - buf_at
                    if rel + HEADER_SIZE > len(buf):
                        buf, buf_at, rel = f.pread(WALK_CHUNK, pos), pos, 0
                    b = header(buf, rel, rel + size - pos)
                    if b is None or pos + b.size > size or b.base_offset != expected:
                        return None
                    if b.next_offset > offset:
                        return base, pos, b.base_offset
                    pos += b.size
                    expected = b.next_offset
        except FileNotFoundError:
            return None
        return None

    def offset_for_time(self, timestamp: int, end: int) -> int | None:
        """The first offset below ``end`` whose record timestamp is >= ``timestamp``,
        or None if there is none (format.md section 7)."""
        from .decode import record_timestamps

        bases = self.segments()
        for i, base in enumerate(bases):
            if base >= end:
                break
            sealed = i + 1 < len(bases)
            tindex = _time_entries(self.index_bytes(base, F.TIMEINDEX_SUFFIX)) if sealed else []
            if sealed and tindex and tindex[-1][0] < timestamp:
                continue
            lo = base
            for t, r in tindex:
                if t < timestamp:
                    lo = base + r
            nxt = bases[i + 1] if sealed else end
            try:
                for data, batches in self.chunks(lo, min(nxt, end), bases=bases[i : i + 2]):
                    for b in batches:
                        if b.max_timestamp < timestamp or b.attributes & F.ATTR_CONTROL:
                            continue
                        for off, ts in record_timestamps(data, b):
                            if ts >= timestamp and off < end:
                                return off
            except DataLoss:
                continue
        return None

    def chunks(self, lo: int, hi: int, bases: list[int] | None = None) -> Iterator[tuple[bytes, list[BatchInfo]]]:
        """(bytes, batches in them) for every batch holding an offset in ``[lo, hi)``,
        CRC-checked, in offset order, about READ_CHUNK bytes at a time. Raises DataLoss
        when a segment holding part of the range is gone, LogReadError when a batch
        below ``hi`` is damaged."""
        if lo >= hi:
            return
        bases = self.segments() if bases is None else bases
        if not bases or lo < bases[0]:
            first = bases[0] if bases else None
            raise DataLoss(f"{self.topic}/{self.index}: offset {lo} is before the log start {first}")
        found = self.locate(lo, bases)
        if found is None:
            if not self.segment_exists(bases[bisect_right(bases, lo) - 1]):
                raise DataLoss(f"{self.topic}/{self.index}: the segment holding offset {lo} was deleted")
            raise LogReadError(f"{self.topic}/{self.index}: offset {lo} is not in the log (end reached)")
        base, pos, expected = found
        i = bases.index(base)
        while expected < hi:
            path = self._path(base, F.LOG_SUFFIX)
            try:
                f = self.open_segment(base)
            except FileNotFoundError:
                raise DataLoss(f"{self.topic}/{self.index}: segment {base} was deleted while reading") from None
            with f:
                size = f.size
                while pos < size and expected < hi:
                    buf = f.pread(min(READ_CHUNK, size - pos), pos)
                    batches, at, _ = _scan(buf, 0, len(buf), expected, hi)
                    if not batches:
                        need = _declared(buf) if len(buf) >= LOG_OVERHEAD else 0
                        if need > len(buf) and pos + need <= size:
                            buf = f.pread(need, pos)  # one batch larger than a chunk
                            batches, at, _ = _scan(buf, 0, len(buf), expected)
                        if not batches:
                            raise LogReadError(
                                f"{self.topic}/{self.index}: no valid batch with offset {expected} at"
                                f" byte {pos} of {path} (damaged, or truncated by recovery)"
                            )
                    expected = batches[-1].next_offset
                    yield buf, batches
                    pos += at
            if expected >= hi:
                return
            i += 1
            if i >= len(bases):
                bases = self.segments()
                if bases and bases[-1] > base:
                    i = bisect_right(bases, base)
                else:
                    raise LogReadError(f"{self.topic}/{self.index}: log ends at {expected}, before {hi}")
            base, pos = bases[i], 0
            if base != expected:
                raise LogReadError(
                    f"{self.topic}/{self.index}: segment {base} does not continue at offset {expected}"
                )


def _index_entries(data: bytes | None) -> list[tuple[int, int]]:
    """Checked ``.index`` entries (format.md section 8), [] if absent or inconsistent."""
    if not data or len(data) % F.OFFSET_ENTRY.size:
        return []
    entries = list(F.OFFSET_ENTRY.iter_unpack(data))
    for a, b in zip(entries, entries[1:]):
        if b[0] <= a[0] or b[1] <= a[1]:
            return []
    return entries


def _time_entries(data: bytes | None) -> list[tuple[int, int]]:
    if not data or len(data) % F.TIME_ENTRY.size:
        return []
    entries = list(F.TIME_ENTRY.iter_unpack(data))
    for a, b in zip(entries, entries[1:]):
        if b[0] < a[0] or b[1] < a[1]:
            return []
    return entries
