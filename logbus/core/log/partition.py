"""A partition: an ordered list of segments, the newest one active.

Appends run on the reactor thread: records are queued and given offsets, and once per
reactor tick the queue is encoded as one batch, written with one ``pwritev`` at the end
of the active segment and indexed; durability is then handed to the flusher according
to the topic's flush policy (docs/decisions/0001). Kafka producers' batches are checked
and written as sent. Reads find the segment by base offset, the batch by the sparse
index plus a header walk, and return whole batches below the high watermark as file
spans (for ``sendfile``) and, when asked, as bytes.
"""

from __future__ import annotations

import logging
import os
import time
from bisect import bisect_right
from typing import Any, Callable, Iterator, NamedTuple, Sequence

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from twisted.internet.defer import Deferred, fail

from ..errors import OffsetOutOfRange, RecordTooLarge, StorageError
from . import batch as B
from . import format as F
from .filecache import FileCache, Handle, fsync_dir
from .failures import Failures
from .flusher import Flusher, Ticket, Waiter, fire_waiters
from .manifest import Manifest
from .segment import Segment
from .txnindex import AbortedIndex
from .topic_config import TopicConfig

log = logging.getLogger(__name__)

WRITE_BUFFER_MAX = 256 * 1024  # write at once past this many buffered bytes
MAX_RELATIVE_OFFSET = 2**31 - 1  # offsets within a segment, as Kafka (int32 deltas)
MAX_TICK_BATCH = 256 * 1024  # records queued in a tick are encoded at once past this (not a size limit)
RECORD_OVERHEAD = 12  # per-record framing in the size estimate (varints, attributes)
INDEX_ON_CLOSE_MIN = 4 * 1024 * 1024  # active segments this large get index files at shutdown
_Builder = DefaultRecordBatchBuilder
_MAX_BATCH = 2**31 - 1
_pack_base = B.set_base_offset
_BASE = F.INT64  # a batch's base offset, its first 8 bytes
_max_ts = F.max_timestamp
_time = time.time
_tuple_new = tuple.__new__


def _refuse(error: Exception, callback: Callable[[AppendResult | Exception], object] | None) -> Deferred[AppendResult] | None:
    if callback is None:
        return fail(error)
    raise error


class AppendResult(NamedTuple):
    base_offset: int
    last_offset: int
    log_start_offset: int


class FileSpan(NamedTuple):
    path: str
    position: int
    size: int


class ReadResult(NamedTuple):
    first_offset: int  # base offset of the first batch returned (<= the offset asked for)
    next_offset: int  # offset after the last batch returned
    spans: list[FileSpan]
    data: bytes  # the spans' bytes, when read with data=True
    log_start_offset: int
    log_end_offset: int
    high_watermark: int  # readers see offsets below it (see Partition.high_watermark)

    @property
    def size(self) -> int:
        return sum(s.size for s in self.spans)


