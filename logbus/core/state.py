r"""The broker's state store: one RocksDB database (rocksdict, raw bytes mode).

This is the ONE module that packs state keys; nothing else builds them by hand.
Values are protobuf messages from ``state.proto`` (or, on hot paths, fixed-width
structs documented in the table below).

Column families and key layout
==============================

=============  ==================================  ==============================
column family  key                                 value
=============  ==================================  ==============================
metadata       ``b"topic\0" + name + b"\0"``        ``TopicRecord``
               ``b"producer_ids\0"``               uint64 big-endian: the first
                                                   producer id not yet reserved
               ``b"exchange\0" + vhost + b"\0"``   ``ExchangeRecord``
               ``+ name + b"\0"``
               ``b"queue\0" + vhost + b"\0"``      ``QueueRecord``
               ``+ name + b"\0"``
               ``b"binding\0" + vhost + b"\0"``    ``BindingRecord`` (digest: the
               ``+ source + b"\0" + kind + b"\0"``  first 8 bytes of SHA-1 over
               ``+ destination + b"\0" + key``      the frozen arguments, and the
               ``+ b"\0" + digest``                filter if any:
                                                   ``definitions.binding_digest``)
               ``b"user\0" + name + b"\0"``       ``UserRecord`` (core/access/auth.py)
               ``b"vhost\0" + name + b"\0"``      ``VHostRecord``
               ``b"permission\0" + vhost``        ``PermissionRecord`` (vhost
               ``+ b"\0" + user + b"\0"``          first: deleting a vhost is
                                                   one prefix scan)
               ``b"auth_seeded\0"``                empty: the default vhost and
                                                   user were created (first boot)
               ``b"timer_ids\0"``                  uint64 big-endian: the first
                                                   timer id not yet reserved
               ``b"popgroup\0" + group + b"\0"``   ``PopGroupRecord``: a pop group
               ``+ topic + b"\0"``                 reading a topic
               ``b"topicperm\0" + vhost + b"\0"``  ``TopicPermissionRecord``
               ``+ user + b"\0" + exchange``       (core/access/auth.py)
               ``+ b"\0"``
               ``b"retained\0" + topic + b"\0"``   ``RetainedRecord``: the retained
                                                   message of an MQTT topic name
                                                   (core/retained.py)
               ``b"txn\0" + transactional id``     ``TransactionRecord``: a Kafka
               ``+ b"\0"``                         transactional producer and its
                                                   transaction (core/streams/
                                                   transactions.py)
               ``b"half\0" + id + b"\0"``          ``HalfRecord``: a half message
                                                   not yet settled (core/halves.py)
               ``b"halfgroup\0" + group``          ``HalfGroupRecord``: a producer
               ``+ b"\0"``                         group's check-back settings
               ``b"halfdone\0" + id + b"\0"``      ``HalfOutcome``: a settled half
                                                   message's outcome, kept a day
offsets        ``b"offset\0" + group + b"\0"``     ``CommittedOffset``
               ``+ topic + b"\0" + partition``     (consumer-group commits;
               (partition: uint32 big-endian)      see ``group_offset_key``)
queues         ``b"qentry\0" + vhost + b"\0"``      fixed-width entry (see
               ``+ queue + b"\0" + seq``           ``queue_store.pack_entry``):
               (seq: uint64 big-endian)            one unsettled message of a
                                                   queue (core/queues/queue.py)
               ``b"qdeliv\0" + vhost + b"\0"``      uint64 big-endian: the highest
               ``+ queue + b"\0"``                 seq delivered (queues whose
                                                   entries are not rewritten per
                                                   delivery; see queue_store)
               ``b"qmark\0" + topic + b"\0"``      uint64 big-endian: every record
               ``+ partition``                     of the partition below this
               (partition: uint32 big-endian)      offset has its queue entries
                                                   and timers written in this
                                                   batch or an earlier one
                                                   (``journal_mark_key``)
timers         ``b"timer\0" + due ms + id``        ``TimerRecord``: a retry or a
               (uint64, uint64 big-endian; the     delayed message due then
               id unique for ever: reserved in     (core/queues/timers.py)
               blocks, ``TIMER_IDS_KEY``)
sessions       ``b"mqtt\0" + client id + b"\0"``  ``MqttSessionRecord``: an MQTT
               (``session_key``)                   session that outlives its
                                                   connection (gateway/mqtt/room.py)
producers      ``b"producer\0" + topic + b"\0"``   ``ProducerRecord`` (idempotent
               ``+ partition + producer id``        producer's sequences; see
               (uint32, uint64 big-endian)          ``producer_key``)
               ``b"producer_end\0" + topic``        ``ProducerSnapshotEnd``
               ``+ b"\0" + partition``
=============  ==================================  ==============================

Key rules (every key added later follows them):

1. A key starts with a record-type tag, ASCII then ``\0``: ``TOPIC_PREFIX`` is
   ``b"topic\0"``. Because the tag ends in ``\0``, no tag is a prefix of another
   (``topic\0`` vs ``topics\0``), so two record types never share a key or a scan.
2. Text components are UTF-8 followed by a ``\0`` terminator, and ``\0`` is refused
   inside them (``ValueError``). A terminator that cannot occur in the text makes the
   encoding injective even when components are concatenated (``("ab", "c")`` and
   ``("a", "bc")`` differ), keeps prefix scans from leaking into neighbours (topic
   ``a`` is ``topic\0a\0``, which is not a prefix of ``topic\0ab\0``), and, unlike a
   length prefix, keeps byte order equal to name order, so scans come out sorted by
   name. Topic names cannot hold ``\0`` anyway (``topic_config._TOPIC_RE``).
3. Integers are fixed-width big-endian unsigned, so byte order is numeric order and
   time-ordered scans (due timers, expired leases) are prefix scans. A time-first key
   always ends with a unique id after the time, so two timers due at the same
   millisecond never share a key (RocketMQ issue 10276).

Theory of operation
===================

Writes go through one ``rocksdict.Rdict`` per column family (raw mode: bytes in,
bytes out, no pickling). ``batch()`` collects puts and deletes across column families
in one ``rocksdict.WriteBatch`` and commits it with one ``Rdict.write`` on a clean
exit: every logical change that touches several keys is atomic. ``sync=True`` sets
``WriteOptions.sync``: the WAL is fsynced before the call returns.

rocksdict pitfalls handled here (rocksdict 0.3.29):
- column-family Rdicts, column-family handles and live iterators each keep the
  database (and its LOCK file) open after ``Rdict.close()``: ``close()`` closes the
  family Rdicts and drops the handles; ``scan_prefix`` raises ``DbClosedError``
  once the store is closed (a scan left suspended still pins the LOCK until dropped);
- ``ReadOptions.set_iterate_lower_bound`` actually sets the UPPER bound, so scans
  seek with ``from_key`` and bound with ``set_iterate_upper_bound`` only;
- an iterator reads its upper bound from the bytes its ``ReadOptions`` holds, without
  owning them: drop the ReadOptions first and the bound is freed memory (scans stop
  early or run on). ``scan_prefix`` keeps both alive for the iterator's whole life;
- opening with ``column_families`` must name every family on disk, so families
  unknown to this version (written by a newer one) are opened too, and left alone.
"""

