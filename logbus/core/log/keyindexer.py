"""Keeps every partition's key index (keyindex.py) up to date, off the append path.

Theory of operation. Appends never touch the key index. A background pass on the
reactor, at most SLICE_SECONDS per call, walks each partition's segments:

- a sealed segment with a ``.keyindex`` is checked once (``Checker``, a chunk per
  step); a missing or damaged file is rebuilt: the segment's records are indexed into
  ``Runs`` in memory, which ``Writer`` then writes as the file, a hash range per step;
- the active segment's records are indexed into ``Runs`` as they are written (its
  batches are read back from the page cache and decoded: record keys, and the message id
  of the envelope header, an envelope parsed once per distinct envelope bytes while
  ENVELOPE_CACHE_MAX lasts); when it is sealed, its runs become its file.

A slice ends after the batch that crosses its budget (a batch is at most
max.message.bytes). The pass runs again after BUSY_DELAY while any partition has work,
else after IDLE_DELAY. A lookup (``candidates``) first brings the segments it reads up
to date itself, synchronously: the backlog the pass had not reached yet (normally what
was appended in the last IDLE_DELAY; after a start, the active segments, and the sealed
ones whose file was missing or damaged).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from itertools import islice
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from aiokafka.record.default_records import DefaultRecordBatch
from google.protobuf.message import DecodeError

from ..envelope_pb2 import Envelope
from .filecache import FileCache
from .format import ATTR_CONTROL, HEADER_SIZE, InvalidBatch, key_hash, message_id_hash, parse_header
from .keyindex import Checker, KeyIndexDamaged, Runs, SealedKeys, Writer
from .segment import Segment

if TYPE_CHECKING:
    from .manager import Topic
    from .partition import Partition

log = logging.getLogger(__name__)

SLICE_SECONDS = 0.0015  # reactor time per pass
BUSY_DELAY = 0.005  # seconds to the next pass while there is work
IDLE_DELAY = 0.1  # seconds to the next pass when no partition announced work
SWEEP_SECONDS = 10.0  # every partition is looked at this often (rolls by segment.ms, a start)
WRITE_RETRY_SECONDS = 60.0  # after a failed write of a .keyindex (a full disk)
READ_CHUNK = 64 * 1024  # bytes read back at once
CHUNK_RECORDS = 256  # records indexed between two looks at the clock
HINT_MAX_RECORDS = 65_536  # records of encoded batches held for the pass, at most
ENVELOPE_CACHE_MAX = 4096  # distinct envelope bytes remembered with their message-id hash
ENVELOPE_HEADER = "logbus.envelope"  # docs/format.md section 9 (core/message.py's name)

_clock = time.perf_counter
_cpu = time.thread_time
_parse_envelope = Envelope.FromString


class SegmentKeys:
    """One segment's key index as it stands: its checked file, or the runs being built
    (``indexed_to``: the bytes of the ``.log`` they cover), and the step under way."""

    __slots__ = ("seg", "file", "runs", "indexed_to", "partial", "job", "retry_at")

    def __init__(self, seg: Segment) -> None:
        self.seg = seg
        self.file: SealedKeys | None = None
        self.runs: Runs | None = None
        self.indexed_to = 0
        self.partial: _Batch | None = None  # the batch at indexed_to, when a slice ended inside it
        self.job: Checker | Writer | None = None
        self.retry_at = 0.0

    def up_to_date(self) -> bool:
        if self.file is not None:
            return True
        # a sealed segment's runs are up to date once written, or while a failed write waits
        return self.runs is not None and self.job is None and self.indexed_to >= self.seg.size and (
            not self.seg.sealed or _clock() < self.retry_at)


class _Batch:
    """A batch being indexed: its records (``hinted``: the tuples the partition encoded,
    offsets from ``rel``; else aiokafka's decoded records, offsets less ``rel``) and
    how far."""

    __slots__ = ("position", "size", "rel", "records", "hinted")

    def __init__(self, position: int, size: int, rel: int, records: Iterator[Any], hinted: bool) -> None:
        self.position = position
        self.size = size
        self.rel = rel
        self.records = records
        self.hinted = hinted

    def run(self, entries: list[int], ix: KeyIndexer, deadline: float) -> bool:
        """Add the entries of the next records to ``entries``, CHUNK_RECORDS at a time,
        until the batch ends (True) or the deadline passes (False)."""
        add = entries.append
        records = self.records
        while True:
            n = 0
            try:
                if self.hinted:
                    rel = _from_records(islice(records, CHUNK_RECORDS), self.rel, add, ix)
                    n = rel - self.rel
                    self.rel = rel
                    ix.records_from_hints += n
                else:
                    n = _from_decoded(islice(records, CHUNK_RECORDS), self.rel, add, ix)
            except Exception as e:  # a record that does not decode is never found either
                log.debug("key index: a batch at %d not decoded: %s", self.position, e)
                n = 0
            ix.records_indexed += n
            if n < CHUNK_RECORDS:
                return True
            if _clock() >= deadline:
                return False


def _from_records(records: Iterable[Any], rel: int, add: Callable[[int], None], ix: KeyIndexer) -> int:
    """Entries of ``batch.Record`` tuples at consecutive relative offsets from ``rel``;
    returns the relative offset after them."""
    envelopes = ix._envelopes
    crc = key_hash
    for k, _, _, hs in records:
        if k is not None:
            add(crc(k) << 32 | rel)
        if hs:
            name, v = hs[-1]
            if name == ENVELOPE_HEADER and v is not None:
                h = envelopes.get(v)
                if h is None:
                    h = ix._message_id_hash(v)
                if h >= 0:
                    add(h << 32 | rel)
        rel += 1
    return rel


def _from_decoded(records: Iterable[Any], sbase: int, add: Callable[[int], None], ix: KeyIndexer) -> int:
    """Entries of aiokafka's decoded records of a segment based at ``sbase``; returns
    how many records."""
    envelopes = ix._envelopes
    crc = key_hash
    n = 0
    for r in records:
        n += 1
        rel = r.offset - sbase
        k = r.key
        if k is not None:
            add(crc(k) << 32 | rel)
        hs = r.headers
        if hs:
            name, v = hs[-1]
            if name == ENVELOPE_HEADER and v is not None:
                h = envelopes.get(v)
                if h is None:
                    h = ix._message_id_hash(v)
                if h >= 0:
                    add(h << 32 | rel)
    return n


class _Reader:
    """Batches of a segment read back for indexing: one ``pread`` of up to READ_CHUNK
    bytes serves the batches that lie in it."""

    __slots__ = ("seg", "buf", "start")

    def __init__(self, seg: Segment) -> None:
        self.seg = seg
        self.buf = b""
        self.start = 0

    def batch(self, pos: int) -> _Batch | None:
        """The batch at ``pos``; None when there is no whole batch there (yet)."""
        seg = self.seg
        rel = pos - self.start
        if not 0 <= rel <= len(self.buf) - HEADER_SIZE:
            self.buf = seg.pread(pos, min(READ_CHUNK, seg.size - pos))
            self.start, rel = pos, 0
            if len(self.buf) < HEADER_SIZE:
                return None
        try:
            info = parse_header(self.buf, rel)
        except InvalidBatch:
            return None
        size = info.size
        if pos + size > seg.size:
            return None
        if rel + size <= len(self.buf):
            data = self.buf[rel : rel + size]
        else:
            data = seg.pread(pos, size)
            if len(data) < size:
                return None
        if info.attributes & ATTR_CONTROL:
            return _Batch(pos, size, 0, iter(()), False)
        # (a generator: iter() of aiokafka's batch starts its records again)
        return _Batch(pos, size, seg.base_offset, (r for r in DefaultRecordBatch(data)), False)


class KeyIndexer:
    """The key indexes of a log manager's partitions (``topics``: the manager's dict)."""

    def __init__(self, topics: dict[str, Topic], cache: FileCache,
                 call_later: Callable[..., Any] | None) -> None:
        self._topics = topics
        self._cache = cache
        self._call_later = call_later
        self._call: Any = None
        self._parts: dict[Partition, list[SegmentKeys]] = {}
        # partitions with work, oldest first (a dict as an ordered set), and when every
        # partition is looked at next
        self._dirty: dict[Partition, None] = {}
        self._sweep_at = 0.0
        self._envelopes: dict[bytes, int] = {}
        # records of batches just encoded, by segment: (position, size, base offset, records)
        self._hints: dict[Segment, deque[tuple[int, int, int, list[Any]]]] = {}
        self._hinted = 0
        self.records_indexed = 0
        self.records_from_hints = 0  # of which indexed from the records appended, not read back
        self.files_written = 0
        self.files_rebuilt = 0
        self.busy_seconds = 0.0  # reactor time spent by the background pass
        self.cpu_seconds = 0.0  # and the CPU time of it

    # -- the background pass ----------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the background pass runs (then partitions give it hints)."""
        return self._call_later is not None

    def start(self) -> None:
        if self._call_later is not None and self._call is None:
            self._call = self._call_later(IDLE_DELAY, self._run)

    def stop(self) -> None:
        """No more passes; steps under way are abandoned (their temporary files removed)."""
        call, self._call, self._call_later = self._call, None, None
        if call is not None and call.active():
            call.cancel()
        for keys in self._parts.values():
            for sk in keys:
                self._abandon(sk)
        self._parts.clear()
        self._dirty.clear()
        self._hints.clear()
        self._hinted = 0

    def _run(self) -> None:
        self._call = None
        more = self.work(SLICE_SECONDS)
        if self._call_later is not None:
            self._call = self._call_later(BUSY_DELAY if more else IDLE_DELAY, self._run)

    def work(self, budget: float) -> bool:
        """One pass of at most about ``budget`` seconds over the partitions, starting where
        the last one stopped. True while work is left."""
        t0 = _clock()
        c0 = _cpu()
        deadline = t0 + budget
        dirty = self._dirty
        if t0 >= self._sweep_at:  # every partition, now and then: what no append announced
            self._sweep_at = t0 + SWEEP_SECONDS
            for t in list(self._topics.values()):
                dirty.update(dict.fromkeys(t.partitions))
        for p in list(dirty):
            del dirty[p]
            if self._advance(p, deadline):
                dirty[p] = None  # (to the end: the others' turn first)
            if _clock() >= deadline:
                break
        self.busy_seconds += _clock() - t0
        self.cpu_seconds += _cpu() - c0
        return bool(dirty)

    def settled(self) -> bool:
        """Whether every partition's key index is up to date (files written and checked,
        the active segments indexed to their end)."""
        for t in list(self._topics.values()):
            for p in t.partitions:
                if not all(sk.up_to_date() for sk in self._segments(p)):
                    return False
        return True

    def forget(self, partitions: Iterable[Partition]) -> None:
        """Drop what is kept of ``partitions`` (their topic is deleted)."""
        for p in partitions:
            self._dirty.pop(p, None)
            for sk in self._parts.pop(p, []):
                self._abandon(sk)

    def _advance(self, p: Partition, deadline: float) -> bool:
        """Step ``p``'s segments, oldest first; True while work is left."""
        more = False
        keys = self._segments(p)
        for i, sk in enumerate(keys):
            if not sk.up_to_date() and self._step(sk, deadline, write=True):
                more = True
            if _clock() >= deadline:
                return more or not all(k.up_to_date() for k in keys[i + 1 :])
        return more

    def _segments(self, p: Partition) -> list[SegmentKeys]:
        """``p``'s SegmentKeys, one per segment, in order: new segments added, those
        retention deleted dropped."""
        segs = p.segments
        keys = self._parts.get(p)
        if keys is not None and len(keys) == len(segs) and keys[0].seg is segs[0] and keys[-1].seg is segs[-1]:
            return keys
        old = {id(sk.seg): sk for sk in keys or ()}
        keys = [old.pop(id(s)) if id(s) in old else SegmentKeys(s) for s in segs]
        for sk in old.values():
            self._abandon(sk)
        self._parts[p] = keys
        return keys

    def _abandon(self, sk: SegmentKeys) -> None:
        self._drop_hints(sk.seg)
        job, sk.job = sk.job, None
        if isinstance(job, Writer):
            job.abort()
        elif isinstance(job, Checker):
            job.close()
        self._cache.discard(sk.seg.key_path)

    # -- steps ------------------------------------------------------------------------

    def _step(self, sk: SegmentKeys, deadline: float, write: bool) -> bool:
        """Advance ``sk`` until ``deadline``; ``write``: also write a sealed segment's file
        (a lookup needs only the runs). True when it made progress and has work left."""
        seg = sk.seg
        if sk.file is not None:
            return False
        if sk.runs is None and sk.job is None:
            if seg.sealed:
                try:
                    sk.job = Checker(seg.key_path, seg.size)
                except (KeyIndexDamaged, OSError) as e:
                    self._rebuild(sk, e)
            else:
                sk.runs = Runs()
        if isinstance(sk.job, Checker):
            while True:
                try:
                    found = sk.job.step()
                except (KeyIndexDamaged, OSError) as e:
                    sk.job = None
                    self._rebuild(sk, e)
                    break
                if found is not None:
                    sk.file, sk.job = found, None
                    return False
                if _clock() >= deadline:
                    return True
        runs = sk.runs
        if runs is None:
            return False
        if sk.job is None and sk.indexed_to < seg.size:
            self._index(sk, runs, deadline)
            if sk.indexed_to < seg.size:
                return True  # the deadline, or batches placed and written at the end of this turn
        if not (write and seg.sealed) or _clock() >= deadline:
            return write and seg.sealed and sk.retry_at == 0.0
        if sk.job is None:
            if sk.retry_at and _clock() < sk.retry_at:
                return False
            try:
                sk.job = Writer(seg.key_path, runs, seg.size)
            except OSError as e:
                return self._write_failed(sk, e)
        assert isinstance(sk.job, Writer)
        while True:
            try:
                written = sk.job.step()
            except OSError as e:
                sk.job = None
                return self._write_failed(sk, e)
            if written is not None:
                self._cache.discard(seg.key_path)
                sk.file, sk.runs, sk.job, sk.retry_at = written, None, None, 0.0
                self.files_written += 1
                return False
            if _clock() >= deadline:
                return True

    def _rebuild(self, sk: SegmentKeys, why: Exception) -> None:
        log.info("rebuilding key index %s (%s)", sk.seg.key_path, why)
        self.files_rebuilt += 1
        self._cache.discard(sk.seg.key_path)
        sk.file, sk.runs, sk.indexed_to, sk.partial = None, Runs(), 0, None

    def _write_failed(self, sk: SegmentKeys, e: OSError) -> bool:
        log.warning("key index %s not written (%s); its entries stay in memory, tried again in %.0f s",
                    sk.seg.key_path, e, WRITE_RETRY_SECONDS)
        sk.retry_at = _clock() + WRITE_RETRY_SECONDS
        return False

    def appended(self, p: Partition, seg: Segment, position: int, size: int, base: int,
                 records: list[Any] | None) -> None:
        """``p`` placed a batch of ``size`` bytes at ``position`` of ``seg`` (one call per
        batch it encoded, or per Kafka append): the pass visits ``p`` soon. ``records``:
        the ``batch.Record`` tuples it encoded there, which the pass indexes instead of
        reading the batch back (while fewer than HINT_MAX_RECORDS are held; the others
        are read back). A batch whose write then fails leaves entries for
        offsets no record will hold (never given again): lookups find nothing there."""
        self._dirty[p] = None
        if records is None or len(records) > HINT_MAX_RECORDS - self._hinted:
            return
        self._hinted += len(records)
        hints = self._hints.get(seg)
        if hints is None:
            self._hints[seg] = hints = deque()
        hints.append((position, size, base, records))

    def _drop_hints(self, seg: Segment) -> None:
        hints = self._hints.pop(seg, None)
        if hints:
            self._hinted -= sum(len(h[3]) for h in hints)

    def _index(self, sk: SegmentKeys, runs: Runs, deadline: float) -> None:
        """Index the records of ``sk``'s segment from ``indexed_to`` on, CHUNK_RECORDS at
        a time, until the deadline passes (inside a batch too: ``partial`` keeps where)
        or the written batches end."""
        seg = sk.seg
        entries: list[int] = []
        pos = sk.indexed_to
        hints = self._hints.get(seg)
        reader = _Reader(seg)
        try:
            while pos < seg.size:
                part = sk.partial
                if part is not None and part.position == pos:
                    sk.partial = None
                else:
                    part = None
                    while hints and hints[0][0] < pos:  # read back instead (a slice ended inside)
                        self._hinted -= len(hints.popleft()[3])
                    if hints and hints[0][0] == pos:
                        _, size, base, records = hints.popleft()
                        n = len(records)
                        self._hinted -= n
                        if pos + size > seg.size:  # its write failed: cut back
                            pass
                        elif n <= CHUNK_RECORDS:  # (most: at once)
                            _from_records(records, base - seg.base_offset, entries.append, self)
                            self.records_indexed += n
                            self.records_from_hints += n
                            pos += size
                            if _clock() >= deadline:
                                break
                            continue
                        else:
                            part = _Batch(pos, size, base - seg.base_offset, iter(records), True)
                    if part is None:
                        part = reader.batch(pos)
                        if part is None:
                            break  # placed, not written yet
                if not part.run(entries, self, deadline):
                    sk.partial = part
                    return
                pos = part.position + part.size
                if _clock() >= deadline:
                    break
        finally:
            runs.add(entries)
            sk.indexed_to = pos
        if seg.sealed and pos >= seg.size:
            self._drop_hints(seg)

    def _message_id_hash(self, envelope: bytes) -> int:
        """The message-id hash of envelope bytes, -1 when there is none; remembered."""
        try:
            mid = _parse_envelope(envelope).message_id
        except DecodeError:
            mid = ""
        h = message_id_hash(mid) if mid else -1
        if len(self._envelopes) >= ENVELOPE_CACHE_MAX:
            self._envelopes.clear()
        self._envelopes[envelope] = h
        return h

    # -- lookups ----------------------------------------------------------------------

    def candidates(self, p: Partition, h: int, since_ms: int | None = None) -> list[int]:
        """The offsets of ``p`` whose record may hold hash ``h``, ascending (checked by
        the caller against the records). Segments whose records are all older than
        ``since_ms`` are skipped. The segments' indexes are brought up to date first."""
        out: list[int] = []
        for sk in self._segments(p):
            seg = sk.seg
            if since_ms is not None and seg.sealed and 0 <= seg.max_timestamp < since_ms:
                continue
            base = seg.base_offset
            out += [base + r for r in self._lookup(sk, h)]
        return out

    def _lookup(self, sk: SegmentKeys, h: int) -> list[int]:
        self._step(sk, math.inf, write=False)
        if sk.file is not None:
            try:
                return sk.file.candidates(self._cache.get(sk.seg.key_path).fd, h)
            except (KeyIndexDamaged, OSError) as e:
                self._rebuild(sk, e)
                self._step(sk, math.inf, write=False)
        assert sk.runs is not None
        return sk.runs.candidates(h)

