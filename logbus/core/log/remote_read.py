"""Reads of remote segments (tiered storage), through a bounded local cache.

Theory of operation. A remote segment is cached as a sparse file of its full size under
``<data>/log/.remote-cache/`` (emptied at every start), filled a chunk (``CHUNK`` bytes)
at a time by ranged GETs on worker threads, which write the bytes into the file
themselves; the reactor only marks the chunks present. Reads hand out file spans over
present chunks only, so a Kafka Fetch is sent from the cache with sendfile like a local
one. Its offset index comes whole with the first read (a few KiB per MiB of log).

A read with ``data=False`` (a Kafka Fetch) never waits: when the chunk it starts in is
not there yet it returns no batches, asks for the chunks, and the partition's readers
are woken (``Partition.notify_readers``) when they arrive, so a waiting Fetch reads
again. A read with ``data=True`` (the broker's own readers: a queue's message, a replay)
fetches what is missing at once, on the calling thread (one ranged GET; counted in
``blocking_reads``). Every read asks, in the background, for ``READ_AHEAD`` chunks past
where it ended, so a reader going forward finds them cached.

The cache holds at most ``limit`` bytes of chunks: past it, the segments least recently
read (and not read for ``MIN_IDLE_S``, and with no fetch in flight) are dropped whole.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any

from ..errors import OffsetOutOfRange, RemoteUnavailable
from .format import HEADER_SIZE, BatchInfo, InvalidBatch, parse_header
from . import batch as B
from .index import IndexDamaged, OffsetIndex, TimeIndex
from .manifest import RemoteSegment, partition_prefix
from .objectstore import ObjectStore, StoreError
from .partition import FileSpan, Partition, ReadResult
from .tiering import Workers
from .format import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX

log = logging.getLogger(__name__)

CACHE_DIR = ".remote-cache"
CHUNK = 1 << 20
READ_AHEAD = 8  # chunks asked for past where a read ended
MIN_IDLE_S = 60.0
DEFAULT_LIMIT = 1 << 30
WORKERS = 2


def _holding(p: Partition, offset: int) -> int:
    """The index of the remote segment of ``p`` holding ``offset`` (-1: none)."""
    m = p.remote
    if m is None or not m.segments:
        return -1
    i = bisect_right(m.bases, offset) - 1
    return i if i >= 0 and offset < m.segments[i].next_offset else -1


def _once(p: Partition, callback: Callable[[], object]) -> None:
    """Call ``callback()`` the next time ``p``'s readers are woken."""
    def fire() -> None:
        p.unwatch(fire)
        callback()
    p.watch(fire)


