"""Kafka transactions (KIP-98): the transaction coordinator, one per broker, the coordinator
of every ``transactional.id``.

Theory of operation. A transactional producer is a ``Transaction`` record per
transactional id (its producer id, epoch, timeout, state, the partitions and consumer
groups of its current transaction, the offsets it commits with it), stored (synced) in the
state store at every step before the step is answered, but two: Complete* is written
unsynced, as the queue journal is (one a power loss takes back is completed again at
start, its records routed again, at least once), and so is EndTxn's Prepare* when the
transaction has partitions: their markers, durable before EndTxn is answered, record the
outcome then (at a start an Ongoing transaction with a marker of its producer past its
first offset is completed as that marker says; the steps before were synced, so nothing
the outcome needs is lost with it):

    InitProducerId   Empty / Complete*: epoch + 1 (a new producer id past 32767); an
                     Ongoing transaction of the previous epoch is aborted first (fencing
                     the zombie: its markers carry the new epoch)
    AddPartitions    -> Ongoing; each partition's first offset is the log end then (the
                     transaction's records are all at or after it)
    AddOffsets       the group joins the transaction; TxnOffsetCommit holds its offsets
    EndTxn           -> PrepareCommit / PrepareAbort (stored), then a control batch (the
                     marker) in every partition, and once they are durable: committed,
                     the records are routed to the queues that read their topics
                     (``route_committed``: they were not when produced) and the offsets
                     applied to the groups; aborted, each partition's aborted-transaction
                     index gets an entry (log/txnindex.py). Then -> Complete* (stored).

A transactional batch is appended when produced, but not routed; ``check_produce`` refuses
one whose producer has no open transaction with that partition. The last stable offset of a
partition is the first offset of its earliest open transaction (the log end at AddPartitions,
the first record once one is produced; at a start, found in the log from the stored one),
or the high watermark: a read_committed reader stops there. A transaction in Prepare* at a start (a crash mid-commit) is completed then;
an Ongoing one past its timeout is aborted under a new epoch (the producer is fenced).

Results are ``Code`` values (group_model.py, Kafka's error names); nothing here knows the
wire protocol.
"""

from __future__ import annotations

import enum
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.task import LoopingCall

from ..errors import LogbusError, StorageError
from ..log import LogManager
from ..log import format as F
from ..log.partition import Partition
from ..metrics import Metrics
from ..state import CF_METADATA, TRANSACTION_PREFIX, StateStore, transaction_key, transactional_id_of_key
from ..state_pb2 import TransactionRecord
from .group_model import Code, OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

MAX_EPOCH = 32767  # int16: past it, a producer gets a new id
MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms (15 minutes)
# how often open transactions are checked against their timeouts (Kafka's
# transaction.abort.timed.out.transaction.cleanup.interval.ms is 10 s): one pass over the
# transactional ids a second
CHECK_INTERVAL_S = 1.0

