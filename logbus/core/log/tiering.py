"""Tiered storage: sealed segments of tiered topics uploaded to an S3-compatible bucket.

Theory of operation. Every partition of a topic with ``remote.storage.enable`` (and every
partition whose manifest lists remote segments) has a ``PartitionTier`` here, owned by
the reactor thread; the bucket is only ever touched by the worker threads (``Workers``),
one job per partition at a time, so a slow or stopped store never holds the reactor.
Each housekeeping pass (``tick``) gives an idle partition its next job, in this order:

1. **read the bucket's manifest** (at open, and every ``SWEEP_S``): the bucket is the source of truth. The
   partition's local copy (``remote.json``, the manifest as last written; its incarnation
   written before anything reaches the bucket) gives the log start at once, before the
   bucket answers. A manifest of the same incarnation is taken as it is, and objects it
   does not name (an upload cut short) are deleted; none is made anew; one of another
   incarnation (another broker, or a life of the topic before this one) is left alone and
   the partition is not tiered (logged as an error, with what to do).
2. **remote retention**: remote segments past ``retention.ms`` / ``retention.bytes`` (the
   whole log's) or below the log start, and never one a queue still points into
   (``keep_from``), are dropped from the manifest, then their objects deleted.
3. **upload** the oldest sealed local segment the manifest does not list: its ``.log``,
   then its two indexes (as the partition holds them), each under a new upload id, then
   the manifest with it added, written only over the version read (If-Match).

A job that fails (the store stopped, a refused credential) is retried after a backoff
that doubles up to ``MAX_BACKOFF_S``; the first failure and the recovery are logged once.
Local copies of segments go (``Partition.apply_retention``, by ``local.retention.*``)
only once the manifest lists them, so a stopped store keeps everything on the local
disk, where the disk alarm guards it. A kill -9 at any moment leaves the manifest
naming each segment once, or not at all: the objects are written before it, under
names no manifest has used.
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from . import format as F
from .filecache import fsync_dir
from .manifest import LOCAL_COPY_NAME, MANIFEST_NAME, Manifest, ManifestDamaged, RemoteSegment, partition_prefix
from .objectstore import Conflict, ObjectStore, StoreError
from .partition import Partition

log = logging.getLogger(__name__)

# how often a partition's manifest is read again and the objects it does not name deleted:
# a request of a process killed mid-upload can still land after the next start's sweep
SWEEP_S = 600.0
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0  # Kafka's remote.log.manager.task.retry.backoff.max.ms
WORKERS = 2


class PartitionTier:
    """What tiering knows of one partition (reactor-owned)."""

    def __init__(self, p: Partition, prefix: str, manifest: Manifest) -> None:
        self.p = p
        self.prefix = prefix  # the partition's objects: prefix + name
        self.manifest = manifest  # as in the bucket, as far as this broker knows
        self.etag: str | None = None  # the bucket manifest's, once read (None: there is none)
        self.ready = False  # the bucket's manifest was read
        self.reconciled_at = 0.0  # when (the clock's), to sweep again after SWEEP_S
        self.busy = False  # a job runs
        self.retry_at = 0.0
        self.failures = 0
        self.refused: str | None = None  # why the partition is not tiered
        self.closed = False

    @property
    def local_path(self) -> str:
        return os.path.join(self.p.directory, LOCAL_COPY_NAME)

    def __repr__(self) -> str:
        return f"<PartitionTier {self.p.topic}/{self.p.index} remote [{self.manifest.start_offset}, {self.manifest.end_offset})>"


class Workers:
    """Daemon threads running jobs; each result (or exception) goes back to the reactor
    through ``call_from_thread(done, result)``. Daemon: a job cut short by the process
    ending is as safe as one cut by kill -9."""

    def __init__(self, call_from_thread: Callable[..., Any], n: int, name: str = "logbus-tiering") -> None:
        self._call = call_from_thread
        self._q: queue.Queue[tuple[Callable[[], Any], Callable[[Any], object]] | None] = queue.Queue()
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
                         for i in range(n)]
        for t in self._threads:
            t.start()

    def submit(self, job: Callable[[], Any], done: Callable[[Any], object]) -> None:
        self._q.put((job, done))

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            job, done = item
            try:
                result: Any = job()
            except BaseException as e:  # noqa: BLE001 (handed to the reactor, which decides)
                result = e
            self._call(done, result)

    def stop(self) -> None:
        for _ in self._threads:
            self._q.put(None)


class Tiering:
    def __init__(self, store: ObjectStore, call_from_thread: Callable[..., Any], *,
                 workers: int = WORKERS, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.tiers: dict[tuple[str, int], PartitionTier] = {}
        self._workers = Workers(call_from_thread, workers)
        self._clock = clock
        self._outage: str | None = None  # the failure logged, until a job succeeds again
        # told of every manifest a partition's readers see from now on (remote_read.py's cache)
        self.on_manifest: Callable[[Partition, Manifest], object] | None = None
        self._keep_from: Callable[[str, int], int | None] | None = None  # the last pass's
        self._retention = False  # no remote retention before the first housekeeping pass
        self.uploaded_segments = 0
        self.uploaded_bytes = 0
        self.failures = 0

    # -- partitions -------------------------------------------------------------------

    def attach(self, p: Partition) -> PartitionTier:
        """Take up a partition (at open, or when its topic turns tiering on): its local
        copy of the manifest is read (or one made and synced, with a new incarnation),
        and ``p.remote`` set from it."""
        key = (p.topic, p.index)
        tier = self.tiers.get(key)
        if tier is not None:
            return tier
        path = os.path.join(p.directory, LOCAL_COPY_NAME)
        manifest = _read_local(path, p)
        if manifest is None:
            manifest = Manifest(p.topic, p.index, secrets.token_hex(16), 0, p.log_start_offset)
            _write_local(path, manifest, sync=True)  # the incarnation, before the bucket hears of it
        tier = self.tiers[key] = PartitionTier(p, partition_prefix("", p.topic, p.index), manifest)
        p.remote = manifest if manifest.segments else None
        return tier

    def detach(self, partitions: list[Partition], delete: bool) -> None:
        """Forget partitions (closed, or their topic deleted: with ``delete``, their
        objects and manifests are deleted from the bucket, in the background)."""
        for p in partitions:
            tier = self.tiers.pop((p.topic, p.index), None)
            if tier is None:
                continue
            tier.closed = True
            if delete and tier.refused is None:
                self._workers.submit(partial(self._delete_all, tier), partial(self._deleted, tier))

    # -- the housekeeping pass --------------------------------------------------------------

    def tick(self, now_ms: int, keep_from: Callable[[str, int], int | None] | None = None) -> None:
        """The housekeeping pass: every partition's next job, remote retention included
        (guarded by ``keep_from``, the queues' pointers)."""
        self._keep_from = keep_from
        self._retention = True
        for tier in list(self.tiers.values()):
            self._step(tier, now_ms)

    def poll(self) -> None:
        """Between housekeeping passes (every second, manager.py): uploads of newly sealed segments
        start soon after the roll. Remote retention waits for a pass, which knows what
        the queues point at."""
        now_ms = int(time.time() * 1000)
        for tier in list(self.tiers.values()):
            self._step(tier, now_ms)

    def _step(self, tier: PartitionTier, now_ms: int) -> None:
        """Give an idle partition its next job (after a housekeeping pass, or its last job)."""
        if tier.busy or tier.closed or tier.refused is not None or self._clock() < tier.retry_at:
            return
        if not tier.ready or self._clock() - tier.reconciled_at >= SWEEP_S:
            self._start(tier, self._reconcile, self._reconciled)
            return
        drop_to = self._retention_due(tier, now_ms, self._keep_from) if self._retention else None
        if drop_to is not None:
            self._start(tier, partial(self._drop_below, drop_to), self._written)
            return
        seg = self._next_upload(tier)
        if seg is not None:
            self._start_upload(tier, seg)

    def _start(self, tier: PartitionTier, job: Callable[[PartitionTier], Any],
               done: Callable[[PartitionTier, Any], object]) -> None:
        tier.busy = True
        self._workers.submit(lambda: job(tier), lambda r: self._done(tier, r, done))

    def _done(self, tier: PartitionTier, result: Any, done: Callable[[PartitionTier, Any], object]) -> None:
        tier.busy = False
        if tier.closed:
            return
        if isinstance(result, Conflict):  # the manifest changed under us: read it again
            log.warning("tiering %s/%d: %s; reading the manifest again", tier.p.topic, tier.p.index, result)
            tier.ready = False
            return
        if isinstance(result, (StoreError, OSError)):
            self._failed(tier, result)
            return
        if isinstance(result, BaseException):
            log.error("tiering %s/%d failed", tier.p.topic, tier.p.index, exc_info=result)
            self._failed(tier, result)
            return
        if self._outage is not None:
            log.info("remote storage %s: reachable again (%s)", self.store.url, self._outage)
            self._outage = None
        tier.failures = 0
        done(tier, result)
        self._step(tier, int(time.time() * 1000))  # the next one at once: an upload backlog drains

    def _failed(self, tier: PartitionTier, error: BaseException) -> None:
        self.failures += 1
        tier.failures += 1
        backoff = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (tier.failures - 1))
        tier.retry_at = self._clock() + backoff
        if self._outage is None:
            self._outage = str(error)
            log.warning("remote storage %s: %s; uploads wait (retried, backing off to %.0f s), and local "
                        "segments not uploaded are kept", self.store.url, error, MAX_BACKOFF_S)
        else:
            log.debug("tiering %s/%d: %s (retry in %.1f s)", tier.p.topic, tier.p.index, error, backoff)

    # -- reading the bucket's manifest ----------------------------------------------------

    def _reconcile(self, tier: PartitionTier) -> tuple[Manifest | None, str | None, list[str]]:
        """(thread) The bucket's manifest and ETag, and the objects it does not name."""
        found = self.store.get(tier.prefix + MANIFEST_NAME)
        if found is None:
            return None, None, []
        data, etag = found
        manifest = Manifest.decode(data)
        if manifest.incarnation != tier.manifest.incarnation:
            return manifest, etag, []
        named = {n for s in manifest.segments for n in s.names()} | {MANIFEST_NAME}
        orphans = [o.key for o in self.store.list(tier.prefix) if o.key[len(tier.prefix):] not in named]
        if orphans:
            self.store.delete(orphans)
        return manifest, etag, orphans

    def _reconciled(self, tier: PartitionTier, result: tuple[Manifest | None, str | None, list[str]]) -> None:
        manifest, etag, orphans = result
        p = tier.p
        if manifest is not None and manifest.incarnation != tier.manifest.incarnation:
            tier.refused = (f"s3://{self.store.bucket}/{self.store.prefix}{tier.prefix}{MANIFEST_NAME} belongs to "
                            f"another life of topic {p.topic!r} (incarnation {manifest.incarnation}, this one is "
                            f"{tier.manifest.incarnation}): left alone, and this partition is not tiered; delete "
                            f"that prefix, or give this broker another --remote-storage prefix")
            log.error("tiering %s/%d: %s", p.topic, p.index, tier.refused)
            return
        if orphans:
            log.info("tiering %s/%d: deleted %d objects of uploads cut short", p.topic, p.index, len(orphans))
        if manifest is None:
            if tier.manifest.segments:
                log.error("tiering %s/%d: the bucket has no manifest, but this broker wrote one naming %d remote "
                          "segments [%d, %d): they are lost", p.topic, p.index, len(tier.manifest.segments),
                          tier.manifest.start_offset, tier.manifest.end_offset)
            tier.manifest = Manifest(p.topic, p.index, tier.manifest.incarnation, 0, p.segments[0].base_offset)
        else:
            tier.manifest = manifest
        tier.etag = etag
        tier.ready = True
        tier.reconciled_at = self._clock()
        self._adopt(tier)

    def _adopt(self, tier: PartitionTier) -> None:
        """The tier's manifest is what the bucket holds: show it to readers and keep a local copy."""
        m = tier.manifest
        tier.p.remote = m if m.segments else None
        if self.on_manifest is not None:
            self.on_manifest(tier.p, m)
        try:
            _write_local(tier.local_path, m, sync=False)
        except OSError as e:  # only a hint for the next start: the bucket is read then
            log.warning("tiering %s/%d: the local copy of the manifest was not written: %s",
                        tier.p.topic, tier.p.index, e)

    # -- uploads -------------------------------------------------------------------------

    def _next_upload(self, tier: PartitionTier) -> Any:
        """The oldest sealed local segment past the manifest's end, if tiering is on."""
        p = tier.p
        if not p.config.remote_storage_enable:
            return None
        end = tier.manifest.end_offset
        for seg in p.segments[:-1]:  # the last is the active one
            if seg.next_offset <= end or not seg.size:
                continue
            if tier.manifest.segments and seg.base_offset != end:
                return None  # a gap: retention drops the remote segments before it first
            return seg
        return None

    def _start_upload(self, tier: PartitionTier, seg: Any) -> None:
        # the indexes as the partition holds them (loaded, or rebuilt when damaged), and
        # the aborted transactions the manifest lists: made here, on the reactor
        index, tindex = seg.index.to_bytes(), seg.time_index.to_bytes()
        entry = RemoteSegment(seg.base_offset, seg.next_offset, seg.size, seg.max_timestamp,
                              secrets.token_hex(6), int(time.time() * 1000))
        aborted = tuple(a for a in tier.p.aborted.entries if a.last_offset >= tier.manifest.log_start_offset)
        path = seg.log_path
        self._start(tier, lambda t: self._upload(t, path, entry, index, tindex, aborted), self._uploaded)

    def _upload(self, tier: PartitionTier, path: str, entry: RemoteSegment, index: bytes, tindex: bytes,
                aborted: tuple[F.AbortedTxn, ...]) -> tuple[Manifest, str, RemoteSegment]:
        """(thread) The segment's objects, then the manifest naming them."""
        log_name, index_name, time_name = entry.names()
        self.store.put_file(tier.prefix + log_name, path)
        self.store.put(tier.prefix + index_name, index)
        self.store.put(tier.prefix + time_name, tindex)
        manifest = tier.manifest.with_segment(entry, aborted)
        return manifest, self._put_manifest(tier, manifest), entry

    def _put_manifest(self, tier: PartitionTier, manifest: Manifest) -> str:
        if tier.etag is None:
            return self.store.put(tier.prefix + MANIFEST_NAME, manifest.encode(), if_none_match=True)
        return self.store.put(tier.prefix + MANIFEST_NAME, manifest.encode(), if_match=tier.etag)

    def _uploaded(self, tier: PartitionTier, result: tuple[Manifest, str, RemoteSegment]) -> None:
        manifest, etag, entry = result
        self.uploaded_segments += 1
        self.uploaded_bytes += entry.size
        log.debug("tiering %s/%d: uploaded [%d, %d), %d bytes", tier.p.topic, tier.p.index,
                  entry.base_offset, entry.next_offset, entry.size)
        self._written(tier, (manifest, etag, ()))

    # -- remote retention ----------------------------------------------------------------

    def _retention_due(self, tier: PartitionTier, now_ms: int,
                       keep_from: Callable[[str, int], int | None] | None) -> int | None:
        """The offset the remote log should start at, when that drops segments or moves
        its start: past retention.ms / retention.bytes (of the whole log), below the
        partition's log start (DeleteRecords), or all of it when the local log starts
        past its end (what lay between went before it was uploaded); never a segment
        holding an offset >= ``keep_from`` (a queue's pointer)."""
        p, m = tier.p, tier.manifest
        if not m.segments:
            return None
        cfg = p.config
        target = max(m.log_start_offset, p.log_start_offset)
        if m.end_offset < p.segments[0].base_offset:
            target = max(target, m.end_offset)
        total = m.size + sum(s.size for s in p.segments if s.base_offset >= m.end_offset)
        for s in m.segments:
            expired = cfg.retention_ms > 0 and s.max_timestamp >= 0 and now_ms - s.max_timestamp > cfg.retention_ms
            too_big = cfg.retention_bytes > 0 and total - s.size >= cfg.retention_bytes
            if not (expired or too_big):
                break
            target = max(target, s.next_offset)
            total -= s.size
        if target <= m.log_start_offset:
            return None
        pin = None if keep_from is None else keep_from(p.topic, p.index)
        if pin is not None:
            holding = next((s.base_offset for s in m.segments if s.next_offset > pin), target)
            target = min(target, max(holding, m.log_start_offset))
        return target if target > m.log_start_offset else None

    def _drop_below(self, offset: int, tier: PartitionTier) -> tuple[Manifest, str, tuple[RemoteSegment, ...]]:
        """(thread) The manifest without the segments below ``offset``, then their objects deleted."""
        manifest, gone = tier.manifest.without_below(offset)
        etag = self._put_manifest(tier, manifest)
        return manifest, etag, gone

    def _written(self, tier: PartitionTier, result: tuple[Manifest, str, tuple[RemoteSegment, ...]]) -> None:
        manifest, etag, gone = result
        uploaded = manifest.end_offset > tier.manifest.end_offset
        tier.manifest, tier.etag = manifest, etag
        self._adopt(tier)
        if uploaded:  # local copies may go now, not only at the next housekeeping pass
            p, keep = tier.p, self._keep_from
            p.apply_retention(int(time.time() * 1000), None if keep is None else partial(keep, p.topic, p.index))
        if gone:
            keys = [tier.prefix + n for s in gone for n in s.names()]
            log.info("remote retention deleted %d segments of %s/%d below offset %d", len(gone),
                     tier.p.topic, tier.p.index, manifest.log_start_offset)
            self._workers.submit(lambda: self.store.delete(keys), lambda r: self._cleaned(tier, r))

    def _cleaned(self, tier: PartitionTier, result: Any) -> None:
        if isinstance(result, BaseException):  # the objects stay; the next start's reconcile deletes them
            log.warning("tiering %s/%d: objects of dropped segments not deleted: %s", tier.p.topic, tier.p.index,
                        result)

    # -- deleted topics ------------------------------------------------------------------

    def _delete_all(self, tier: PartitionTier) -> int:
        """(thread) The partition's manifest first (if it is this life's), then every object."""
        found = self.store.get(tier.prefix + MANIFEST_NAME)
        if found is not None:
            try:
                if Manifest.decode(found[0]).incarnation != tier.manifest.incarnation:
                    return 0
            except ManifestDamaged:
                pass
        self.store.delete([tier.prefix + MANIFEST_NAME])
        keys = [o.key for o in self.store.list(tier.prefix)]
        self.store.delete(keys)
        return len(keys)

    def _deleted(self, tier: PartitionTier, result: Any) -> None:
        if isinstance(result, BaseException):
            log.warning("tiering: the remote objects of deleted %s/%d were not deleted (%s); they are left in "
                        "s3://%s/%s%s", tier.p.topic, tier.p.index, result, self.store.bucket, self.store.prefix,
                        tier.prefix)

    def close(self) -> None:
        self._workers.stop()
        for tier in self.tiers.values():
            tier.closed = True
        self.tiers.clear()


def _read_local(path: str, p: Partition) -> Manifest | None:
    try:
        with open(path, "rb") as f:
            m = Manifest.decode(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ManifestDamaged) as e:
        log.warning("tiering %s/%d: local copy %s of the manifest unreadable (%s): made anew", p.topic, p.index,
                    path, e)
        return None
    if (m.topic, m.partition) != (p.topic, p.index):
        return None
    return m


def _write_local(path: str, manifest: Manifest, *, sync: bool) -> None:
    tmp = path + F.TMP_SUFFIX
    with open(tmp, "wb") as f:
        f.write(manifest.encode())
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path))