from __future__ import annotations

import gc
import logging
import os
import struct as _struct
from pathlib import Path
from types import TracebackType
from typing import Iterable, Iterator, TypeVar

from google.protobuf.message import Message as ProtoMessage
from rocksdict import (
    ColumnFamily,
    DbClosedError,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from .errors import StorageError

log = logging.getLogger(__name__)

RECOVER_MIN_FREE = 4 << 20  # free bytes a reopen after a failed write waits for

__all__ = [
    "CF_METADATA",
    "CF_OFFSETS",
    "CF_PRODUCERS",
    "CF_QUEUES",
    "CF_SESSIONS",
    "CF_TIMERS",
    "COLUMN_FAMILIES",
    "TOPIC_PREFIX",
    "DbClosedError",
    "StateBatch",
    "StateStore",
    "topic_key",
]

M = TypeVar("M", bound=ProtoMessage)

# One constant per column family; every module names its family by these.
CF_METADATA = "metadata"  # topics, definitions, users, vhosts, permissions, pop groups, retained messages
CF_OFFSETS = "offsets"  # consumer groups' committed offsets
CF_QUEUES = "queues"  # queue entries, delivered marks and the journal's marks
CF_TIMERS = "timers"  # retries and delayed messages by due time
CF_SESSIONS = "sessions"  # MQTT sessions that outlive their connection
CF_PRODUCERS = "producers"  # idempotent producers' sequence state

COLUMN_FAMILIES: tuple[str, ...] = (CF_METADATA, CF_OFFSETS, CF_QUEUES, CF_TIMERS, CF_SESSIONS, CF_PRODUCERS)

TOPIC_PREFIX = b"topic\x00"


def _text(component: str) -> bytes:
    """One text component of a key: UTF-8 then the ``\\0`` terminator (rule 2)."""
    if "\x00" in component:
        raise ValueError(f"key component may not contain NUL: {component!r}")
    return component.encode("utf-8") + b"\x00"


def topic_key(name: str) -> bytes:
    """metadata CF: the key of topic ``name``'s ``TopicRecord``."""
    return TOPIC_PREFIX + _text(name)


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


def _raw_options() -> Options:
    return Options(raw_mode=True)


def _write_options(sync: bool) -> WriteOptions:
    opts = WriteOptions()
    opts.sync = sync
    return opts


_ASYNC = _write_options(False)
_SYNC = _write_options(True)


class StateStore:
    """RocksDB state: ``get``/``put``/``delete``/``scan_prefix`` per column family,
    ``batch()`` for atomic multi-key changes. Keys and values are bytes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._closed = False
        # the write error RocksDB stopped at (it refuses every write after one, until
        # reopened: ``recover``); None while writes work
        self.failed: StorageError | None = None
        self.failures = 0  # writes refused since the start
        self.recoveries = 0  # reopened after a failure
        self._open()

    def _open(self) -> None:
        names = list(COLUMN_FAMILIES)
        if (self.path / "CURRENT").exists():  # existing database: open every family on disk
            names += [n for n in Rdict.list_cf(str(self.path)) if n not in names and n != "default"]
        opts = _raw_options()
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        db = Rdict(str(self.path), opts, column_families={n: _raw_options() for n in names})
        self._db: Rdict | None = db
        self._cfs: dict[str, Rdict] = {n: db.get_column_family(n) for n in COLUMN_FAMILIES}
        self._handles: dict[str, ColumnFamily] = {
            n: db.get_column_family_handle(n) for n in COLUMN_FAMILIES
        }

    # -- write failures ------------------------------------------------------------------
    #
    # Theory of operation. RocksDB answers a failed write (a full disk, an I/O error) by
    # refusing every later write with the same error, even once the cause is gone; it
    # has a ``Resume`` for that, which rocksdict does not expose. So the first failed
    # write marks the store failed (``failed``) and raises StorageError; writes are
    # then refused at once, without asking RocksDB, until ``recover()`` closes the
    # database and opens it again, which replays its write-ahead log (a batch whose
    # write "failed" may be found there: callers write it again, so every batch must be
    # one that may be applied twice). Reads work throughout.

    def _failed_write(self, e: Exception) -> StorageError:
        self.failures += 1
        if self.failed is None:
            log.error("state store write failed, writes are refused until it is reopened: %s", e)
            self.failed = StorageError(f"state store write failed: {e}")
        return self._refusal()

    def flush_memtables(self) -> None:
        """Write the memtables out to SST files in the background (not waited for), so
        the memory they hold goes back; for a store that has been quiet a while."""
        for rdict in self._cfs.values():
            try:
                rdict.flush(False)
            except Exception as e:  # noqa: BLE001 - a failed store refuses it too
                log.debug("memtable flush not started: %s", e)
                return

    def memtable_bytes(self) -> int:
        """Memory RocksDB holds in memtables, every column family (its biggest share)."""
        total = 0
        for rdict in self._cfs.values():
            try:
                total += rdict.property_int_value("rocksdb.size-all-mem-tables") or 0
            except Exception:  # noqa: BLE001 - a failed or closed store
                return total
        return total

    def _refusal(self) -> StorageError:
        """A new error for each refused write (one instance raised again and again
        would carry every traceback it went through)."""
        return StorageError(str(self.failed))

    @property
    def closed(self) -> bool:
        """Closed: nothing can be read or written any more."""
        return self._closed

    def recover(self) -> bool:
        """After a failed write: close the database and open it again (True: writes
        work again; False: the open failed, as it does while the disk is still full)."""
        if self.failed is None:
            return True
        if self._closed:
            return False
        try:
            st = os.statvfs(self.path)
            if st.f_bavail * st.f_frsize < RECOVER_MIN_FREE:
                return False  # still full: opening would fail, and leave no database to read
        except OSError:
            return False
        self._release()
        try:
            self._open()
        except Exception as e:  # noqa: BLE001 - RocksDB raises plain Exception
            log.warning("state store still failing, not reopened: %s", e)
            return False
        log.warning("state store reopened after a failed write (%s); writes resume", self.failed)
        self.failed = None
        self.recoveries += 1
        return True

    def _release(self) -> None:
        """Drop the database's handles, ignoring what a failed database says on close."""
        self._handles = {}
        for rdict in self._cfs.values():
            try:
                rdict.close()
            except Exception:  # noqa: BLE001
                pass
        self._cfs = {}
        db, self._db = self._db, None
        if db is not None:
            try:
                db.cancel_all_background(True)
                db.close()
            except Exception as e:  # noqa: BLE001
                log.debug("closing the failed state store: %s", e)
            del db
            gc.collect()  # the last reference holds RocksDB's LOCK until collected

    def _cf(self, cf: str) -> Rdict:
        try:
            return self._cfs[cf]
        except KeyError:
            if self._db is None and self.failed is not None:
                raise self._refusal() from None  # failed, and not open again yet
            raise KeyError(
                f"unknown column family {cf!r}; known: {', '.join(COLUMN_FAMILIES)}"
            ) from None

    def get(self, cf: str, key: bytes) -> bytes | None:
        value: bytes | None = self._cf(cf).get(key)
        return value

    def get_msg(self, cf: str, key: bytes, msg_type: type[M]) -> M | None:
        """The protobuf stored at ``key``, or None (DecodeError if it does not parse)."""
        raw: bytes | None = self._cf(cf).get(key)
        if raw is None:
            return None
        return msg_type.FromString(raw)

    def put(self, cf: str, key: bytes, value: bytes | ProtoMessage, *, sync: bool = False) -> None:
        if isinstance(value, ProtoMessage):
            value = value.SerializeToString(deterministic=True)
        if self.failed is not None:
            raise self._refusal()
        try:
            self._cf(cf).put(key, value, _SYNC if sync else _ASYNC)
        except (KeyError, DbClosedError):
            raise
        except Exception as e:  # noqa: BLE001 - RocksDB raises plain Exception
            raise self._failed_write(e) from None

    def delete(self, cf: str, key: bytes, *, sync: bool = False) -> None:
        if self.failed is not None:
            raise self._refusal()
        try:
            self._cf(cf).delete(key, _SYNC if sync else _ASYNC)
        except (KeyError, DbClosedError):
            raise
        except Exception as e:  # noqa: BLE001
            raise self._failed_write(e) from None

    def scan_prefix(self, cf: str, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every ``(key, value)`` whose key starts with ``prefix``, in key order.

        The iterator holds a RocksDB iterator (an implicit snapshot) until it is
        exhausted or dropped; after ``close()`` it raises ``DbClosedError``."""
        return self._scan(self._cf(cf), prefix)

    def scan_range(self, cf: str, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every ``(key, value)`` with ``start <= key < end``, in key order (as
        ``scan_prefix``)."""
        return self._scan(self._cf(cf), start, end)

    def _scan(self, rdict: Rdict, prefix: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        # rocksdict's iterator points into the upper-bound bytes that ReadOptions
        # holds: both must outlive the iterator, so they live in this frame.
        if end is None:
            end = _prefix_end(prefix)
        read_opts = ReadOptions()
        if end is not None:
            read_opts.set_iterate_upper_bound(end)
        items = rdict.items(from_key=prefix if prefix else None, read_opt=read_opts)
        while not self._closed:
            item = next(items, None)
            if item is None:
                return
            yield item
        raise DbClosedError("state store closed during scan")

    def batch(self, *, sync: bool = False) -> StateBatch:
        """``with store.batch() as b: b.put(...); b.delete(...)``: one atomic write."""
        if self._closed:
            raise DbClosedError("state store is closed")
        return StateBatch(self, sync)

    def _commit(self, wb: WriteBatch, sync: bool) -> None:
        if self._closed:
            raise DbClosedError("state store is closed")
        if self.failed is not None or self._db is None:
            raise self._refusal() if self.failed is not None else DbClosedError("state store is closed")
        try:
            self._db.write(wb, _SYNC if sync else _ASYNC)
        except Exception as e:  # noqa: BLE001 - RocksDB raises plain Exception
            raise self._failed_write(e) from None

    def close(self) -> None:
        """Flush and release the database (idempotent). StorageError if it could not
        be flushed (a failed store: what it holds is in its write-ahead log)."""
        if self._closed:
            return
        self._closed = True
        if self.failed is not None:
            self._release()
            raise self._refusal()
        self._handles.clear()  # handles pin the DB (and its LOCK) until dropped
        try:
            for rdict in self._cfs.values():
                rdict.close()
            if self._db is not None:
                self._db.close()
        except Exception as e:  # noqa: BLE001 - RocksDB raises plain Exception
            self._release()
            raise self._failed_write(e) from None

    def __enter__(self) -> StateStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class StateBatch:
    """Puts and deletes across column families, committed as ONE RocksDB WriteBatch
    when the ``with`` block exits cleanly, discarded when it raises."""

    __slots__ = ("_store", "_sync", "_wb")

    def __init__(self, store: StateStore, sync: bool) -> None:
        self._store = store
        self._sync = sync
        self._wb: WriteBatch | None = WriteBatch(raw_mode=True)

    def _handle(self, cf: str) -> ColumnFamily:
        try:
            return self._store._handles[cf]
        except KeyError:
            self._store._cf(cf)  # unknown name: KeyError listing the known ones
            raise DbClosedError("state store is closed") from None

    def _batch(self) -> WriteBatch:
        if self._wb is None:
            raise RuntimeError("this StateBatch was already committed or discarded")
        return self._wb

    def put(self, cf: str, key: bytes, value: bytes | ProtoMessage) -> None:
        if isinstance(value, ProtoMessage):
            value = value.SerializeToString(deterministic=True)
        self._batch().put(key, value, self._handle(cf))

    def delete(self, cf: str, key: bytes) -> None:
        self._batch().delete(key, self._handle(cf))

    def put_many(self, cf: str, items: Iterable[tuple[bytes, bytes]]) -> None:
        """``put`` of many raw values into one column family (a hot path's commit)."""
        put, handle = self._batch().put, self._handle(cf)
        for key, value in items:
            put(key, value, handle)

    def delete_many(self, cf: str, keys: Iterable[bytes]) -> None:
        delete, handle = self._batch().delete, self._handle(cf)
        for key in keys:
            delete(key, handle)

    def __len__(self) -> int:
        return 0 if self._wb is None else len(self._wb)

    def __enter__(self) -> StateBatch:
        self._batch()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        wb, self._wb = self._wb, None
        if exc_type is None and wb is not None and len(wb):
            self._store._commit(wb, self._sync)


# -- offsets CF: consumer-group committed offsets (logbus.core.streams.groups) ---------------

OFFSET_PREFIX = b"offset\x00"
_PARTITION = _struct.Struct(">I")


def group_offsets_prefix(group: str) -> bytes:
    """offsets CF: the prefix of every committed offset of ``group`` (sorted by topic,
    then partition number)."""
    return OFFSET_PREFIX + _text(group)


def group_offset_key(group: str, topic: str, partition: int) -> bytes:
    """offsets CF: the key of ``group``'s ``CommittedOffset`` for ``(topic, partition)``."""
    return group_offsets_prefix(group) + _text(topic) + _PARTITION.pack(partition)


def parse_group_offset_key(key: bytes) -> tuple[str, str, int]:
    """``(group, topic, partition)`` of a ``group_offset_key`` (ValueError if it is not one)."""
    if not key.startswith(OFFSET_PREFIX) or len(key) < len(OFFSET_PREFIX) + 2 + _PARTITION.size:
        raise ValueError(f"not a group offset key: {key!r}")
    body, tail = key[len(OFFSET_PREFIX) : -_PARTITION.size], key[-_PARTITION.size :]
    parts = body.split(b"\x00")
    if len(parts) != 3 or parts[2] != b"":
        raise ValueError(f"not a group offset key: {key!r}")
    (partition,) = _PARTITION.unpack(tail)
    return parts[0].decode("utf-8"), parts[1].decode("utf-8"), partition


# -- producers CF: idempotent producers' sequence state (logbus.core.streams.producers) ------------

PRODUCER_PREFIX = b"producer\x00"
PRODUCER_END_PREFIX = b"producer_end\x00"
_PRODUCER_ID = _struct.Struct(">Q")


def producers_prefix(topic: str, partition: int | None = None) -> bytes:
    """producers CF: the prefix of the ``ProducerRecord`` keys of a topic, or of one
    of its partitions."""
    prefix = PRODUCER_PREFIX + _text(topic)
    return prefix if partition is None else prefix + _PARTITION.pack(partition)


def producer_key(topic: str, partition: int, producer_id: int) -> bytes:
    """producers CF: the key of one producer's ``ProducerRecord`` in a partition."""
    return producers_prefix(topic, partition) + _PRODUCER_ID.pack(producer_id)


def producer_id_of_key(key: bytes) -> int:
    (pid,) = _PRODUCER_ID.unpack(key[-_PRODUCER_ID.size :])
    return int(pid)


def producer_end_prefix(topic: str) -> bytes:
    return PRODUCER_END_PREFIX + _text(topic)


def producer_end_key(topic: str, partition: int) -> bytes:
    """producers CF: the key of a partition's ``ProducerSnapshotEnd``."""
    return producer_end_prefix(topic) + _PARTITION.pack(partition)


PRODUCER_IDS_KEY = b"producer_ids\x00"  # metadata CF: uint64, first producer id not reserved


def pack_uint64(value: int) -> bytes:
    return _PRODUCER_ID.pack(value)


def unpack_uint64(raw: bytes) -> int:
    return int(_PRODUCER_ID.unpack(raw)[0])


# -- queues CF: queue entries (logbus.core.queues.journal) ---------------------------------

QUEUE_ENTRY_PREFIX = b"qentry\x00"
_SEQ = _struct.Struct(">Q")


def queue_entries_prefix(vhost: str, queue: str) -> bytes:
    """queues CF: the prefix of every entry of one queue, in seq order."""
    return QUEUE_ENTRY_PREFIX + _text(vhost) + _text(queue)


def queue_entry_key(vhost: str, queue: str, seq: int) -> bytes:
    return queue_entries_prefix(vhost, queue) + _SEQ.pack(seq)


def queue_entry_seq(key: bytes) -> int:
    return int(_SEQ.unpack(key[-_SEQ.size :])[0])


QUEUE_DELIVERED_PREFIX = b"qdeliv\x00"


def queue_delivered_key(vhost: str, queue: str) -> bytes:
    """queues CF: the delivered mark of one queue (``queue_store``)."""
    return QUEUE_DELIVERED_PREFIX + _text(vhost) + _text(queue)


JOURNAL_MARK_PREFIX = b"qmark\x00"


def journal_marks_prefix(topic: str) -> bytes:
    """queues CF: the prefix of the journal marks of a topic's partitions."""
    return JOURNAL_MARK_PREFIX + _text(topic)


def journal_mark_key(topic: str, partition: int) -> bytes:
    """queues CF: the journal's mark of one partition (``queues/journal.py``): records
    below it had their queue entries and timers written in this batch or before."""
    return journal_marks_prefix(topic) + _PARTITION.pack(partition)


def journal_mark_fields(key: bytes) -> tuple[str, int]:
    """(topic, partition) of a ``journal_mark_key``."""
    body = key[len(JOURNAL_MARK_PREFIX) :]
    return body[: -_PARTITION.size - 1].decode(), int(_PARTITION.unpack(body[-_PARTITION.size :])[0])


# -- timers CF: retries and delayed messages by due time (logbus.core.queues.timers) --------

TIMER_PREFIX = b"timer\x00"
TIMER_IDS_KEY = b"timer_ids\x00"  # metadata CF: uint64, first timer id not reserved
_TIMER = _struct.Struct(">QQ")
TIMER_KEY_SIZE = len(TIMER_PREFIX) + _TIMER.size


def timer_key(due_ms: int, timer_id: int) -> bytes:
    """timers CF: the key of one timer; byte order is due-time order (rule 3)."""
    return TIMER_PREFIX + _TIMER.pack(due_ms, timer_id)


def timer_key_fields(key: bytes) -> tuple[int, int]:
    """``(due_ms, timer_id)`` of a timer key."""
    due, tid = _TIMER.unpack_from(key, len(TIMER_PREFIX))
    return int(due), int(tid)


# -- metadata CF: pop groups (logbus.core.queues.pop) -------------------------------------

POP_GROUP_PREFIX = b"popgroup\x00"


def pop_group_key(group: str, topic: str) -> bytes:
    return POP_GROUP_PREFIX + _text(group) + _text(topic)


RETAINED_PREFIX = b"retained\x00"


def retained_key(topic: str) -> bytes:
    """The retained message of an MQTT topic name (core/retained.py)."""
    return RETAINED_PREFIX + _text(topic)


def retained_topic(key: bytes) -> str:
    return key[len(RETAINED_PREFIX) : -1].decode()


TRANSACTION_PREFIX = b"txn\x00"


def transaction_key(transactional_id: str) -> bytes:
    """A Kafka transactional producer's ``TransactionRecord`` (core/streams/transactions.py)."""
    return TRANSACTION_PREFIX + _text(transactional_id)


def transactional_id_of_key(key: bytes) -> str:
    return key[len(TRANSACTION_PREFIX) : -1].decode()


HALF_PREFIX = b"half\x00"
HALF_GROUP_PREFIX = b"halfgroup\x00"
HALF_OUTCOME_PREFIX = b"halfdone\x00"


def half_key(half_id: str) -> bytes:
    """A half message not yet settled: its ``HalfRecord`` (core/halves.py)."""
    return HALF_PREFIX + _text(half_id)


def half_id_of_key(key: bytes) -> str:
    return key[len(HALF_PREFIX) : -1].decode()


def half_group_key(group: str) -> bytes:
    """A producer group's check-back settings: ``HalfGroupRecord``."""
    return HALF_GROUP_PREFIX + _text(group)


def half_group_of_key(key: bytes) -> str:
    return key[len(HALF_GROUP_PREFIX) : -1].decode()


def half_outcome_key(half_id: str) -> bytes:
    """What became of a settled half message: ``HalfOutcome``, kept a day."""
    return HALF_OUTCOME_PREFIX + _text(half_id)


def session_prefix(protocol: str) -> bytes:
    """sessions CF: every stored session of a protocol (``"mqtt"``)."""
    return _text(protocol)


def session_key(protocol: str, client_id: str) -> bytes:
    """sessions CF: a protocol's session that outlives its connection, by client id (an
    MQTT session's ``MqttSessionRecord``: ``b"mqtt\0" + client id + b"\0"``)."""
    return _text(protocol) + _text(client_id)


# -- metadata CF: AMQP definitions (logbus.core.definitions) -----------------------------

EXCHANGE_PREFIX = b"exchange\x00"
QUEUE_PREFIX = b"queue\x00"
BINDING_PREFIX = b"binding\x00"


def exchange_key(vhost: str, name: str) -> bytes:
    return EXCHANGE_PREFIX + _text(vhost) + _text(name)


def queue_key(vhost: str, name: str) -> bytes:
    return QUEUE_PREFIX + _text(vhost) + _text(name)


def binding_key(vhost: str, source: str, kind: str, destination: str, routing_key: str, digest: bytes) -> bytes:
    return BINDING_PREFIX + _text(vhost) + _text(source) + _text(kind) + _text(destination) + _text(routing_key) + digest


def definitions_prefix(prefix: bytes, vhost: str) -> bytes:
    """One vhost's records of a kind (``EXCHANGE_PREFIX``, ``QUEUE_PREFIX``, ...)."""
    return prefix + _text(vhost)


def definition_vhost(prefix: bytes, key: bytes) -> str:
    """The vhost of a definitions key made with ``prefix`` (an exchange's, queue's or
    binding's)."""
    return key[len(prefix):].split(b"\x00", 1)[0].decode()


def vhost_definitions_prefixes(vhost: str) -> list[tuple[str, bytes]]:
    """``(column family, prefix)`` of every record that belongs to one vhost: its
    exchanges, queues, bindings and permissions (metadata) and its queue entries and
    delivered marks (queues). Deleting a vhost deletes every key under these prefixes."""
    return [(CF_METADATA, definitions_prefix(p, vhost))
            for p in (EXCHANGE_PREFIX, QUEUE_PREFIX, BINDING_PREFIX, PERMISSION_PREFIX,
                      TOPIC_PERMISSION_PREFIX)] + [
        (CF_QUEUES, QUEUE_ENTRY_PREFIX + _text(vhost)), (CF_QUEUES, QUEUE_DELIVERED_PREFIX + _text(vhost))]


# -- metadata CF: users, vhosts, permissions (logbus.core.access.auth) -----------------------------

USER_PREFIX = b"user\x00"
VHOST_PREFIX = b"vhost\x00"
PERMISSION_PREFIX = b"permission\x00"
TOPIC_PERMISSION_PREFIX = b"topicperm\x00"
AUTH_SEEDED_KEY = b"auth_seeded\x00"


def user_key(name: str) -> bytes:
    return USER_PREFIX + _text(name)


def vhost_key(name: str) -> bytes:
    return VHOST_PREFIX + _text(name)


def permission_key(vhost: str, user: str) -> bytes:
    return PERMISSION_PREFIX + _text(vhost) + _text(user)


def topic_permission_key(vhost: str, user: str, exchange: str) -> bytes:
    return TOPIC_PERMISSION_PREFIX + _text(vhost) + _text(user) + _text(exchange)
