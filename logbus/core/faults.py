"""Storage faults the broker lives through without a restart, and what its health is.

Theory of operation (docs/operations.md says what an operator sees). Three faults
reach the disk's users:

- **A failed write** (a full disk, an I/O error on ``pwrite``): the partition loses
  what the write held and refuses appends until it can start a new segment; it tries
  again by itself (``log/partition.py``).
- **A failed state write** (RocksDB cannot write its log): the state store refuses
  writes from then on (``state.py``). The queue journal keeps its changes and the
  appends of that tick are refused, since their queue entries are not stored; session
  records keep theirs too (``sessions.py``), and the connections that needed them
  written are answered in their protocol's terms. ``check`` reopens the store once a
  second while there is space, and writes what was kept.
- **A failed sync** (EIO on ``fdatasync``): the partition goes offline until a restart.

In each case appends whose offsets were already given are refused after the fact.
``lost`` hears of them (the log's ``on_lost``) and removes the queue entries made for
them from every queue service before their publishers hear "no", so a refused publish
leaves no trace in any queue. ``reasons`` is what ``/healthz`` answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .errors import StorageError

if TYPE_CHECKING:
    from .log.manager import LogManager
    from .log.partition import Partition
    from .queues.journal import QueueStore
    from .queues.service import QueueService
    from .state import StateStore

log = logging.getLogger(__name__)


class StorageFaults:
    def __init__(self, services: Callable[[], Iterable[QueueService]]) -> None:
        self._services = services  # every queue service: the vhosts' and the pop groups'
        self.log: LogManager | None = None
        self.state: StateStore | None = None
        self.queue_store: QueueStore | None = None
        self.kept_writes: Sequence[Callable[[], object]] = ()  # what else keeps refused writes
        self.appends_lost = 0  # offsets given to appends that were then refused
        self.entries_withdrawn = 0  # queue entries made for them, removed

    def attach(self, log_manager: LogManager, state: StateStore, queue_store: QueueStore,
               kept_writes: Sequence[Callable[[], object]] = ()) -> None:
        """``kept_writes``: besides the queue journal's commit, each call that writes what
        the store refused before (raising StorageError while it still cannot)."""
        self.log, self.state, self.queue_store = log_manager, state, queue_store
        self.kept_writes = kept_writes
        log_manager.before_write = queue_store.commit_due
        log_manager.on_lost = self.lost

    def lost(self, p: Partition, first: int, end: int, error: StorageError) -> None:
        """Appends at offsets ``first`` up to ``end`` of ``p`` were refused after their
        offsets were given: no queue keeps an entry for them."""
        self.appends_lost += end - first
        n = sum(s.withdraw(p.topic, p.index, first, end, error) for s in self._services())
        self.entries_withdrawn += n
        log.warning("appends to %s/%d at offsets %d..%d refused (%s); %d queue entries made for them removed",
                    p.topic, p.index, first, end - 1, error, n)

    def check(self) -> None:
        """Once a second: partitions whose write failed try again, a failed state store
        is reopened when it can be, and what the queue journal kept is written."""
        if self.log is not None:
            self.log.repair()
        state, journal = self.state, self.queue_store
        if state is None or journal is None or state.failed is None:
            return
        if state.recover():
            for write in (journal.commit, *self.kept_writes):
                try:
                    write()
                except StorageError as e:
                    log.warning("what the state store refused is still not written: %s", e)
                    return

    def reasons(self) -> list[str]:
        """What keeps the broker from taking writes now (empty: nothing)."""
        out = []
        if self.state is not None and self.state.failed is not None:
            out.append(f"state store: {self.state.failed}")
        if self.log is not None:
            out += [str(error) for _, _, error in self.log.failures()]
        return out


class FaultCollector:
    """The faults' counters and gauges, read at scrape time."""

    def __init__(self, faults: StorageFaults, services: Callable[[], Iterable[QueueService]]) -> None:
        self._faults = faults
        self._services = services

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        f = self._faults
        yield CounterMetricFamily("logbus_appends_lost", "Appends refused after their offsets were given "
                                  "(a failed write, state write or sync)", value=f.appends_lost)
        yield CounterMetricFamily("logbus_queue_entries_withdrawn", "Queue entries removed because their "
                                  "append was refused", value=f.entries_withdrawn)
        yield CounterMetricFamily("logbus_queue_records_gone", "Queue entries dropped because their record "
                                  "is gone (topic deleted, retention, recovery)",
                                  value=sum(s.records_gone for s in self._services()))
        state = f.state
        yield CounterMetricFamily("logbus_state_write_failures", "State store writes refused",
                                  value=0 if state is None else state.failures)
        qs = f.queue_store
        yield CounterMetricFamily("logbus_queue_journal_batches", "Batches of queue entries, timers and journal "
                                  "marks written to the state store (under load one per COMMIT_INTERVAL, 10 ms)",
                                  value=0 if qs is None else qs.commits)
        yield GaugeMetricFamily("logbus_state_store_failed", "1 while the state store refuses writes",
                                value=1.0 if state is not None and state.failed is not None else 0.0)
        yield GaugeMetricFamily("logbus_state_memtable_bytes", "Memory the state store holds in memtables",
                                value=0 if state is None or state.failed is not None else state.memtable_bytes())
        failed = GaugeMetricFamily("logbus_partition_failed", "1 while a partition refuses appends "
                                   "(offline: after a failed sync)", labels=["topic", "partition", "offline"])
        if f.log is not None:
            for topic, index, error in f.log.failures():
                offline = f.log.partition(topic, index).offline is not None
                failed.add_metric([topic, str(index), "true" if offline else "false"], 1.0)
        yield failed
