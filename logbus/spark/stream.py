"""Streaming reads (``spark.readStream.format("logbus")``): micro-batches over offsets.

Theory of operation. An offset is the Kafka source's JSON, ``{"topic": {"0": 42}}``:
for each partition, the next offset to read. Spark checkpoints it, so a restarted
query continues exactly where its last committed micro-batch ended; together with an
idempotent sink (Parquet with a checkpoint) every record lands once.

- ``initialOffset``: the starting spec (default ``latest``) resolved now.
- ``latestOffset(start, limit)``: every partition's readable end (the last complete,
  CRC-valid batch; ``PartitionFiles.end`` remembers where it stopped, so each trigger
  only scans the new bytes). Partitions that appeared since ``start`` (a subscription
  pattern matching a new topic, a topic that grew) start at earliest. A partition that
  is gone, or whose end went back below ``start`` (its topic was deleted and created
  again), is data loss (``failOnDataLoss``: fail, or drop it / read the new log from
  its start); like Spark's Kafka source, a recreated topic that already holds as many
  records as were read is not told apart from the old one. With
  ``maxOffsetsPerTrigger`` (Spark's ``ReadMaxRows``) the limit is shared among the
  partitions in proportion to their backlog, and at least one record is admitted when
  any is waiting, so a query always advances.
- ``prepareForTriggerAvailableNow``: records the ends now; later ``latestOffset``
  calls never go past them (``trigger(availableNow=True)`` stops there).
- ``partitions(start, end)``: one input partition per partition with new records,
  split by ``maxRecordsPerPartition``/``minPartitions``; read like a batch.

Feature detection: pyspark 4.0 and 4.1 call ``latestOffset()`` without arguments and
have no read limits (``maxOffsetsPerTrigger`` is refused there); 4.2+ pass ``start`` and
``limit`` and know ``SupportsTriggerAvailableNow`` (older versions run availableNow
queries through Spark's own wrapper, as one batch up to the ends at start).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from .logfiles import DataDir, DataLoss
from .options import OptionError, Options, TopicPartition, resolve_start
from .plan import OffsetRange, read_range, split
from .source import RangePartition

try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
    _MIXINS: tuple[type, ...] = (SupportsTriggerAvailableNow,)
except ImportError:  # pyspark 4.0, 4.1
    ADMISSION_CONTROL = False
    _MIXINS = ()

log = logging.getLogger(__name__)
Offsets = dict[TopicPartition, int]


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, part), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(part)] = off
    return out


def from_json(value: dict[str, Any] | None) -> Offsets:
    return {(t, int(p)): int(o) for t, parts in (value or {}).items() for p, o in parts.items()}


def share_limit(backlog: dict[TopicPartition, int], limit: int) -> dict[TopicPartition, int]:
    """How many records each partition may advance: ``limit`` shared in proportion to
    ``backlog`` (largest remainders first), never more than a partition has, and at
    least one record in total when any is waiting."""
    total = sum(backlog.values())
    if total <= limit:
        return dict(backlog)
    limit = max(1, limit)
    grant = {tp: b * limit // total for tp, b in backlog.items()}
    left = limit - sum(grant.values())
    by_remainder = sorted(backlog, key=lambda tp: (-(backlog[tp] * limit % total), tp))
    for tp in by_remainder:
        if left <= 0:
            break
        if grant[tp] < backlog[tp]:
            grant[tp] += 1
            left -= 1
    return grant


class LogbusStreamReader(DataSourceStreamReader, *_MIXINS):  # type: ignore[misc]
    def __init__(self, opts: Options, names: tuple[str, ...]) -> None:
        if opts.max_offsets_per_trigger and not ADMISSION_CONTROL:
            raise OptionError("maxOffsetsPerTrigger needs pyspark >= 4.2 (read limits for Python sources)")
        self.opts = opts
        self.names = names
        self._data: DataDir | None = None
        self._files: dict[TopicPartition, Any] = {}
        self._target: Offsets | None = None  # Trigger.AvailableNow: never read past these

    # -- helpers ---------------------------------------------------------------------------

    @property
    def data(self) -> DataDir:
        if self._data is None:
            self._data = DataDir(self.opts.path)
        return self._data

    def _pf(self, tp: TopicPartition) -> Any:
        pf = self._files.get(tp)
        if pf is None:
            pf = self._files[tp] = self.data.partition(*tp)
        return pf

    def _ends(self) -> Offsets:
        """Each partition's readable end (read_committed: its stable end)."""
        ends = {tp: self._pf(tp).end() for tp in self.opts.topic_partitions(self.data)}
        if self.opts.committed:
            ends = {tp: self._pf(tp).stable_end(end) for tp, end in ends.items()}
        return ends

    # -- the DataSourceStreamReader API ----------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        offsets = {}
        for tp, end in self._ends().items():
            offsets[tp] = resolve_start(self.opts.start, tp, self._pf(tp), end, self.opts, "latest")
        return to_json(offsets)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        ends = self._ends()
        if self._target is not None:
            ends = {tp: min(e, self._target.get(tp, e)) for tp, e in ends.items() if tp in self._target}
        if start is None or limit is None or (ADMISSION_CONTROL and isinstance(limit, ReadAllAvailable)):
            return to_json(ends)
        begin = from_json(start)
        # a partition new to the stream, or whose end went back below ``start`` (its topic
        # was recreated), is read from its log start; a partition that is gone is left
        # out. ``partitions`` reports the last two as data loss.
        firsts = {}
        for tp, end in ends.items():
            lo = begin.get(tp)
            firsts[tp] = lo if lo is not None and lo <= end else self._pf(tp).start()
        backlog = {tp: max(0, ends[tp] - firsts[tp]) for tp in ends}
        if isinstance(limit, ReadMinRows) and sum(backlog.values()) < limit.min_rows:
            return start
        if not isinstance(limit, ReadMaxRows):
            return to_json(ends)
        grant = share_limit(backlog, limit.max_rows)
        return to_json({tp: firsts[tp] + grant[tp] if backlog[tp] else ends[tp] for tp in ends})

    def getDefaultReadLimit(self) -> Any:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json(self._ends())

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._ends()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = from_json(start), from_json(end)
        ranges, new = [], set()
        for tp in set(begin) - set(finish):
            self._data_loss(f"partition {tp[0]}/{tp[1]} is gone (topic deleted?)")
        for tp, hi in sorted(finish.items()):
            lo = begin.get(tp)
            if lo is not None and hi < lo:
                self._data_loss(f"offsets of {tp[0]}/{tp[1]} went back from {lo} to {hi} (topic recreated?)")
                lo = None  # read the new log from its start
            if lo is None:
                lo = 0
                new.add(tp)
            if hi > lo:
                ranges.append(OffsetRange(tp[0], tp[1], lo, hi))
        parts = split(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        return [RangePartition(r, earliest=(r.topic, r.partition) in new) for r in parts]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, RangePartition):
            return iter(())
        return read_range(self.opts.location, partition.range, self.names, self.opts.fail_on_data_loss,
                          earliest=partition.earliest, keep=self.opts.message_filter(), committed=self.opts.committed)

    def commit(self, end: dict[str, Any]) -> None:
        pass

    def stop(self) -> None:
        self._files.clear()

    def _data_loss(self, message: str) -> None:
        if self.opts.fail_on_data_loss:
            raise DataLoss(f"{message}. Set failOnDataLoss=false to go on without those records.")
        log.warning("%s; going on (failOnDataLoss=false)", message)
