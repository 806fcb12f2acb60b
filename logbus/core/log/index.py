"""Sparse indexes kept beside each segment, in memory and as ``.index``/``.timeindex``
bytes (entry layout: ``format.OFFSET_ENTRY`` and ``format.TIME_ENTRY``).

``.index``: the batch whose base offset is ``base + relative_offset`` starts at byte
``position`` of the ``.log`` file. One entry per ~``index.interval.bytes`` of log (the
first batch of a segment is always indexed). Offsets and positions strictly increase.

``.timeindex``: ``timestamp`` is the largest record timestamp in the segment up to and
including the batch at ``base + relative_offset``. Added with offset entries when the
largest timestamp grew, and once more when the segment is sealed, so the last entry of
a sealed segment holds its largest timestamp. Timestamps never decrease.

Both are derived data: the active segment keeps its entries in memory and writes them
at seal and at clean shutdown; recovery rebuilds any index that is missing or damaged.
A reader must treat the index as a hint and walk batch headers from the floor entry.
"""

from __future__ import annotations

import os
from array import array
from bisect import bisect_left, bisect_right

from .format import OFFSET_ENTRY, TIME_ENTRY, TMP_SUFFIX


class IndexDamaged(Exception):
    pass


class OffsetIndex:
    __slots__ = ("rel_offsets", "positions")

    def __init__(self) -> None:
        self.rel_offsets = array("q")
        self.positions = array("q")

    def __len__(self) -> int:
        return len(self.rel_offsets)

    def append(self, rel_offset: int, position: int) -> None:
        self.rel_offsets.append(rel_offset)
        self.positions.append(position)

    def floor(self, rel_offset: int) -> tuple[int, int]:
        """(relative offset, position) of the last entry at or below ``rel_offset``;
        (0, 0) when there is none."""
        i = bisect_right(self.rel_offsets, rel_offset) - 1
        if i < 0:
            return 0, 0
        return self.rel_offsets[i], self.positions[i]

    def last(self) -> tuple[int, int]:
        if not self.rel_offsets:
            return 0, 0
        return self.rel_offsets[-1], self.positions[-1]

    def to_bytes(self) -> bytes:
        pack = OFFSET_ENTRY.pack
        return b"".join(pack(o, p) for o, p in zip(self.rel_offsets, self.positions))

    @classmethod
    def from_bytes(cls, data: bytes, log_size: int) -> "OffsetIndex":
        if len(data) % OFFSET_ENTRY.size:
            raise IndexDamaged(f"offset index size {len(data)} is not a multiple of {OFFSET_ENTRY.size}")
        idx = cls()
        prev_o = prev_p = -1
        for o, p in OFFSET_ENTRY.iter_unpack(data):
            if o <= prev_o or p <= prev_p or p >= log_size:
                raise IndexDamaged(f"offset index entry ({o}, {p}) out of order or past the log end")
            idx.rel_offsets.append(o)
            idx.positions.append(p)
            prev_o, prev_p = o, p
        return idx


class TimeIndex:
    __slots__ = ("timestamps", "rel_offsets")

    def __init__(self) -> None:
        self.timestamps = array("q")
        self.rel_offsets = array("q")

    def __len__(self) -> int:
        return len(self.timestamps)

    def append(self, timestamp: int, rel_offset: int) -> None:
        self.timestamps.append(timestamp)
        self.rel_offsets.append(rel_offset)

    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def start_for(self, timestamp: int) -> int:
        """A relative offset at or before the first record with a timestamp >= ``timestamp``:
        every record up to the last entry whose timestamp is below it is older."""
        i = bisect_left(self.timestamps, timestamp) - 1
        if i < 0:
            return 0
        return self.rel_offsets[i]

    def to_bytes(self) -> bytes:
        pack = TIME_ENTRY.pack
        return b"".join(pack(t, o) for t, o in zip(self.timestamps, self.rel_offsets))

    @classmethod
    def from_bytes(cls, data: bytes, max_rel_offset: int) -> "TimeIndex":
        if len(data) % TIME_ENTRY.size:
            raise IndexDamaged(f"time index size {len(data)} is not a multiple of {TIME_ENTRY.size}")
        idx = cls()
        prev_t = -(2**63)
        prev_o = -1
        for t, o in TIME_ENTRY.iter_unpack(data):
            if t < prev_t or o < prev_o or o > max_rel_offset:
                raise IndexDamaged(f"time index entry ({t}, {o}) out of order or past the log end")
            idx.timestamps.append(t)
            idx.rel_offsets.append(o)
            prev_t, prev_o = t, o
        return idx


def write_file(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` (write to a temp name, then rename)."""
    tmp = path + TMP_SUFFIX
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_file(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
