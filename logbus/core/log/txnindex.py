"""A partition's aborted-transaction index: ``<partition>/aborted.txnindex``.

Each aborted transaction that wrote to the partition is one entry (``format.AbortedTxn``,
32 bytes: producer id, first offset, the abort marker's offset, the last stable offset
then), appended and synced before the abort is complete (the transaction coordinator,
core/streams/transactions.py, finishes an abort caught by a crash at the next start, so
an entry lost with the page cache is written again). A read_committed Kafka fetch lists
the entries its range overlaps, and a reader of the files (``logbus.spark``) skips the
records they cover. Entries wholly below the log start go when retention deletes
segments (the file is rewritten aside and renamed). A torn last entry is ignored.

    idx = AbortedIndex(partition_dir)
    idx.add(AbortedTxn(producer_id, first, marker_offset, lso))   # OSError: not added
    idx.between(fetch_offset, end)                               # [AbortedTxn]
"""

from __future__ import annotations

import os

from . import format as F


class AbortedIndex:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, F.TXNINDEX_NAME)
        try:
            with open(self.path, "rb") as f:
                self.entries = F.unpack_aborted(f.read())
        except FileNotFoundError:
            self.entries = []

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
            _fsync_dir(os.path.dirname(self.path))
        self.entries.append(entry)

    def between(self, start: int, end: int) -> list[F.AbortedTxn]:
        """The entries whose range meets [start, end): an aborted transaction with
        records there (its marker at or after ``start``, its first record before ``end``)."""
        return [e for e in self.entries if e.last_offset >= start and e.first_offset < end]

    def trim(self, log_start: int) -> None:
        """Forget the entries wholly below ``log_start`` (retention deleted their records)."""
        keep = [e for e in self.entries if e.last_offset >= log_start]
        if len(keep) == len(self.entries):
            return
        tmp = self.path + F.TMP_SUFFIX
        with open(tmp, "wb") as f:
            f.write(b"".join(F.pack_aborted(e) for e in keep))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(os.path.dirname(self.path))
        self.entries = keep


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
