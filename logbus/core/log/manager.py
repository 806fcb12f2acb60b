"""The log of one broker: every topic's partitions under ``<data>/log/``, the
clean-shutdown marker and the trash of deleted topics (names: ``format.py``).

Which topics exist, and with what settings, is recorded by the caller (the broker's
state store); the manager opens what it is told to and recovers it.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from ..errors import InvalidConfig, StorageError, TopicExists, UnknownPartition, UnknownTopic
from ..metrics import Metrics
from ..tick import tick_of
from . import batch as B
from . import new_topic
from .filecache import FileCache
from .flusher import Flusher, syncfs
from .keyindexer import KeyIndexer
from .manifest import LOCAL_COPY_NAME
from .format import CLEAN_MARKER, LOG_DIR, TRASH, partition_dirname, topic_dirname
from .filecache import fsync_dir
from .partition import Partition
from .recovery import RecoveryReport, recover_partition
from .topic_config import TopicConfig, validate_topic_name
from .uring import Ring

POLL_S = 1.0  # how often tiering looks for newly sealed segments (tiering.py)

if TYPE_CHECKING:
    from .manifest import Manifest
    from .remote_read import RemoteReads
    from .tiering import Tiering

log = logging.getLogger(__name__)


class Topic:
    def __init__(self, name: str, directory: str, config: TopicConfig, partitions: list[Partition]) -> None:
        self.name = name
        self.directory = directory
        self.config = config
        self.partitions = partitions

    def partition(self, index: int) -> Partition:
        if not 0 <= index < len(self.partitions):
            raise UnknownPartition(f"topic {self.name!r} has no partition {index}")
        return self.partitions[index]


class LogManager:
    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        reactor: Any,
        *,
        max_open_files: int = 1024,
        metrics: Metrics | None = None,
        inline_flush: bool = True,
        key_index: bool = True,
        remote_storage: str = "",
        remote_storage_endpoint: str = "",
        remote_cache_bytes: int = 0,
    ) -> None:
        """``inline_flush``: let small syncs run on the reactor thread (flusher.py).
        ``key_index``: keep the key indexes up to date in the background (keyindexer.py;
        lookups bring them up to date either way). ``remote_storage``: the bucket
        (``s3://BUCKET/PREFIX``) tiered topics upload their sealed segments to
        (tiering.py), at ``remote_storage_endpoint`` (any S3-compatible store)."""
        self.root = os.path.join(os.fspath(data_dir), LOG_DIR)
        self.fresh = not os.path.isdir(self.root)
        os.makedirs(self.root, exist_ok=True)
        self.metrics = metrics or Metrics()
        m = self.metrics
        self.cache = FileCache(max_open_files, on_change=m.open_files.set)

        self.reactor = reactor
        self._tick = tick_of(reactor)
        ring = Ring.open() if inline_flush and hasattr(reactor, "addReader") else None
        self.flusher = Flusher(reactor.callFromThread, m.flushes.observe, inline=inline_flush, ring=ring,
                               call_later=reactor.callLater)
        self._ring_reader = None if ring is None else _RingReader(ring, self.flusher.ring_ready)
        if self._ring_reader is not None:
            reactor.addReader(self._ring_reader)
        self._to_drain: list[Partition] = []
        self.drains = 0  # turns that wrote appends: a count that moves with the work
        m.registry.register(_LogCollector(self))
        marker = os.path.join(self.root, CLEAN_MARKER)
        self.clean_start = os.path.exists(marker)
        if self.clean_start:
            os.unlink(marker)
            fsync_dir(self.root)
        trash = os.path.join(self.root, TRASH)
        if os.path.isdir(trash):
            shutil.rmtree(trash, ignore_errors=True)
        new_topic.remove_leftovers(self.root)
        self.topics: dict[str, Topic] = {}
        self.reports: list[RecoveryReport] = []
        self._closed = False
        # the owner's hooks, given to every partition (partition.py): run before a
        # tick's appends are written (the queue journal's commit), and told of appends
        # refused after their offsets were given
        self.before_write: Callable[[], object] | None = None
        # run first in each end-of-turn drain, with the partitions appended to since the
        # last one (every record of which has been routed then): the queue journal's
        # commit with their marks (queues/journal.py); a StorageError it raises is raised
        # again by ``before_write``, which refuses the appends
        self.before_drain: Callable[[list[Partition]], object] | None = None
        self.on_lost: Callable[[Partition, int, int, StorageError], object] | None = None
        # the partitions' key indexes, off the append path (keyindexer.py)
        self.keys = KeyIndexer(self.topics, self.cache, reactor.callLater if key_index else None)
        self.keys.start()
        self.tiering: Tiering | None = None
        self._tier_poll: Any = None
        self.remote_reads: RemoteReads | None = None
        if remote_storage:
            from .objectstore import ObjectStore
            from .remote_read import RemoteReads
            from .tiering import Tiering

            store = ObjectStore(remote_storage, remote_storage_endpoint)
            self.remote_reads = RemoteReads(self.root, store, reactor.callFromThread, call_later=reactor.callLater,
                                            **({"limit": remote_cache_bytes} if remote_cache_bytes else {}))
            self.tiering = Tiering(store, reactor.callFromThread)
            self.tiering.on_manifest = self._remote_changed
            self._tier_poll = reactor.callLater(POLL_S, self._poll_tiering)

    # -- topics ---------------------------------------------------------------------

    def check_config(self, config: TopicConfig) -> None:
        """InvalidConfig when this log cannot give a topic these settings (tiering without
        remote storage), checked before a topic is created or altered."""
        if config.remote_storage_enable and self.tiering is None:
            raise InvalidConfig("remote.storage.enable=true needs the broker's remote storage (the setting "
                                "remote_storage, --remote-storage s3://BUCKET/PREFIX): tiered storage is off")

    def open_topic(self, name: str, config: TopicConfig, *, create: bool = False) -> Topic:
        """Open (recovering) or, with ``create``, create the topic's partitions.
        Opening an open topic with more partitions adds the new ones."""
        validate_topic_name(name)
        if create:
            self.check_config(config)
        existing = self.topics.get(name)
        if existing is not None:
            if create:
                raise TopicExists(f"topic {name!r} already exists")
            self._grow(existing, config)
            self._count()
            return existing
        tdir = os.path.join(self.root, topic_dirname(name))
        sync = config.flush_mode != "none"
        if create:
            _refuse_foreign_files(name, tdir)
            try:  # whole or not at all (new_topic.py)
                new_topic.build(self.root, tdir, config.partitions, sync=sync)
            except OSError as e:  # out of file descriptors, a full disk
                raise StorageError(f"topic {name!r} could not be created: {e}") from None
        topic = Topic(name, tdir, config, [])
        try:
            if create and sync:
                fsync_dir(self.root)  # the rename into place
            os.makedirs(tdir, exist_ok=True)
            self._grow(topic, config, synced=create)
        except OSError as e:  # out of file descriptors, a full disk: nothing of it is left
            for p in topic.partitions:
                p.close()
            if create:
                new_topic.take_back(self.root, tdir, config.partitions)
            raise StorageError(f"topic {name!r} could not be opened: {e}") from None
        self.topics[name] = topic
        self._count()
        return topic

    def _grow(self, topic: Topic, config: TopicConfig, *, synced: bool = False) -> Topic:
        """Open the partitions ``config`` has beyond those open. ``synced``: their
        directories are durable already (a new topic's: new_topic.py)."""
        now = B.now_ms()
        sync = config.flush_mode != "none" and not synced
        topic.config = config
        for p in topic.partitions:
            p.set_config(config)
        for i in range(len(topic.partitions), config.partitions):
            pdir = os.path.join(topic.directory, partition_dirname(i))
            segments, report = recover_partition(pdir, self.cache, config.index_interval_bytes, self.clean_start, now)
            if sync:
                fsync_dir(pdir)  # the first segment's directory entry must survive power loss
            p = Partition(topic.name, i, pdir, config, segments, self.cache, self.flusher, self._schedule)
            note = p.aborted.recover(segments, report)
            if note is not None:
                log.warning("recovery: %s", note)
                report.notes.append(note)
                report.rebuilt_indexes.append(p.aborted.path)
            if report.changed:
                report.topic, report.partition = topic.name, i
                self.reports.append(report)
            p.before_write = self._before_write
            p.on_lost = self._lost
            if self.keys.running:
                p.appended = self.keys.appended
            topic.partitions.append(p)
            self._tier(p)
        if sync:
            fsync_dir(topic.directory)
        return topic

    def _tier(self, p: Partition) -> None:
        """Tiered storage takes up ``p`` if its topic is tiered or it has been."""
        if not (p.config.remote_storage_enable or os.path.exists(os.path.join(p.directory, LOCAL_COPY_NAME))):
            return
        if self.tiering is None or self.remote_reads is None:
            log.warning("%s/%d is tiered, but this broker has no remote storage (--remote-storage): its remote "
                        "segments cannot be read and none are uploaded", p.topic, p.index)
            return
        p.read_remote = self.remote_reads.read
        p.remote_time = self.remote_reads.offset_for_time
        self.tiering.attach(p)

    def _poll_tiering(self) -> None:
        if self.tiering is not None and not self._closed:
            self.tiering.poll()
            self._tier_poll = self.reactor.callLater(POLL_S, self._poll_tiering)

    def remote_pending(self, topic: str, partition: int, offset: int) -> Callable[[Callable[[], object]], None] | None:
        """None when reading ``offset`` of the partition would not wait for remote
        storage (``RemoteReads.pending``; cheap for a partition with nothing remote)."""
        reads = self.remote_reads
        if reads is None:
            return None
        t = self.topics.get(topic)
        if t is None or not 0 <= partition < len(t.partitions):
            return None
        p = t.partitions[partition]
        if p.remote is None or offset >= p.segments[0].base_offset:
            return None
        return reads.pending(p, offset)

    def _remote_changed(self, p: Partition, manifest: Manifest) -> None:
        """A partition's readers see ``manifest`` from now on: cached segments it no
        longer lists go."""
        if self.remote_reads is not None:
            self.remote_reads.forget(p.topic, p.index, {(s.base_offset, s.id) for s in manifest.segments})

    def _schedule(self, p: Partition) -> None:
        """``p`` has buffered appends: write them at the end of this tick. (Writing
        earlier, in groups, to overlap flushing with appending measured slower: each
        smaller syncfs still pays the ~5 ms journal commit.)"""
        if not self._to_drain:
            self._tick.later(self.drain)
        self._to_drain.append(p)

    def _before_write(self) -> None:
        if self.before_write is not None:
            self.before_write()

    def _lost(self, p: Partition, first: int, end: int, error: StorageError) -> None:
        if self.on_lost is not None:
            self.on_lost(p, first, end, error)

    def repair(self) -> None:
        """Partitions whose write failed try a new segment now, without waiting for an
        append (health then turns by itself once there is space)."""
        for topic in self.topics.values():
            for p in topic.partitions:
                if p.failure is not None and p.offline is None:
                    p.unavailable()

    def failures(self) -> list[tuple[str, int, StorageError]]:
        """Partitions that refuse appends now: (topic, partition, why)."""
        return [(t.name, p.index, p.failure) for t in self.topics.values() for p in t.partitions
                if p.failure is not None]

    def drain(self) -> None:
        """Write every partition's buffered appends (runs once per reactor tick)."""
        parts, self._to_drain = self._to_drain, []
        self.drains += 1
        if self.before_drain is not None:
            try:
                self.before_drain(parts)
            except StorageError:
                pass  # each partition's ``before_write`` meets it again and refuses its appends
        handoff: list[Any] = []
        written = 0
        for p in parts:
            written += p.drain(handoff)
        if handoff:
            self.flusher.submit(handoff, written)

    def reconfigure(self, name: str, config: TopicConfig) -> Topic:
        """New settings (same partition count) for an open topic's live partitions."""
        topic = self.topic(name)
        topic.config = config
        for p in topic.partitions:
            p.set_config(config)
            self._tier(p)
        return topic

    def topic(self, name: str) -> Topic:
        t = self.topics.get(name)
        if t is None:
            raise UnknownTopic(f"unknown topic {name!r}")
        return t

    def partition(self, topic: str, index: int) -> Partition:
        return self.topic(topic).partition(index)

    def delete_topic(self, name: str) -> None:
        """Remove the topic's files. Appends still waiting for a flush complete first
        (their handles stay pinned); the directory is moved aside at once and removed."""
        topic = self.topics.pop(name, None)
        if topic is None:
            raise UnknownTopic(f"unknown topic {name!r}")
        for p in topic.partitions:
            p.close()
        self.keys.forget(topic.partitions)
        if self.tiering is not None:
            self.tiering.detach(topic.partitions, delete=True)
        if self.remote_reads is not None:
            for p in topic.partitions:
                self.remote_reads.forget(p.topic, p.index)
        trash = os.path.join(self.root, TRASH)
        os.makedirs(trash, exist_ok=True)
        dest = os.path.join(trash, f"{os.path.basename(topic.directory)}.{time.time_ns()}")
        os.rename(topic.directory, dest)
        fsync_dir(self.root)
        shutil.rmtree(dest, ignore_errors=True)
        self._count()

    def _count(self) -> None:
        self.metrics.topics.set(len(self.topics))
        self.metrics.partitions.set(sum(len(t.partitions) for t in self.topics.values()))

    # -- housekeeping -----------------------------------------------------------------

    def housekeeping(self, now_ms: int | None = None, keep_from: Callable[[str, int], int | None] | None = None) -> int:
        """Roll segments past segment.ms and apply retention; returns segments deleted.
        ``keep_from(topic, partition)``: the lowest offset still needed there (None: none);
        asked only for a partition with a segment due for deletion."""
        now = B.now_ms() if now_ms is None else now_ms
        deleted = 0
        for topic in list(self.topics.values()):
            for p in topic.partitions:
                p.maybe_roll(now)
                guard = None if keep_from is None else partial(keep_from, topic.name, p.index)
                deleted += p.apply_retention(now, guard)
        if self.tiering is not None:
            self.tiering.tick(now, keep_from)
        return deleted

    def close(self) -> None:
        """Flush every pending append, make every file durable, write the active
        indexes and mark the shutdown clean. Fire-and-forget callers are already done;
        waiters' Deferreds fire through ``call_in_reactor`` once it runs again."""
        if self._closed:
            return
        self._closed = True
        self.keys.stop()
        if self.tiering is not None:
            self.tiering.close()
            if self._tier_poll is not None and self._tier_poll.active():
                self._tier_poll.cancel()
        if self.remote_reads is not None:
            self.remote_reads.close()
        self.drain()
        self.flusher.stop()
        if self._ring_reader is not None:
            self.reactor.removeReader(self._ring_reader)
            self._ring_reader.ring.close()
        unclean = [f"{t}/{i}: {e}" for t, i, e in self.failures()]
        for topic in self.topics.values():
            for p in topic.partitions:
                try:
                    p.write_indexes()
                except OSError as e:
                    unclean.append(f"{p.topic}/{p.index}: indexes not written: {e}")
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            syncfs(fd)
        except OSError as e:
            unclean.append(f"the final sync failed: {e}")
        finally:
            os.close(fd)
        if unclean:  # no marker: the next start checks every active segment
            log.error("the log was not closed cleanly: %s", "; ".join(unclean))
        else:
            with open(os.path.join(self.root, CLEAN_MARKER), "w") as f:
                f.write("clean\n")
            fsync_dir(self.root)
        self.cache.close_all()


def _refuse_foreign_files(name: str, tdir: str) -> None:
    """A topic being created must not find files in its directory: this broker did not
    write them (another process did, or an operator copied them there), and they are
    neither deleted nor taken for the new topic's. Empty directories and empty first
    segments are harmless (new_topic.foreign_file)."""
    found = new_topic.foreign_file(tdir)
    if found is not None:
        raise TopicExists(
            f"cannot create topic {name!r}: its directory {tdir} already holds files this broker did not "
            f"create (such as {found}); move that directory away, then create the topic again"
        )


class _RingReader:
    """The ring's eventfd as a reactor reader (Twisted's IReadDescriptor)."""

    def __init__(self, ring: Ring, ready: Callable[[], None]) -> None:
        self.ring = ring
        self.doRead = ready

    def fileno(self) -> int:
        return self.ring.eventfd

    def logPrefix(self) -> str:
        return "logbus-sync-ring"

    def connectionLost(self, reason: Any) -> None:
        pass


class _LogCollector:
    """Append counters, read from the partitions at scrape time (nothing on the hot path)."""

    def __init__(self, manager: LogManager) -> None:
        self._m = manager

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        recs = CounterMetricFamily("logbus_records_appended", "Records appended to the log", labels=["topic"])
        byts = CounterMetricFamily("logbus_bytes_appended", "Record batch bytes appended to the log", labels=["topic"])
        for t in list(self._m.topics.values()):
            recs.add_metric([t.name], sum(p.records_appended for p in t.partitions))
            byts.add_metric([t.name], sum(p.bytes_appended for p in t.partitions))
        yield recs
        yield byts
        syncs = CounterMetricFamily("logbus_log_syncs", "Syncs that made appends durable, by where they ran (reactor, flusher thread, ring: the kernel through io_uring)",
                                    labels=["thread"])
        syncs.add_metric(["reactor"], self._m.flusher.inline_syncs)
        syncs.add_metric(["flusher"], self._m.flusher.thread_syncs)
        syncs.add_metric(["ring"], self._m.flusher.ring_syncs)
        yield syncs
        tiering, reads = self._m.tiering, self._m.remote_reads
        if tiering is not None and reads is not None:  # tiered storage (docs/tiering.md)
            from prometheus_client.core import GaugeMetricFamily

            for name, doc, value in (
                ("logbus_remote_uploaded_segments", "Segments uploaded to remote storage", tiering.uploaded_segments),
                ("logbus_remote_uploaded_bytes", "Bytes of segments uploaded to remote storage",
                 tiering.uploaded_bytes),
                ("logbus_remote_failures", "Remote storage jobs (uploads, manifests, deletions) that failed",
                 tiering.failures),
                ("logbus_remote_fetched_bytes", "Bytes of remote segments fetched into the local cache",
                 reads.fetched_bytes),
                ("logbus_remote_cache_misses", "Reads of remote segments that had to fetch first", reads.misses),
                ("logbus_remote_blocking_reads", "Fetches of remote segments the broker's own readers waited for",
                 reads.blocking_reads),
            ):
                yield CounterMetricFamily(name, doc, value=value)
            yield GaugeMetricFamily("logbus_remote_cache_bytes", "Bytes of remote segments cached locally",
                                    value=reads.cached_bytes)
