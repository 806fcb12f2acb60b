"""Opening a partition directory: find its segments and make the log a valid prefix.

After an unclean stop (no clean-shutdown marker) the active segment is scanned in full:
every batch must have magic 2, a length that fits, a valid CRC-32C and the base offset
that follows its predecessor. The longest prefix of such batches is kept; the rest of the
file is cut off and the segment's indexes are rebuilt from the scan (zeros alone there
are the space written ahead of appends, not damage: cut without a report). Older
segments are sealed; their indexes are checked (rebuilt if missing or damaged) and their
batch headers walked from the last index entry to the end: an older segment whose tail
is torn (the walk does not end at the file's end, or not at the next segment's base
offset) becomes the end of the log; it is CRC-scanned like an active segment and every
later segment is removed, so the log stays one prefix. One kind of gap is kept: a sealed
segment whose whole batches end below the next segment's base offset (a write failed
there, and the partition went on in a new segment past the offsets it had given:
partition.py). Bytes of a sealed
segment before its last index entry are not CRC-checked at start (that would read every
segment): a crash does not damage them, and bit rot there is left to the CRC checks of
Kafka clients.

After a clean stop the indexes written at shutdown are trusted after the same checks,
and only the active segment's tail after its last index entry is CRC-checked (an active
segment under 4 MiB has no index files then, and is scanned whole).
"""

from __future__ import annotations

import logging
import mmap
import os
from dataclasses import dataclass, field

from . import format as F
from .filecache import FileCache
from .format import BatchInfo
from .index import IndexDamaged
from .segment import Segment

log = logging.getLogger(__name__)


SALVAGE_SCAN_MAX = 64 << 20  # bytes past a cut searched for intact batches, to report them


@dataclass
class RecoveryReport:
    directory: str
    truncated_bytes: int = 0
    removed_segments: list[str] = field(default_factory=list)
    rebuilt_indexes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # the first offset no longer in the log after a cut (None: nothing was cut): queue
    # entries and timers at or past it point at nothing, and the offsets are given again
    cut_offset: int | None = None
    # the intact records found past the cut and dropped with it: first, last, count
    dropped: tuple[int, int, int] | None = None
    # after a full scan of the active segment: its base offset and the abort markers
    # there, (producer, offset), for the aborted-transaction index's check (txnindex.py)
    scanned_from: int | None = None
    abort_markers: list[tuple[int, int]] = field(default_factory=list)
    topic: str = ""  # set by the log manager
    partition: int = -1

    @property
    def changed(self) -> bool:
        return bool(self.truncated_bytes or self.removed_segments or self.rebuilt_indexes)


def scan_valid(path: str, base_offset: int, start: int = 0) -> tuple[list[tuple[int, BatchInfo]], int, str]:
    """CRC-check batches of ``path`` from ``start``: (batches, valid end, why it stopped)."""
    size = os.path.getsize(path)
    if size <= start:
        return [], start, ""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        found, pos, reason = F.scan_valid(m, start, size, base_offset)
    return [(info.position, info) for info in found], pos, reason


def intact_after(path: str, start: int, end: int) -> tuple[int, int, int] | None:
    """(first offset, last offset, records) of the CRC-valid batches that lie between
    ``start`` and ``end`` of ``path`` past damage (searched byte by byte for a batch
    header, up to SALVAGE_SCAN_MAX bytes): what a cut there drops, for the report."""
    end = min(end, start + SALVAGE_SCAN_MAX)
    if end - start < F.HEADER_SIZE:
        return None
    first = last = -1
    count = 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        pos = start
        while pos + F.HEADER_SIZE <= end:
            at = m.find(bytes([F.MAGIC]), pos + MAGIC_AT, end)
            if at < 0:
                break
            cand = at - MAGIC_AT
            try:
                info = F.validate(m, cand, min(end, len(m)))
            except F.InvalidBatch:
                pos = cand + 1
                continue
            if first < 0:
                first = info.base_offset
            last = info.base_offset + info.last_offset_delta
            count += info.last_offset_delta + 1
            pos = cand + info.size
    return None if first < 0 else (first, last, count)


MAGIC_AT = 16  # a batch header's magic byte


def _add_dropped(report: RecoveryReport, found: tuple[int, int, int] | None) -> None:
    d = report.dropped
    if found is not None:
        report.dropped = found if d is None else (min(d[0], found[0]), max(d[1], found[1]), d[2] + found[2])


def _zeros_only(path: str, start: int, end: int) -> bool:
    """Whether bytes ``[start, end)`` of ``path`` are all zero."""
    with open(path, "rb") as f:
        while start < end:
            chunk = os.pread(f.fileno(), min(1 << 20, end - start), start)
            if not chunk or chunk.count(0) != len(chunk):
                return False
            start += len(chunk)
    return True


def list_segments(directory: str) -> list[int]:
    bases = []
    for name in os.listdir(directory):
        base = F.segment_base(name)
        if base is not None:
            bases.append(base)
        elif os.path.splitext(name)[1] in (F.TMP_SUFFIX, F.DELETED_SUFFIX):
            os.unlink(os.path.join(directory, name))
    bases.sort()
    known = {F.segment_name(b) for b in bases}
    for name in os.listdir(directory):
        stem, ext = os.path.splitext(name)
        if ext in (F.INDEX_SUFFIX, F.TIMEINDEX_SUFFIX, F.KEYINDEX_SUFFIX) and stem not in known:
            os.unlink(os.path.join(directory, name))
    return bases


def _remove_segment(seg: Segment, cache: FileCache) -> None:
    cache.discard(seg.log_path)
    for p in (seg.log_path, seg.index_path, seg.time_path, seg.key_path):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