class Partition(Failures):
    def __init__(
        self,
        topic: str,
        index: int,
        directory: str,
        config: TopicConfig,
        segments: list[Segment],
        cache: FileCache,
        flusher: Flusher,
        schedule: Callable[["Partition"], None],
    ) -> None:
        self.topic = topic
        self.index = index
        self.directory = directory
        self.cache = cache
        self.flusher = flusher
        self.ticket: Ticket | None = None  # the flusher's open ticket for this partition
        self.segments = segments
        self._bases = [s.base_offset for s in segments]
        self.active = segments[-1]
        self.next_offset = self.active.next_offset
        self.durable_offset = self.next_offset  # what recovery found is on disk
        self._schedule = schedule  # asks for drain() at the end of this reactor tick
        self._pending: list[B.Record | tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]] = []
        self._pending_base = self.next_offset
        self._pending_bytes = 0
        self._pending_now = 0
        self._wbuf: list[bytes | bytearray | memoryview] = []  # placed batches, written with one pwritev
        self._wbytes = 0
        self._tick_bytes = 0  # written out since the last drain
        self._wseg = self.active
        self._wpos = 0
        self._touched: list[Handle] = []
        self._waiters: list[Waiter] = []
        self._failed: StorageError | None = None  # closed, or offline: refuses appends for good
        # a sync failed here (the flusher's ``sync_failed``): offline, never covered by
        # a later sync that succeeds; an operator restarts the broker (docs/operations.md)
        self.offline: StorageError | None = None
        # a write failed (a full disk): what it held is gone, and appends are refused
        # until a new segment can be started at the next offset (``_repair``)
        self._broken: StorageError | None = None
        self._retry_at = 0.0
        # where the last successful write ended: (segment, position, next offset)
        self._wend: tuple[Segment, int, int] = (self.active, self.active.size, self.next_offset)
        self._wnext = self.next_offset  # the offset after the last batch placed
        # the owner's hooks (the log manager's): ``before_write()`` runs before a tick's
        # appends are written and handed on (the queue journal commits: StorageError
        # refuses them); ``on_lost(partition, first, end, error)`` hears of appends
        # refused after their offsets were given (a failed write, state or sync)
        self.before_write: Callable[[], object] | None = None
        self.on_lost: Callable[[Partition, int, int, StorageError], object] | None = None
        # ``appended(partition, segment, position, size, base, records)``: a batch was
        # placed (records: those this partition encoded there; None for a Kafka append):
        # the key indexer's cue (keyindexer.py), once per batch, never per record
        self.appended: Callable[[Partition, Segment, int, int, int, list[Any] | None], object] | None = None
        self.records_appended = 0
        self.bytes_appended = 0
        self._watchers: list[Callable[[], object]] = []
        self._start = 0  # the log start DeleteRecords set (0: the first segment's base)
        self._mode = config.flush_mode
        self.aborted = AbortedIndex(directory)  # its aborted transactions (txnindex.py)
        # tiered storage (tiering.py): the manifest of its remote segments, when it has
        # any; reads below the first local segment go to ``read_remote(partition, offset,
        # max_bytes, data, stop)``
        self.remote: Manifest | None = None
        self.read_remote: Callable[[Partition, int, int, bool, int], ReadResult] | None = None
        self.remote_time: Callable[[Partition, int], tuple[int, int] | None] | None = None
        self.set_config(config)

    def set_config(self, config: TopicConfig) -> None:
        """Apply (new) settings to the live partition. A new flush policy applies to
        appends from now on: what is buffered is written under the old one first, and
        records already readable stay readable (a move to ``sync`` does not hide records
        written under ``none`` until they are synced)."""
        if config.flush_mode != self._mode:
            self.drain()
            self.durable_offset = max(self.durable_offset, self.high_watermark)
        self.config = config
        self._mode = config.flush_mode
        self._interval = config.flush_interval_ms / 1000.0
        self._segment_bytes = config.segment_bytes
        self._segment_ms = config.segment_ms
        self._max_message = config.max_message_bytes

    def __repr__(self) -> str:
        return f"<Partition {self.topic}/{self.index} [{self.log_start_offset}, {self.next_offset})>"

    @property
    def log_start_offset(self) -> int:
        """The first offset readers may read: the first segment's base (a remote one's,
        tiered), or where ``advance_start`` (DeleteRecords) moved it, inside or past it."""
        return max(self.first_offset, self._start)

    @property
    def first_offset(self) -> int:
        """The first offset still stored, locally or (tiered) remotely."""
        first = self.segments[0].base_offset
        r = self.remote
        if r is not None and r.segments and r.start_offset < first:
            return r.start_offset
        return first

    def advance_start(self, offset: int) -> int:
        """Move the log start offset forward to ``offset`` (never back, never past the
        log end); returns the new log start. The caller records it (the broker's state
        store); whole segments below it are deleted by ``apply_retention``."""
        self._start = max(self._start, min(offset, self.next_offset))
        return self.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.next_offset

    @property
    def high_watermark(self) -> int:
        """The offset readers may read up to (exclusive), as Kafka's high watermark: for
        a ``sync`` topic the end of what is durable, so no reader ever sees a record a
        crash could take back; otherwise the end of what is written (reads drain)."""
        return self.durable_offset if self._mode == "sync" else self.next_offset

    def _mark_durable(self, end: object) -> None:
        """First waiter of every sync hand-off: advance the durable end (an error leaves
        it where it is)."""
        if type(end) is int and end > self.durable_offset:
            self.durable_offset = end
            self._notify()

    def watch(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` each time the high watermark moves (new records become
        readable) until unwatch(); long-polling readers (Kafka Fetch) use it."""
        self._watchers.append(callback)

    def unwatch(self, callback: Callable[[], object]) -> None:
        try:
            self._watchers.remove(callback)
        except ValueError:
            pass

    def notify_readers(self) -> None:
        """Wake the watchers: what they may read changed (a last stable offset moved)."""
        self._notify()

    def _notify(self) -> None:
        if self._watchers:
            for cb in list(self._watchers):
                cb()

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- appending ---------------------------------------------------------------
    #
    # Theory of operation. ``append`` only queues records (``_pending``) and assigns
    # their offsets. Once per reactor tick ``drain`` encodes everything queued as ONE
    # record batch (``_encode_pending``), places it in the active segment (``_place``:
    # rolling first when it does not fit), writes the tick's bytes with one ``pwrite``
    # (``_write_out``) and hands the tick's waiters on. A raw batch from a Kafka producer
    # first encodes what is queued, so offsets stay in call order. Reads drain first.

    def append(
        self,
        records: Sequence[B.Record],
        now_ms: int | None = None,
        *,
        callback: Callable[[AppendResult | Exception], object] | None = None,
    ) -> Deferred[AppendResult] | None:
        """Append ``records``. Without ``callback``: returns a Deferred that fires when
        they are durable under the topic's flush policy (``none``: once in the page
        cache). With ``callback``: returns None and calls it then with the AppendResult,
        or with the exception if the write fails (cheaper: no Deferred); records refused
        at once (over max.message.bytes, none, a failed or closed partition) raise the
        error instead, and nothing of them is kept. Records appended to a partition in
        one reactor tick are stored as one record batch, up to MAX_TICK_BATCH bytes; an
        append larger than that gets a batch of its own.
        The hot path: kept flat on purpose (measured by bench/log_append.py)."""
        if self._failed is not None or self._broken is not None:
            error = self.unavailable()
            if error is not None:
                return _refuse(error, callback)
        now = int(_time() * 1000) if now_ms is None else now_ms
        pend = self._pending
        start = len(pend)
        est = 0
        for r in records:
            key, value, ts, headers = r
            est += (len(value) if value else 0) + (len(key) if key else 0) + RECORD_OVERHEAD
            if headers:
                for k, v in headers:
                    est += len(k) + (len(v) if v else 0) + 2
            pend.append(r if ts is not None else (key, value, now, headers))
        n = len(pend) - start
        if not n or est > self._max_message:
            del pend[start:]
            if not n:
                return _refuse(ValueError("an append needs at least one record"), callback)
            return _refuse(RecordTooLarge(f"{est} bytes of records exceed max.message.bytes "
                                          f"({self._max_message}) of topic '{self.topic}'"), callback)
        if est > MAX_TICK_BATCH and start:  # a batch of its own, after what was queued
            mine = pend[start:]
            del pend[start:]
            self._encode_pending()
            self._pending = pend = mine
            start = 0
        base = self.next_offset
        first = not start and not self._wbuf
        if not start:
            self._pending_base = base
        nxt = base + n
        self.next_offset = nxt
        self._pending_now = now
        self._pending_bytes += est
        result = _tuple_new(AppendResult, (base, nxt - 1, self._bases[0]))
        if callback is None:
            d: Deferred[AppendResult] = Deferred()
            self._waiters.append((d, result))
        else:
            self._waiters.append((callback, result))
        if self._pending_bytes >= MAX_TICK_BATCH or self._wbytes >= WRITE_BUFFER_MAX:
            self._write_early()
        elif first:
            self._schedule(self)  # after queueing: the scheduler may drain at once
        return d if callback is None else None

    def append_raw(self, data: bytes | bytearray) -> Deferred[AppendResult]:
        """Append record batches as a Kafka producer sends them: each is CRC-checked,
        given the next base offset, and stored as sent (compression included)."""
        try:
            infos = B.split_validate(data, self.config.max_message_bytes)
        except Exception as e:
            return fail(e)
        return self.append_batches(data, infos)

    def append_batches(self, buf: bytes | bytearray | memoryview, infos: list[B.BatchInfo]) -> Deferred[AppendResult]:
        """Append already validated batches ``infos`` laid out back to back in ``buf``.
        ``buf`` is not copied or changed: each batch is written as its new base offset
        (8 bytes, outside the CRC) followed by a view of the rest of it."""
        if self._failed is not None or self._broken is not None:
            error = self.unavailable()
            if error is not None:
                return fail(error)
        first = not self._pending and not self._wbuf
        now = B.now_ms()
        base = offset = self.next_offset
        view = memoryview(buf)
        try:
            self._encode_pending()
            pos = 0
            for info in infos:
                nxt = offset + info.last_offset_delta + 1
                self._place(_BASE.pack(offset), offset, nxt, info.max_timestamp, now,
                            view[pos + 8 : pos + info.size])
                offset = nxt
                pos += info.size
        except OSError as e:  # these offsets were not given; the tick's drain refuses the rest
            error = self._write_failed(e)
            self._schedule(self)
            return fail(error)
        self.next_offset = offset
        self.records_appended += offset - base
        self.bytes_appended += len(buf)
        if self.appended is not None:
            self.appended(self, self.active, -1, 0, base, None)
        d: Deferred[AppendResult] = Deferred()
        self._waiters.append((d, _tuple_new(AppendResult, (base, offset - 1, self._bases[0]))))
        if self._wbytes >= WRITE_BUFFER_MAX:
            self._write_early()
        elif first:
            self._schedule(self)
        return d

    def append_control(self, data: bytes) -> Deferred[AppendResult]:
        """Append a control batch the broker made (a transaction marker,
        ``format.control_batch``), which ``append_raw`` refuses from a client."""
        try:
            info = F.validate(data, 0, len(data))
        except F.InvalidBatch as e:
            return fail(e)
        return self.append_batches(data, [info])

    def _write_early(self) -> None:
        """Past the buffer bounds in the middle of a tick: encode and write what is
        queued, but leave the waiters to the tick's drain, which commits the state
        first (``before_write``). A failed write is refused there too."""
        try:
            self._encode_pending()
            self._write_out()
        except OSError as e:
            self._write_failed(e)
        self._schedule(self)

    def _encode_pending(self) -> None:
        """Encode the queued records as one batch and place it."""
        pend = self._pending
        if not pend:
            return
        self._pending = []
        self._pending_bytes = 0
        base = self._pending_base
        builder = _Builder(2, 0, 0, -1, -1, -1, _MAX_BATCH)
        i = 0
        for key, value, ts, headers in pend:
            builder.append(i, ts, key, value, headers)
            i += 1
        buf = builder.build()
        _pack_base(buf, 0, base)
        self.records_appended += i
        self.bytes_appended += len(buf)
        self._place(buf, base, base + i, _max_ts(buf), self._pending_now)
        if self.appended is not None:
            seg = self.active
            self.appended(self, seg, seg.size - len(buf), len(buf), base, pend)

    def _place(self, buf: bytes | bytearray, base: int, nxt: int, max_ts: int, now: int,
               tail: memoryview | None = None) -> None:
        """Put one batch (``buf``, followed by ``tail`` when given) at the end of the
        active segment (rolling first when it is full, old, or its relative offsets
        would overflow) and index it."""
        seg = self.active
        pos = seg.size
        size = len(buf) if tail is None else len(buf) + len(tail)
        if pos and (
            pos + size > self._segment_bytes
            or now - (seg.created_ms or now) >= self._segment_ms
            or nxt - seg.base_offset > MAX_RELATIVE_OFFSET
        ):
            self._write_out()
            seg = self._new_segment(base)
            pos = 0
        wb = self._wbuf
        if not wb:
            self._wseg = seg
            self._wpos = pos
        seg.on_append(pos, base, nxt, max_ts, size, now)
        self._wnext = nxt
        wb.append(buf)
        if tail is not None:
            wb.append(tail)
        self._wbytes += size

    def _write_out(self) -> None:
        """Write the placed batches with one pwritev; remember the file for the flusher."""
        bufs = self._wbuf
        if not bufs:
            return
        self._wbuf = []
        self._tick_bytes += self._wbytes
        self._wbytes = 0
        handle = self._wseg.write_at(bufs, self._wpos, self._mode == "sync")
        self._wend = (self._wseg, self._wseg.size, self._wnext)
        if handle not in self._touched:
            self._touched.append(handle)

    def drain(self, handoff: list[tuple[Partition, list[Handle], list[Waiter] | None, float]] | None = None) -> int:
        """Encode and write this tick's appends and hand their waiters on: to the
        flusher (sync; through ``handoff`` when the caller batches many partitions),
        or fired now (interval, none). Returns the bytes written since the last drain."""
        waiters = self._waiters
        if not waiters and not self._pending and not self._wbuf:
            return 0
        self._waiters = []
        if self._broken is not None and waiters:  # a write failed earlier in this tick
            self._lose(waiters, self._broken)
            return 0
        refused: StorageError | None = None
        if waiters and self.before_write is not None:
            try:
                self.before_write()
            except StorageError as e:
                refused = e
        try:
            self._encode_pending()
            self._write_out()
        except OSError as err:  # not ``e``: mypyc types a name by its first except clause
            self._lose(waiters, self._write_failed(err))
            return 0
        if refused is not None:  # written, but what they changed in the state store is not
            self._lose(waiters, refused)
            return 0
        written, self._tick_bytes = self._tick_bytes, 0
        handles = self._touched
        self._touched = []
        mode = self._mode
        if mode == "none" or not handles:
            fire_waiters(waiters)
            if mode != "sync":
                self._notify()
            return written
        if mode == "sync":
            waiters = [(self._mark_durable, self.next_offset), *waiters]
        item = (self, handles, waiters if mode == "sync" else None, self._interval)
        if handoff is None:
            self.flusher.submit([item], written)
        else:
            handoff.append(item)
        if mode == "interval":
            fire_waiters(waiters)
            self._notify()
        return written

    def roll(self) -> Segment:
        """Seal the active segment and start a new one at the next offset."""
        self.drain()
        return self._new_segment(self.next_offset)

    def _new_segment(self, base: int) -> Segment:
        old = self.active
        old.seal()
        new = Segment(self.directory, base, self.cache, self.config.index_interval_bytes)
        self.cache.get(new.log_path, writable=True)  # create the file
        if self._mode != "none":
            fsync_dir(self.directory)
        self.segments.append(new)
        self._bases.append(new.base_offset)
        self.active = new
        log.debug("rolled %s/%d at offset %d", self.topic, self.index, new.base_offset)
        return new

    # -- reading -----------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, data: bool = True, *, deleted: bool = False,
             written: bool = False, upto: int = -1) -> ReadResult:
        """Whole batches from the one holding ``offset`` on, below the high watermark and
        up to ``max_bytes`` (the first batch is returned even if larger, so a reader
        always makes progress). Offsets from the high watermark to the log end read as
        empty; beyond the log end (or before its start) they are out of range.
        ``deleted``: records below the log start that are still on disk may be read (a
        queue's pointers: retention keeps their segments). ``written``: up to the log end,
        durable or not (the broker's own queues, whose entries exist from the append on,
        while a sync may still be in flight). ``upto`` (>= 0): no batch at or past it (a
        read_committed reader's last stable offset)."""
        start, end = self.first_offset if deleted else self.log_start_offset, self.next_offset
        if offset < start or offset > end:
            raise OffsetOutOfRange(
                f"offset {offset} is outside [{start}, {end}] of {self.topic}/{self.index}"
            )
        self.drain()
        hw = self.next_offset if written else self.high_watermark
        stop = upto if 0 <= upto < hw else hw
        if offset < self.segments[0].base_offset:  # in a remote segment (tiered)
            if self.read_remote is None:
                raise OffsetOutOfRange(f"offset {offset} of {self.topic}/{self.index} is in remote storage, "
                                       f"which this broker does not reach")
            return self.read_remote(self, offset, max_bytes, data, stop)
        spans: list[FileSpan] = []
        first_offset = next_offset = offset
        remaining = max_bytes
        i = bisect_right(self._bases, offset) - 1
        while i < len(self.segments) and next_offset < stop:
            seg = self.segments[i]
            found = seg.position_of(next_offset)
            i += 1
            if found is None:
                continue
            pos, info = found
            if not spans:
                first_offset = info.base_offset
            span_start = pos
            span_end = pos
            for p, info in seg.walk(pos):
                if info.base_offset >= stop:
                    remaining = 0
                    break
                if info.size > remaining and (spans or span_end > span_start):
                    remaining = 0
                    break
                span_end = p + info.size
                remaining -= info.size
                next_offset = info.next_offset
                if remaining <= 0:
                    break
            if span_end > span_start:
                spans.append(FileSpan(seg.log_path, span_start, span_end - span_start))
            if remaining <= 0:
                break
        payload = b"".join(self._pread(s) for s in spans) if data else b""
        return ReadResult(first_offset, next_offset, spans, payload, self.log_start_offset, end, hw)

    def _pread(self, span: FileSpan) -> bytes:
        fd = self.cache.get(span.path).fd
        return os.pread(fd, span.size, span.position)

    def read_records(self, offset: int, max_bytes: int = 1 << 20) -> list[B.StoredRecord]:
        """Decoded records from ``offset`` on (convenience for tests, tools, pull APIs)."""
        res = self.read(offset, max_bytes)
        return [r for r in B.decode(res.data) if r.offset >= offset]

    def batch_headers(self, from_offset: int = 0) -> Iterator[B.BatchInfo]:
        """Headers of the batches from the one holding ``from_offset`` on (default: the
        whole log), oldest first; for replaying state kept beside the log."""
        self.drain()
        i = max(bisect_right(self._bases, from_offset) - 1, 0)
        for seg in list(self.segments[i:]):
            position = 0
            if seg.base_offset < from_offset:
                found = seg.position_of(from_offset)
                if found is None:
                    continue
                position = found[0]
            for _, info in seg.walk(position):
                yield info

    def offset_for_time(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first readable record (below the high watermark)
        whose timestamp is >= ``timestamp``, or None when there is none."""
        self.drain()
        hw = self.high_watermark
        if self.remote is not None and self.remote_time is not None:
            found = self.remote_time(self, timestamp)
            if found is not None:
                return found
        for seg in self.segments:
            if seg.max_timestamp < timestamp:
                continue
            for pos, info in seg.walk(seg.start_for_time(timestamp)):
                if info.max_timestamp < timestamp:
                    continue
                if info.base_offset >= hw:
                    return None
                for r in B.decode(seg.pread(pos, info.size)):
                    if r.timestamp >= timestamp:
                        return r.offset, r.timestamp
        return None

    # -- housekeeping --------------------------------------------------------------

    def maybe_roll(self, now_ms: int) -> bool:
        seg = self.active
        if seg.size and seg.created_ms is not None and now_ms - seg.created_ms >= self.config.segment_ms:
            self.roll()
            return True
        return False

    def apply_retention(self, now_ms: int, keep_from: int | Callable[[], int | None] | None = None) -> int:
        """Delete whole segments past retention.ms / retention.bytes or wholly below the
        log start offset; never one holding an offset >= ``keep_from`` (a queue's
        unacknowledged pointer), which may be a function, asked only once a segment is
        due. A tiered partition's local copies of uploaded segments go by
        local.retention.ms / local.retention.bytes instead, whatever points into them
        (they are read from remote storage then); the remote ones by ``tiering.py``.
        Returns how many."""
        cfg = self.config
        deleted = 0
        total = self.size_bytes
        r = self.remote
        uploaded = -1  # the end of what remote storage holds
        local_ms, local_bytes = -1, -1
        if r is not None:
            uploaded = r.end_offset
            local_ms = cfg.retention_ms if cfg.local_retention_ms == -2 else cfg.local_retention_ms
            local_bytes = cfg.retention_bytes if cfg.local_retention_bytes == -2 else cfg.local_retention_bytes
        local_total = total
        if r is not None:  # the whole log's size: the remote segments before the local ones too
            first = self.segments[0].base_offset
            total += sum(s.size for s in r.segments if s.next_offset <= first)
        while len(self.segments) > 1:
            seg = self.segments[0]
            nxt = self.segments[1]
            expired = cfg.retention_ms > 0 and seg.max_timestamp >= 0 and now_ms - seg.max_timestamp > cfg.retention_ms
            too_big = cfg.retention_bytes > 0 and total - seg.size >= cfg.retention_bytes
            below_start = nxt.base_offset <= self._start
            if seg.next_offset <= uploaded:  # a local copy: kept by local retention only
                if not (expired or too_big or below_start
                        or (local_ms >= 0 and seg.max_timestamp >= 0 and now_ms - seg.max_timestamp > local_ms)
                        or (local_bytes >= 0 and local_total - seg.size >= local_bytes)):
                    break
            else:
                if not (expired or too_big or below_start):
                    break
                if callable(keep_from):
                    keep_from = keep_from()
                if keep_from is not None and nxt.base_offset > keep_from:
                    break
            if not self._delete_segment(seg):
                break
            total -= seg.size
            local_total -= seg.size
            deleted += 1
        if deleted and self.aborted.entries:
            try:
                self.aborted.trim(self.log_start_offset if r is not None else self.segments[0].base_offset)
            except OSError as e:  # kept whole: trimmed at the next deletion
                log.warning("trimming the aborted-transaction index of %s/%d failed: %s", self.topic, self.index, e)
        return deleted

    def _delete_segment(self, seg: Segment) -> bool:
        if self.cache.pinned(seg.log_path):
            return False  # a flush still needs it; try next time
        self.cache.discard(seg.log_path)
        self.cache.discard(seg.key_path)
        for path in (seg.log_path, seg.index_path, seg.time_path, seg.key_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.segments.pop(0)
        self._bases.pop(0)
        log.info("retention deleted %s", seg.log_path)
        return True

    def write_indexes(self) -> None:
        """At clean shutdown (the caller syncs): cut the zeroed space off the active
        segment and write its indexes when it is large enough that scanning it at the
        next start would cost; a smaller one keeps no index files (a clean start scans
        it, which is cheaper than creating two files per partition at every shutdown)."""
        self.drain()
        seg = self.active
        seg.trim()  # the zeroed space ahead (a clean log ends at its last batch)
        if seg.size >= INDEX_ON_CLOSE_MIN:
            seg.write_indexes()
        else:
            seg.remove_index_files()

    def close(self) -> None:
        self.drain()
        if self._failed is None:
            self._failed = StorageError(f"partition {self.topic}/{self.index} is closed")
        for seg in self.segments:
            self.cache.discard(seg.log_path)