# route_committed(topic, partition, producer_id, start, end): a committed transaction's
# records of ``producer_id`` in [start, end) go to the queues that read the topic
RouteCommitted = Callable[[str, int, int, int, int], object]


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclass(slots=True)
class Transaction:
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    started_ms: int = 0
    # (topic, partition) -> the transaction's first offset there
    partitions: dict[tuple[str, int], int] = field(default_factory=dict)
    groups: set[str] = field(default_factory=set)
    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)
    produced: set[tuple[str, int]] = field(default_factory=set)  # partitions with records of it
    completing: Deferred[Code] | None = None  # the markers being written, while Prepare*

    def record(self) -> TransactionRecord:
        rec = TransactionRecord(producer_id=self.producer_id, epoch=self.epoch, timeout_ms=self.timeout_ms,
                                state=self.state.value, started_ms=self.started_ms, groups=sorted(self.groups))
        for (topic, index), first in self.partitions.items():
            rec.partitions.add(topic=topic, partition=index, first_offset=first)
        for group, offsets in self.offsets.items():
            for (topic, index), om in offsets.items():
                o = rec.offsets.add(group=group, topic=topic, partition=index, offset=om.offset,
                                    leader_epoch=om.leader_epoch)
                if om.metadata is not None:
                    o.metadata = om.metadata
        return rec

    @classmethod
    def from_record(cls, transactional_id: str, rec: TransactionRecord) -> Transaction:
        t = cls(transactional_id, rec.producer_id, rec.epoch, rec.timeout_ms, TxnState(rec.state), rec.started_ms)
        t.partitions = {(p.topic, p.partition): p.first_offset for p in rec.partitions}
        t.groups = set(rec.groups)
        for o in rec.offsets:
            metadata = o.metadata if o.HasField("metadata") else None
            t.offsets.setdefault(o.group, {})[(o.topic, o.partition)] = OffsetAndMetadata(
                o.offset, metadata, o.leader_epoch)
        return t


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    """See the module's header. ``open`` loads the stored transactions, ``start`` (the log's
    topics open) finds where the open ones wrote, completes those caught in Prepare* and
    starts the timeout checks."""

    def __init__(self, reactor: Any, metrics: Metrics | None = None, *, clock: Callable[[], int] = _now_ms) -> None:
        self.reactor = reactor
        self.clock = clock
        metrics = metrics or Metrics()
        self._committed = metrics.counter("logbus_kafka_transactions_committed",
                                          "Kafka transactions committed (their markers durable, records routed)")
        self._aborted = metrics.counter("logbus_kafka_transactions_aborted",
                                        "Kafka transactions aborted (by their producer, a new one, or a time-out)")
        self._timed_out = metrics.counter("logbus_kafka_transactions_timed_out",
                                          "Kafka transactions aborted because they were open past their timeout")
        self.store: StateStore | None = None
        self.log: LogManager | None = None
        self.txns: dict[str, Transaction] = {}
        self._by_pid: dict[int, Transaction] = {}
        # (topic, partition) -> {producer id: first offset} of the open transactions there
        self._open: dict[tuple[str, int], dict[int, int]] = {}
        self._new_producer_id: Callable[[], int] = _no_ids
        self._route: RouteCommitted = _no_route
        self._apply_offsets: Callable[[str, Mapping[TopicPartition, OffsetAndMetadata]], object] = _no_groups
        self._checks: LoopingCall | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def open(self, store: StateStore, log_manager: LogManager, new_producer_id: Callable[[], int]) -> int:
        """Load the stored transactions; how many."""
        self.store, self.log, self._new_producer_id = store, log_manager, new_producer_id
        for key, raw in store.scan_prefix(CF_METADATA, TRANSACTION_PREFIX):
            rec = TransactionRecord()
            rec.ParseFromString(raw)
            t = Transaction.from_record(transactional_id_of_key(key), rec)
            self._index(t)
        return len(self.txns)

    def start(self, route_committed: RouteCommitted,
              apply_offsets: Callable[[str, Mapping[TopicPartition, OffsetAndMetadata]], object]) -> None:
        self._route, self._apply_offsets = route_committed, apply_offsets
        for t in self.txns.values():
            if t.state is TxnState.ONGOING or t.state in PREPARED:
                self._reopen(t)
        for t in list(self.txns.values()):
            if t.state in PREPARED:
                log.info("transaction %r was in %s at the last stop: completing it", t.transactional_id,
                         t.state.value)
                self._complete(t)
        self._checks = LoopingCall(self.check)
        self._checks.clock = self.reactor
        self._checks.start(CHECK_INTERVAL_S, now=False)

    def stop(self) -> None:
        if self._checks is not None and self._checks.running:
            self._checks.stop()
        self._route = _no_route

    def _index(self, t: Transaction) -> None:
        """``t`` known by its id and producer id."""
        old = self.txns.get(t.transactional_id)
        if old is not None:
            self._by_pid.pop(old.producer_id, None)
        self.txns[t.transactional_id] = t
        self._by_pid[t.producer_id] = t

    def _reopen(self, t: Transaction) -> None:
        """At a start (the log open): the partitions where ``t``'s open transaction wrote
        hold back their last stable offsets from its first record there. An Ongoing one
        whose marker is in a partition already (its unsynced Prepare* lost, the marker
        durable) is Prepare* again, as the marker says, under the marker's epoch."""
        outcome: tuple[int, int] | None = None
        for tp, first in t.partitions.items():
            found, marker = self._scan(tp, t.producer_id, first)
            if found is not None:
                t.partitions[tp] = found
                self._open.setdefault(tp, {})[t.producer_id] = found
                t.produced.add(tp)
            outcome = outcome or marker
        if outcome is not None and t.state is TxnState.ONGOING:
            kind, epoch = outcome
            t.state = TxnState.PREPARE_COMMIT if kind == F.CONTROL_COMMIT else TxnState.PREPARE_ABORT
            t.epoch = max(t.epoch, epoch)
            log.info("transaction %r: its %s marker is in the log, its Prepare state was not stored: completing it",
                     t.transactional_id, "commit" if kind == F.CONTROL_COMMIT else "abort")

    def _scan(self, tp: tuple[str, int], producer_id: int, start: int) -> tuple[int | None, tuple[int, int] | None]:
        """In the partition from ``start`` (the log end when it was added): the offset of
        ``producer_id``'s first transactional batch (None when it wrote none there: the
        stored first offset may be that earlier one), and (type, epoch) of its first
        marker there (None: no marker yet)."""
        assert self.log is not None
        try:
            p = self.log.partition(*tp)
        except LogbusError:
            return None, None
        first = None
        for info in p.batch_headers(start):
            if info.base_offset < start or info.producer_id != producer_id \
                    or not info.attributes & F.ATTR_TRANSACTIONAL:
                continue
            if not info.attributes & F.ATTR_CONTROL:
                first = info.base_offset if first is None else first
                continue
            kind = F.control_type(p.read(info.base_offset, F.CONTROL_READ, written=True).data, info._replace(position=0))
            if kind is not None:
                return first, (kind, info.producer_epoch)
        return first, None

    def _store(self, t: Transaction, *, sync: bool = True) -> None:
        assert self.store is not None
        self.store.put(CF_METADATA, transaction_key(t.transactional_id), t.record(), sync=sync)

    def _set(self, t: Transaction, state: TxnState, *, sync: bool = True) -> Code:
        """Move ``t`` to ``state`` and store it; COORDINATOR_NOT_AVAILABLE (and ``t`` as it
        was) when the store refuses."""
        before = t.state
        t.state = state
        try:
            self._store(t, sync=sync)
        except StorageError as e:
            t.state = before
            log.warning("transaction %r: %s not stored: %s", t.transactional_id, state.value, e)
            return Code.COORDINATOR_NOT_AVAILABLE
        return Code.NONE

    # -- the producer's requests ----------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                         epoch: int = -1) -> Deferred[tuple[Code, int, int]]:
        """(code, producer id, epoch) for a transactional producer starting (see the header)."""
        if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
            return succeed((Code.INVALID_TRANSACTION_TIMEOUT, -1, -1))
        t = self.txns.get(transactional_id)
        if t is None:
            try:
                pid = self._new_producer_id()
            except StorageError:
                return succeed((Code.COORDINATOR_NOT_AVAILABLE, -1, -1))
            t = Transaction(transactional_id, pid, 0, timeout_ms)
            try:
                self._store(t)
            except StorageError:
                return succeed((Code.COORDINATOR_NOT_AVAILABLE, -1, -1))
            self._index(t)
            return succeed((Code.NONE, t.producer_id, t.epoch))
        if producer_id >= 0 and (producer_id != t.producer_id or epoch != t.epoch):
            return succeed((Code.PRODUCER_FENCED, -1, -1))  # KIP-360: only the current producer may bump
        if t.state in PREPARED:
            return succeed((Code.CONCURRENT_TRANSACTIONS, -1, -1))
        if t.state is TxnState.ONGOING:  # the previous producer's: aborted under a new epoch first
            done = self._fence_and_abort(t)

            def aborted(c: Code) -> tuple[Code, int, int]:
                return self._next_epoch(t, timeout_ms) if c is Code.NONE else (c, -1, -1)

            return done.addCallback(aborted)
        return succeed(self._next_epoch(t, timeout_ms))

    def _next_epoch(self, t: Transaction, timeout_ms: int) -> tuple[Code, int, int]:
        before = (t.producer_id, t.epoch, t.timeout_ms, t.state)
        if t.epoch >= MAX_EPOCH - 1:
            try:
                pid = self._new_producer_id()
            except StorageError:
                return Code.COORDINATOR_NOT_AVAILABLE, -1, -1
            self._by_pid.pop(t.producer_id, None)
            t.producer_id, t.epoch = pid, 0
            self._by_pid[pid] = t
        else:
            t.epoch += 1
        t.timeout_ms, t.state = timeout_ms, TxnState.EMPTY
        try:
            self._store(t)
        except StorageError:
            self._by_pid.pop(t.producer_id, None)
            t.producer_id, t.epoch, t.timeout_ms, t.state = before
            self._by_pid[t.producer_id] = t
            return Code.COORDINATOR_NOT_AVAILABLE, -1, -1
        return Code.NONE, t.producer_id, t.epoch

    def _current(self, transactional_id: str, producer_id: int, epoch: int) -> tuple[Transaction | None, Code]:
        t = self.txns.get(transactional_id)
        if t is None or t.producer_id != producer_id:
            return None, Code.INVALID_PRODUCER_ID_MAPPING
        if epoch != t.epoch:
            return None, Code.PRODUCER_FENCED
        if t.state in PREPARED:
            return None, Code.CONCURRENT_TRANSACTIONS
        return t, Code.NONE

    def _begin(self, t: Transaction) -> None:
        if t.state is not TxnState.ONGOING:
            t.state = TxnState.ONGOING
            t.started_ms = self.clock()
            t.partitions, t.groups, t.offsets, t.produced = {}, set(), {}, set()

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Iterable[tuple[str, int]]) -> tuple[Code, dict[tuple[str, int], Code]]:
        """(the request's code, per partition) for AddPartitionsToTxn. A partition that does
        not exist fails the request (the others: OPERATION_NOT_ATTEMPTED, Kafka's)."""
        t, code = self._current(transactional_id, producer_id, epoch)
        wanted = list(dict.fromkeys(partitions))
        if t is None:
            return code, {tp: code for tp in wanted}
        assert self.log is not None
        found: dict[tuple[str, int], Partition] = {}
        for topic, index in wanted:
            try:
                found[(topic, index)] = self.log.partition(topic, index)
            except LogbusError:
                pass
        if len(found) < len(wanted):
            return Code.UNKNOWN_TOPIC_OR_PARTITION, {
                tp: Code.NONE if tp in found else Code.UNKNOWN_TOPIC_OR_PARTITION for tp in wanted}
        new = [tp for tp in wanted if tp not in t.partitions or t.state is not TxnState.ONGOING]
        if not new:
            return Code.NONE, {tp: Code.NONE for tp in wanted}
        before = (t.state, t.started_ms, dict(t.partitions), set(t.groups), dict(t.offsets))
        self._begin(t)
        for tp in new:
            t.partitions[tp] = found[tp].next_offset
        try:
            self._store(t)
        except StorageError as e:
            t.state, t.started_ms, t.partitions, t.groups, t.offsets = before
            log.warning("transaction %r: partitions not added, the state store refused: %s", transactional_id, e)
            return Code.COORDINATOR_NOT_AVAILABLE, {tp: Code.COORDINATOR_NOT_AVAILABLE for tp in wanted}
        return Code.NONE, {tp: Code.NONE for tp in wanted}

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group: str) -> Code:
        """AddOffsetsToTxn: ``group``'s offsets will be committed with the transaction."""
        t, code = self._current(transactional_id, producer_id, epoch)
        if t is None:
            return code
        if t.state is TxnState.ONGOING and group in t.groups:
            return Code.NONE
        before = (t.state, t.started_ms, dict(t.partitions), set(t.groups), dict(t.offsets))
        self._begin(t)
        t.groups.add(group)
        try:
            self._store(t)
        except StorageError:
            t.state, t.started_ms, t.partitions, t.groups, t.offsets = before
            return Code.COORDINATOR_NOT_AVAILABLE
        return Code.NONE

    def commit_offsets(self, transactional_id: str, group: str, producer_id: int, epoch: int,
                       offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> Code:
        """TxnOffsetCommit: held with the transaction, applied to ``group`` when it commits."""
        t, code = self._current(transactional_id, producer_id, epoch)
        if t is None:
            return code
        if t.state is not TxnState.ONGOING or group not in t.groups:
            return Code.INVALID_TXN_STATE
        held = t.offsets.setdefault(group, {})
        before = dict(held)
        held.update(offsets)
        try:
            self._store(t)
        except StorageError:
            t.offsets[group] = before
            return Code.COORDINATOR_NOT_AVAILABLE
        return Code.NONE

    def end(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> Deferred[Code]:
        """EndTxn: fires with the code once the transaction is complete (its markers
        durable, its records routed or its abort indexed)."""
        t = self.txns.get(transactional_id)
        if t is None or t.producer_id != producer_id:
            return succeed(Code.INVALID_PRODUCER_ID_MAPPING)
        if epoch != t.epoch:
            return succeed(Code.PRODUCER_FENCED)
        wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if t.state in PREPARED:
            return succeed(Code.CONCURRENT_TRANSACTIONS if t.state is wanted else Code.INVALID_TXN_STATE)
        if t.state is not TxnState.ONGOING:
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            return succeed(Code.NONE if t.state is done else Code.INVALID_TXN_STATE)
        # unsynced when there are markers to write: they record the outcome (see the header)
        code = self._set(t, wanted, sync=not t.partitions)
        if code is not Code.NONE:
            return succeed(code)
        return self._complete(t)

    def _fence_and_abort(self, t: Transaction) -> Deferred[Code]:
        """Abort ``t``'s open transaction under a new epoch (its producer is fenced; at the
        last epoch under the same one: the next producer gets a new id). Fires with the
        code once complete."""
        bump = 1 if t.epoch < MAX_EPOCH else 0
        t.epoch += bump
        code = self._set(t, TxnState.PREPARE_ABORT)
        if code is not Code.NONE:
            t.epoch -= bump
            return succeed(code)
        return self._complete(t)

    # -- completing: markers, then routing or the aborted index -------------------------------------

    def _complete(self, t: Transaction) -> Deferred[Code]:
        if t.completing is not None:
            return _chain(t.completing)
        commit = t.state is TxnState.PREPARE_COMMIT
        assert self.log is not None
        now = self.clock()
        writes: list[Deferred[Any]] = []
        parts: list[tuple[Partition, int]] = []
        for (topic, index), first in t.partitions.items():
            try:
                p = self.log.partition(topic, index)
            except LogbusError:  # deleted since: nothing of it to mark
                continue
            parts.append((p, first))
            writes.append(p.append_control(F.control_batch(t.producer_id, t.epoch, commit, now)))
        done: Deferred[Code] = Deferred()
        t.completing = done

        def marked(results: list[tuple[bool, Any]]) -> None:
            failed = [r for ok, r in results if not ok]
            if failed:
                log.warning("transaction %r: writing its markers failed, tried again at the next check: %s",
                            t.transactional_id, failed[0].getErrorMessage())
                t.completing = None
                done.callback(Code.COORDINATOR_NOT_AVAILABLE)
                return
            try:
                self._settle(t, commit, [(p, first, r.base_offset) for (p, first), (_, r) in zip(parts, results)])
            except (OSError, StorageError) as e:
                log.warning("transaction %r: completing it failed, tried again at the next check: %s",
                            t.transactional_id, e)
                t.completing = None
                done.callback(Code.COORDINATOR_NOT_AVAILABLE)
                return
            t.completing = None
            done.callback(Code.NONE)

        DeferredList(writes, consumeErrors=True).addCallback(marked)
        return _chain(done)

    def _settle(self, t: Transaction, commit: bool, marked: list[tuple[Partition, int, int]]) -> None:
        pid = t.producer_id
        for p, first, marker in marked:
            if commit:
                self._route(p.topic, p.index, pid, first, marker)
            else:
                p.aborted.add(F.AbortedTxn(pid, first, marker, self.last_stable_offset(p, without=pid)))
        if commit:
            for group, offsets in t.offsets.items():
                self._apply_offsets(group, offsets)
        (self._committed if commit else self._aborted).inc()
        t.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        try:  # not synced: the outcome was durable at Prepare*; one a power loss takes is done again
            self._store(t, sync=False)
        except StorageError:
            t.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            raise
        for p, _, _ in marked:
            opened = self._open.get((p.topic, p.index))
            if opened is not None:
                opened.pop(pid, None)
                if not opened:
                    del self._open[(p.topic, p.index)]
            p.notify_readers()  # the last stable offset moved
        t.partitions, t.groups, t.offsets, t.produced = {}, set(), {}, set()

    def check(self, now_ms: int | None = None) -> int:
        """Abort the transactions open past their timeout (under a new epoch), and try
        again to complete those whose completion failed; how many were started."""
        now = self.clock() if now_ms is None else now_ms
        started = 0
        for t in list(self.txns.values()):
            if t.completing is not None:
                continue
            if t.state in PREPARED:
                self._complete(t)
                started += 1
            elif t.state is TxnState.ONGOING and now - t.started_ms > t.timeout_ms:
                log.info("transaction %r open for more than %d ms: aborted, its producer fenced",
                         t.transactional_id, t.timeout_ms)
                self._fence_and_abort(t)
                if t.state is not TxnState.ONGOING:  # PrepareAbort stored: under way (else tried again)
                    self._timed_out.inc()
                    started += 1
        return started

    # -- what the log's readers and producers ask -----------------------------------------------

    def check_produce(self, topic: str, index: int, producer_id: int, epoch: int) -> Code:
        """NONE when ``producer_id`` may append transactional batches to the partition now."""
        t = self._by_pid.get(producer_id)
        if t is None:
            return Code.INVALID_PRODUCER_ID_MAPPING
        if epoch < t.epoch:
            return Code.INVALID_PRODUCER_EPOCH
        if t.state is not TxnState.ONGOING or (topic, index) not in t.partitions:
            return Code.INVALID_TXN_STATE
        return Code.NONE

    def produced(self, topic: str, index: int, producer_id: int, base_offset: int) -> None:
        """A transactional batch of ``producer_id`` was appended at ``base_offset``: the
        transaction's first there sets the partition's last stable offset (and is stored,
        unsynced: a crash leaves the log end at AddPartitions, which is before it)."""
        t = self._by_pid.get(producer_id)
        tp = (topic, index)
        if t is None or tp not in t.partitions or tp in t.produced:
            return
        t.produced.add(tp)
        t.partitions[tp] = base_offset
        self._open.setdefault(tp, {})[producer_id] = base_offset
        try:
            self._store(t, sync=False)
        except StorageError:
            pass  # the stored first offset stays the earlier one

    def last_stable_offset(self, p: Partition, without: int = -1) -> int:
        """The partition's last stable offset: read_committed readers stop there
        (``without``: as it is once that producer's transaction is complete)."""
        opened = self._open.get((p.topic, p.index))
        return min((first for pid, first in opened.items() if pid != without), default=p.high_watermark) \
            if opened else p.high_watermark

    def aborted(self, p: Partition, start: int, end: int) -> list[F.AbortedTxn]:
        return p.aborted.between(start, end)

    def unstable(self, group: str, tp: TopicPartition) -> bool:
        """Whether an open transaction holds an offset of ``group`` for ``tp``
        (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT)."""
        return any(t.state is TxnState.ONGOING or t.state in PREPARED
                   for t in self.txns.values() if tp in t.offsets.get(group, ()))

    def forget_topic(self, topic: str) -> None:
        for tp in [tp for tp in self._open if tp[0] == topic]:
            del self._open[tp]


def _chain(d: Deferred[Code]) -> Deferred[Code]:
    """A Deferred of its own that fires with ``d``'s result (``d`` keeps its own)."""
    out: Deferred[Code] = Deferred()

    def fire(code: Code) -> Code:
        out.callback(code)
        return code

    d.addCallback(fire)
    return out


def _no_ids() -> int:
    raise RuntimeError("the transaction coordinator is not open")


def _no_route(topic: str, index: int, producer_id: int, start: int, end: int) -> None:
    raise RuntimeError("the transaction coordinator is not started")


def _no_groups(group: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
    raise RuntimeError("the transaction coordinator is not started")