def _check_sealed(seg: Segment, next_base: int, clean: bool, report: RecoveryReport) -> bool:
    """Check a sealed segment's indexes (rebuild if damaged) and, after an unclean stop,
    that its batches run on to ``next_base``. False: the segment is damaged."""
    seg.sealed = True
    seg.next_offset = next_base
    try:
        seg.load_indexes_strict()
    except IndexDamaged as e:
        report.rebuilt_indexes.append(f"{seg.index_path} ({e})")
        seg.rebuild_indexes()
    if seg.time_index.timestamps:
        seg.max_timestamp = seg.time_index.last_timestamp()
    if clean:
        return True
    rel, start = seg.index.last()
    end, expected = start, seg.base_offset + rel
    for pos, info in seg.walk(start):
        if info.base_offset != expected:
            break
        end, expected = pos + info.size, info.next_offset
    if end != seg.size or expected > next_base:
        return False
    if expected < next_base:  # offsets whose write failed (a full disk): never given again
        seg.next_offset = expected
        report.notes.append(f"{seg.log_path}: offsets {expected}..{next_base - 1} were never written (a gap)")
    return True


def _open_active(seg: Segment, clean: bool, now_ms: int, report: RecoveryReport) -> None:
    seg.sealed = False
    try:  # the active segment's key index is in memory; a file is left from when it was sealed
        os.unlink(seg.key_path)
    except FileNotFoundError:
        pass
    start = 0
    if clean and (os.path.exists(seg.index_path) or os.path.exists(seg.time_path)):
        # a small active segment has no index files after a clean stop: just scan it
        try:
            seg.next_offset = seg.base_offset + (1 << 31)  # bound for the check only
            seg.load_indexes_strict()
            start = seg.index.last()[1]
        except IndexDamaged as e:
            report.rebuilt_indexes.append(f"{seg.index_path} ({e})")
    if start:
        rel = seg.index.last()[0]
        infos, end, reason = scan_valid(seg.log_path, seg.base_offset + rel, start)
        if not infos:
            start = 0  # the index points at nothing valid: scan it all
    if not start:
        infos, end, reason = scan_valid(seg.log_path, seg.base_offset, 0)
    if end < seg.size:
        if _zeros_only(seg.log_path, end, seg.size):  # the space zeroed ahead of appends
            log.debug("recovery: %s: %d zeroed bytes after position %d cut", seg.log_path, seg.size - end, end)
        else:
            report.truncated_bytes += seg.size - end
            _add_dropped(report, intact_after(seg.log_path, end, seg.size))
            cut_at = infos[-1][1].next_offset if infos else seg.base_offset
            lost = (f"records {report.dropped[0]}..{report.dropped[1]} ({report.dropped[2]}) found intact after "
                    f"it dropped too" if report.dropped else "no intact record found after it")
            report.notes.append(f"{seg.log_path}: the log now ends at offset {cut_at}: {seg.size - end} bytes cut "
                                f"at position {end} ({reason}); {lost}")
            report.cut_offset = cut_at
        os.truncate(seg.log_path, end)
    seg.size = seg.file_end = end
    if start:
        seg.extend_from(infos)
    else:
        seg.rebuild_from(infos)
        report.scanned_from = seg.base_offset
        report.abort_markers = [(info.producer_id, info.base_offset) for pos, info in infos
                                if info.attributes & F.ATTR_CONTROL and control_type_at(seg, pos, info) == F.CONTROL_ABORT]
    seg.next_offset = infos[-1][1].next_offset if infos else seg.base_offset
    if seg.size:
        first = infos[0][1].first_timestamp if infos and infos[0][0] == 0 else now_ms
        seg.created_ms = min(now_ms, first) if first > 0 else now_ms


def control_type_at(seg: Segment, position: int, info: BatchInfo) -> int | None:
    """``format.control_type`` of the batch ``info`` at ``position`` of ``seg``."""
    return F.control_type(seg.pread(position, F.CONTROL_READ), info._replace(position=0))


def recover_partition(
    directory: str, cache: FileCache, index_interval: int, clean: bool, now_ms: int
) -> tuple[list[Segment], RecoveryReport]:
    """Open (creating if needed) the partition in ``directory``; its segments, oldest first."""
    os.makedirs(directory, exist_ok=True)
    report = RecoveryReport(directory)
    bases = list_segments(directory)
    if not bases:
        seg = Segment(directory, 0, cache, index_interval)
        cache.get(seg.log_path, writable=True)
        return [seg], report
    segments = [Segment(directory, b, cache, index_interval) for b in bases]
    for seg in segments:
        seg.size = seg.file_end = os.path.getsize(seg.log_path)
    for i, seg in enumerate(segments[:-1]):
        if not _check_sealed(seg, segments[i + 1].base_offset, clean, report):
            report.notes.append(f"{seg.log_path}: damaged; the log now ends in it")
            for later in segments[i + 1 :]:
                _add_dropped(report, intact_after(later.log_path, 0, later.size))
                _remove_segment(later, cache)
                report.removed_segments.append(later.log_path)
            segments = segments[: i + 1]
            _open_active(segments[-1], clean, now_ms, report)
            if report.cut_offset is None:  # the damaged segment itself was whole: cut at its end
                report.cut_offset = segments[-1].next_offset
            break
    else:
        _open_active(segments[-1], clean, now_ms, report)
    if report.changed:
        for note in report.notes:
            log.warning("recovery: %s", note)
        if report.removed_segments:
            log.warning("recovery: removed %s", ", ".join(report.removed_segments))
        if report.rebuilt_indexes:
            log.warning("recovery: rebuilt indexes %s", ", ".join(report.rebuilt_indexes))
    return segments, report