class _Cached:
    """One remote segment's cache file (reactor-owned, but for the bytes the workers write)."""

    __slots__ = ("seg", "key", "path", "fd", "present", "fetching", "index", "used", "bytes", "index_fetching")

    def __init__(self, seg: RemoteSegment, key: str, path: str) -> None:
        self.seg = seg
        self.key = key  # the object name of its .log, under the prefix
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        os.ftruncate(self.fd, seg.size)
        n = (seg.size + CHUNK - 1) // CHUNK
        self.present = bytearray(n)
        self.fetching = bytearray(n)
        self.index: OffsetIndex | None = None
        self.index_fetching = False
        self.used = time.monotonic()
        self.bytes = 0  # present chunks' bytes

    def chunk_bytes(self, c: int) -> int:
        return min(CHUNK, self.seg.size - c * CHUNK)

    def covered(self, start: int, end: int) -> bool:
        """Whether bytes [start, end) are all present."""
        present = self.present
        for c in range(start // CHUNK, (end - 1) // CHUNK + 1):
            if not present[c]:
                return False
        return True

    def missing(self, first: int, count: int) -> tuple[int, int] | None:
        """The first run of chunks from ``first`` (at most ``count``) neither present nor
        being fetched, as (first, end), or None."""
        n = len(self.present)
        c = first
        stop = min(n, first + count)
        while c < stop and (self.present[c] or self.fetching[c]):
            c += 1
        if c >= stop:
            return None
        e = c
        while e < stop and not self.present[e] and not self.fetching[e]:
            e += 1
        return c, e

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class RemoteReads:
    def __init__(self, log_root: str, store: ObjectStore, call_from_thread: Callable[..., Any], *,
                 limit: int = DEFAULT_LIMIT, workers: int = WORKERS,
                 call_later: Callable[..., Any] | None = None) -> None:
        self.root = os.path.join(log_root, CACHE_DIR)
        shutil.rmtree(self.root, ignore_errors=True)
        os.makedirs(self.root, exist_ok=True)
        self.store = store
        self.limit = limit
        self._workers = Workers(call_from_thread, workers, "logbus-remote-read")
        self._cached: OrderedDict[tuple[str, int, int, str], _Cached] = OrderedDict()
        self.cached_bytes = 0
        self.fetched_bytes = 0
        self.hits = 0
        self.misses = 0
        self.blocking_reads = 0
        self.in_flight = 0  # fetches running on the workers
        self._failing: str | None = None
        # after a failed fetch nothing is asked of the store until then (monotonic), and
        # readers that wait are woken then: a stopped store is neither hammered nor waited
        # for on the reactor
        self._retry_at = 0.0
        self._backoff = 0.0
        self._call_later = call_later

    # -- reading -------------------------------------------------------------------------

    def read(self, p: Partition, offset: int, max_bytes: int, data: bool, stop: int) -> ReadResult:
        """``Partition.read`` below the first local segment (see the module's header)."""
        i = _holding(p, offset)
        if i < 0:
            m = p.remote
            end = m.end_offset if m is not None else p.log_start_offset
            raise OffsetOutOfRange(f"offset {offset} of {p.topic}/{p.index} is in no remote segment: what lay "
                                   f"between [{end}, {p.segments[0].base_offset}) went before it was uploaded")
        assert p.remote is not None
        seg = p.remote.segments[i]
        c = self._get(p, seg)
        if c.index is None:
            if not data:
                self._fetch_index(p, c)
                self.misses += 1
                return self._pending(p, offset)
            self._index_now(p, c)
        assert c.index is not None
        start = c.index.floor(offset - seg.base_offset)[1]
        spans, first, nxt, end, blocked = self._collect(c, start, offset, max_bytes, stop)
        if not spans and blocked >= 0:  # its chunk is not here yet
            self.misses += 1
            if not data:
                self._fetch(p, c, blocked // CHUNK)
                return self._pending(p, offset)
            while not spans and blocked >= 0:
                self._chunks_now(p, c, blocked)
                spans, first, nxt, end, blocked = self._collect(c, start, offset, max_bytes, stop)
        else:
            self.hits += 1
        self._read_ahead(p, c, end, i)
        payload = b""
        if data and spans:
            payload = b"".join(os.pread(c.fd, s.size, s.position) for s in spans)
        return ReadResult(first, nxt, spans, payload, p.log_start_offset, p.next_offset, p.high_watermark)

    def pending(self, p: Partition, offset: int) -> Callable[[Callable[[], object]], None] | None:
        """None when a read of the batch holding ``offset`` (below the local log) would
        not wait for the store; else its fetch is asked for, and ``when_ready(callback)``
        is returned, which calls ``callback()`` once the partition's readers are woken."""
        i = _holding(p, offset)
        if i < 0 or p.remote is None:
            return None  # out of range: the read says so
        segs = p.remote.segments
        c = self._get(p, segs[i])
        if c.index is None:
            self._fetch_index(p, c)
            return partial(_once, p)
        start = c.index.floor(offset - segs[i].base_offset)[1]
        spans, _, _, end, blocked = self._collect(c, start, offset, 1, p.next_offset)
        if spans or blocked < 0:
            self._read_ahead(p, c, end, i)
            return None
        self.misses += 1
        self._fetch(p, c, blocked // CHUNK)
        return partial(_once, p)

    def offset_for_time(self, p: Partition, timestamp: int) -> tuple[int, int] | None:
        """``Partition.offset_for_time`` over the remote segments below the local log:
        (offset, timestamp) of the first record at or after ``timestamp``, or None. Its
        fetches are made at once (ListOffsets by time is rare): the segment's time index,
        then the batches from the entry before ``timestamp``."""
        m = p.remote
        if m is None:
            return None
        local = p.segments[0].base_offset
        for seg in m.segments:
            if seg.base_offset >= local:
                return None
            if seg.max_timestamp < timestamp:
                continue
            self._check_reachable(f"the time index of remote segment {seg.base_offset}")
            try:
                key = partition_prefix("", p.topic, p.index) + seg.name(TIMEINDEX_SUFFIX)
                data = self.store.get_range(key, 0, 1 << 31)
                rel = TimeIndex.from_bytes(data, seg.next_offset - seg.base_offset - 1).start_for(timestamp)
            except (StoreError, KeyError) as e:
                self._failed(e, None)
                raise RemoteUnavailable(f"the time index of remote segment {seg.base_offset} of {p.topic}/{p.index}: "
                                        f"{e}") from None
            except IndexDamaged:
                rel = 0
            offset = max(seg.base_offset + rel, p.log_start_offset)
            while offset < min(seg.next_offset, local):
                res = self.read(p, offset, 1 << 20, True, p.high_watermark)
                for r in B.decode(res.data):
                    if r.offset >= offset and r.timestamp >= timestamp:
                        return r.offset, r.timestamp
                if res.next_offset <= offset:
                    break
                offset = res.next_offset
        return None

    def _pending(self, p: Partition, offset: int) -> ReadResult:
        return ReadResult(offset, offset, [], b"", p.log_start_offset, p.next_offset, p.high_watermark)

    def _collect(self, c: _Cached, position: int, offset: int, max_bytes: int,
                 stop: int) -> tuple[list[FileSpan], int, int, int, int]:
        """Whole batches from ``position`` over present chunks, as ``Partition.read``
        takes them: (spans, first offset, next offset, where they end, where a missing
        chunk stopped the walk (-1: none did))."""
        first = nxt = offset
        remaining = max_bytes
        span_start = span_end = -1
        blocked = -1
        for pos, info in self._walk(c, position):
            if info is None:
                blocked = pos
                break
            if info.next_offset <= offset:
                continue
            if info.base_offset >= stop:
                break
            if info.size > remaining and span_end > span_start:
                break
            if span_start < 0:
                span_start = span_end = pos
                first = info.base_offset
            span_end = pos + info.size
            remaining -= info.size
            nxt = info.next_offset
            if remaining <= 0:
                break
        spans = [FileSpan(c.path, span_start, span_end - span_start)] if span_end > span_start else []
        return spans, first, nxt, max(span_end, position), blocked

    def _walk(self, c: _Cached, position: int) -> Any:
        """(position, header) of each batch from ``position`` whose bytes are present;
        (position, None) where a missing chunk stops it."""
        size = c.seg.size
        while position + HEADER_SIZE <= size:
            if not c.covered(position, position + HEADER_SIZE):
                yield position, None
                return
            try:
                info: BatchInfo = parse_header(os.pread(c.fd, HEADER_SIZE, position), 0)
            except InvalidBatch:
                return
            if position + info.size > size:
                return
            if not c.covered(position, position + info.size):
                yield position, None
                return
            yield position, info
            position += info.size

    # -- the cache -------------------------------------------------------------------------

    def _get(self, p: Partition, seg: RemoteSegment) -> _Cached:
        key = (p.topic, p.index, seg.base_offset, seg.id)
        c = self._cached.get(key)
        if c is None:
            prefix = partition_prefix("", p.topic, p.index)
            c = _Cached(seg, prefix + seg.name(LOG_SUFFIX), os.path.join(self.root, prefix, seg.name(LOG_SUFFIX)))
            self._cached[key] = c
        else:
            self._cached.move_to_end(key)
        c.used = time.monotonic()
        return c

    def _evict(self) -> None:
        now = time.monotonic()
        for key, c in list(self._cached.items()):
            if self.cached_bytes <= self.limit:
                return
            if now - c.used < MIN_IDLE_S or any(c.fetching) or c.index_fetching:
                continue
            del self._cached[key]
            self.cached_bytes -= c.bytes
            c.close()

    def forget(self, topic: str, partition: int, keep: set[tuple[int, str]] | None = None) -> None:
        """Drop the cached segments of a partition (those not in ``keep``: (base, id))."""
        for key, c in list(self._cached.items()):
            if key[:2] == (topic, partition) and (keep is None or key[2:] not in keep) and not any(c.fetching):
                del self._cached[key]
                self.cached_bytes -= c.bytes
                c.close()

    # -- fetching ------------------------------------------------------------------------

    def _check_reachable(self, what: str) -> None:
        if time.monotonic() < self._retry_at:
            raise RemoteUnavailable(f"{what}: remote storage {self.store.url} is out of reach ({self._failing})")

    def _index_now(self, p: Partition, c: _Cached) -> None:
        self._check_reachable(f"the index of {c.key}")
        self.blocking_reads += 1
        try:
            data = self.store.get_range(c.key[: -len(LOG_SUFFIX)] + INDEX_SUFFIX, 0, 1 << 31)
        except (StoreError, KeyError) as e:
            self._failed(e, None)
            raise RemoteUnavailable(f"the index of remote segment {c.key} of {p.topic}/{p.index}: {e}") from None
        self._indexed(p, c, data)

    def _fetch_index(self, p: Partition, c: _Cached) -> None:
        if c.index_fetching or time.monotonic() < self._retry_at:
            return
        c.index_fetching = True
        key = c.key[: -len(LOG_SUFFIX)] + INDEX_SUFFIX
        self.in_flight += 1
        self._workers.submit(lambda: self.store.get_range(key, 0, 1 << 31), lambda r: self._index_done(p, c, r))

    def _index_done(self, p: Partition, c: _Cached, result: Any) -> None:
        c.index_fetching = False
        self.in_flight -= 1
        if isinstance(result, BaseException):
            self._failed(result, p)
            return
        if c.fd >= 0 and c.index is None:
            self._indexed(p, c, result)
        p.notify_readers()

    def _indexed(self, p: Partition, c: _Cached, data: bytes) -> None:
        try:
            c.index = OffsetIndex.from_bytes(data, c.seg.size)
        except IndexDamaged as e:  # the walk from position 0 still finds every batch
            log.warning("remote index of %s/%d segment %d damaged (%s): walking from its start", p.topic, p.index,
                        c.seg.base_offset, e)
            c.index = OffsetIndex()

    def _fetch(self, p: Partition, c: _Cached, first: int, count: int = READ_AHEAD) -> None:
        if time.monotonic() < self._retry_at:
            return
        run = c.missing(first, count)
        if run is None:
            return
        a, b = run
        for k in range(a, b):
            c.fetching[k] = 1
        start, end = a * CHUNK, min(b * CHUNK, c.seg.size)
        self.in_flight += 1
        self._workers.submit(lambda: self._fill(c, start, end), lambda r: self._filled(p, c, a, b, r))

    def _fill(self, c: _Cached, start: int, end: int) -> int:
        """(thread) Bytes [start, end) of the segment into its cache file."""
        data = self.store.get_range(c.key, start, end)
        if len(data) != end - start:
            raise StoreError(f"{c.key}: {len(data)} bytes at {start}, {end - start} expected")
        fd = c.fd
        if fd >= 0:
            os.pwrite(fd, data, start)
        return len(data)

    def _filled(self, p: Partition, c: _Cached, a: int, b: int, result: Any) -> None:
        self.in_flight -= 1
        for k in range(a, b):
            c.fetching[k] = 0
        if isinstance(result, BaseException):
            self._failed(result, p)
            return
        if c.fd >= 0:
            self._mark(c, a, b, result)
        p.notify_readers()

    def _mark(self, c: _Cached, a: int, b: int, n: int) -> None:
        for k in range(a, b):
            if not c.present[k]:
                c.present[k] = 1
                c.bytes += c.chunk_bytes(k)
                self.cached_bytes += c.chunk_bytes(k)
        self.fetched_bytes += n
        if self._failing is not None:
            log.info("remote reads from %s work again", self.store.url)
            self._failing = None
            self._backoff = 0.0
        if self.cached_bytes > self.limit:
            self._evict()

    def _chunks_now(self, p: Partition, c: _Cached, position: int) -> None:
        """Fetch, on this thread, what the batch at ``position`` needs: its header's
        chunks, then the rest of it."""
        self._check_reachable(f"remote segment {c.key}")
        self.blocking_reads += 1
        try:
            self._fill_now(c, position, min(c.seg.size, position + HEADER_SIZE))
            info = parse_header(os.pread(c.fd, HEADER_SIZE, position), 0)
            self._fill_now(c, position, min(c.seg.size, position + info.size))
        except (StoreError, KeyError, InvalidBatch, OSError) as e:
            self._failed(e, None)
            raise RemoteUnavailable(f"remote segment {c.key} of {p.topic}/{p.index}: {e}") from None

    def _fill_now(self, c: _Cached, start: int, end: int) -> None:
        """The chunks covering bytes [start, end), those missing fetched with one GET."""
        a, b = start // CHUNK, (end - 1) // CHUNK + 1
        while a < b and c.present[a]:
            a += 1
        while b > a and c.present[b - 1]:
            b -= 1
        if a < b:
            n = self._fill(c, a * CHUNK, min(b * CHUNK, c.seg.size))
            self._mark(c, a, b, n)

    def _read_ahead(self, p: Partition, c: _Cached, end: int, i: int) -> None:
        self._fetch(p, c, end // CHUNK)
        m = p.remote
        if m is not None and end + READ_AHEAD * CHUNK >= c.seg.size and i + 1 < len(m.segments):
            nxt = self._get(p, m.segments[i + 1])  # the next segment: its index and first chunks
            self._cached.move_to_end((p.topic, p.index, c.seg.base_offset, c.seg.id))
            if nxt.index is None:
                self._fetch_index(p, nxt)
            self._fetch(p, nxt, 0, READ_AHEAD // 2)

    def _failed(self, error: BaseException, p: Partition | None) -> None:
        """A fetch failed: nothing more is asked of the store for a backoff (doubling from
        1 s to 30 s), after which ``p``'s waiting readers are woken to try again."""
        self._backoff = min(30.0, self._backoff * 2 or 1.0)
        self._retry_at = time.monotonic() + self._backoff
        if self._failing is None:
            self._failing = str(error)
            log.warning("remote reads from %s fail: %s; retried in %.0f s", self.store.url, error, self._backoff)
        if p is not None and self._call_later is not None:
            self._call_later(self._backoff, p.notify_readers)

    def close(self) -> None:
        self._workers.stop()
        for c in self._cached.values():
            if c.fd >= 0 and not any(c.fetching):  # (a worker still writing keeps it open)
                os.close(c.fd)
                c.fd = -1
        self._cached.clear()
