"""A partition's aborted-transaction index: ``<partition>/aborted.txnindex``.

Each aborted transaction that wrote to the partition is one entry (``format.AbortedTxn``,
32 bytes: producer id, first offset, the abort marker's offset, the last stable offset
then), appended and synced before the abort is complete (the transaction coordinator,
core/streams/transactions.py, finishes an abort caught by a crash at the next start, so
an entry lost with the page cache is written again). A read_committed Kafka fetch lists
the entries its range overlaps, and a reader of the files (``logbus.spark``) skips the
records they cover. Entries wholly below the log start go when retention deletes
segments (the file is rewritten aside and renamed). A torn last entry is ignored.

Recovery (``recover``, once when the partition opens) brings the index in line with the
log: entries past a log end that recovery cut are dropped (those offsets are given
again), and the index is rebuilt from the log's markers (``rebuild``: a walk of every
batch header, ``format.follow_transactions``) when the file is missing from a partition
with records (every partition has one, empty when nothing aborted), holds an entry that
cannot be, or disagrees with the abort markers recovery's full scan of the active
segment found (a marker with no entry, or an entry with no marker).

    idx = AbortedIndex(partition_dir)
    idx.recover(segments, report)                                # a note when it changed
    idx.add(AbortedTxn(producer_id, first, marker_offset, lso))   # OSError: not added
    idx.between(fetch_offset, end)                               # [AbortedTxn]
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from . import format as F
from .filecache import fsync_dir
from .recovery import RecoveryReport, control_type_at
from .segment import Segment


class AbortedIndex:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, F.TXNINDEX_NAME)
        self.missing = False
        try:
            with open(self.path, "rb") as f:
                self.entries = F.unpack_aborted(f.read())
        except FileNotFoundError:
            self.entries = []
            self.missing = True

    def recover(self, segments: Sequence[Segment], report: RecoveryReport) -> str | None:
        """Bring the index in line with the log as recovery left it (see the header);
        what was done, for the recovery report, or None when nothing was."""
        start, end = segments[0].base_offset, segments[-1].next_offset
        if self.missing and end == start:
            try:  # a new (or empty) partition: an empty index, not synced (lost: made again here)
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
                self.missing = False
            except OSError:  # not there: found missing at the next start, and rebuilt then
                pass
            return None
        bad = next((e for e in self.entries if not 0 <= e.first_offset <= e.last_offset
                    or e.producer_id < 0 or e.last_stable_offset < 0), None)
        why = "missing" if self.missing else f"damaged (entry {tuple(bad)})" if bad is not None else ""
        if not why and report.scanned_from is not None:
            indexed = {(e.producer_id, e.last_offset) for e in self.entries if report.scanned_from <= e.last_offset < end}
            markers = set(report.abort_markers)
            if indexed != markers:
                why = (f"{len(markers - indexed)} abort marker(s) with no entry, "
                       f"{len(indexed - markers)} entry(ies) with no marker")
        if why:
            entries = rebuild(segments)
            done = f"{why}; rebuilt from the log's markers ({len(entries)} aborted transactions)"
        else:
            entries = [e for e in self.entries if e.last_offset < end]
            if len(entries) == len(self.entries):
                return None
            done = f"{len(self.entries) - len(entries)} entry(ies) past the log's end ({end}) dropped"
        try:
            self._write(entries)
        except OSError as e:  # kept in memory; found again at the next start
            self.entries = entries
            done += f" (the file not written: {e})"
        return f"{self.path}: {done}"

    def add(self, entry: F.AbortedTxn) -> None:
        """Append ``entry`` and sync it (one for the same transaction already there: not
        added again)."""
        if any(e[:3] == entry[:3] for e in self.entries):
            return
        created = not os.path.exists(self.path)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            torn = size % F.ABORTED_ENTRY.size
            if torn:  # a torn entry from a crash: cut it off first
                os.ftruncate(fd, size - torn)
            os.write(fd, F.pack_aborted(entry))
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(os.path.dirname(self.path))
        self.entries.append(entry)

    def between(self, start: int, end: int) -> list[F.AbortedTxn]:
        """The entries whose range meets [start, end): an aborted transaction with
        records there (its marker at or after ``start``, its first record before ``end``)."""
        return [e for e in self.entries if e.last_offset >= start and e.first_offset < end]

    def trim(self, log_start: int) -> None:
        """Forget the entries wholly below ``log_start`` (retention deleted their records)."""
        keep = [e for e in self.entries if e.last_offset >= log_start]
        if len(keep) != len(self.entries):
            self._write(keep)

    def _write(self, entries: list[F.AbortedTxn]) -> None:
        """Replace the file with ``entries`` (written aside, synced and renamed)."""
        tmp = self.path + F.TMP_SUFFIX
        with open(tmp, "wb") as f:
            f.write(b"".join(F.pack_aborted(e) for e in entries))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(os.path.dirname(self.path))
        self.entries = entries
        self.missing = False


def rebuild(segments: Sequence[Segment]) -> list[F.AbortedTxn]:
    """The aborted transactions the markers in ``segments`` show (every batch header
    walked, oldest first; a control batch's record read too). A transaction whose first
    records retention deleted starts at the first of them left."""
    open_txns: dict[int, int] = {}
    found = []
    for seg in segments:
        for position, info in seg.walk(0):
            kind = None
            if info.attributes & F.ATTR_CONTROL:
                kind = control_type_at(seg, position, info)
            aborted = F.follow_transactions(open_txns, info, kind)
            if aborted is not None:
                pid, first = aborted
                lso = min(open_txns.values(), default=info.base_offset + 1)
                found.append(F.AbortedTxn(pid, first, info.base_offset, lso))
    return found

