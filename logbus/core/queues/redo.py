"""What a power loss may have taken from the queue journal, made again from the log at start.

Theory of operation (docs/decisions/0045). A confirm waits for the sync of the log's
records only. The queue entries and timers a publish made are written to the state
store without a sync, in the journal's batch of the turn (``journal.py``), and that
batch also carries each appended partition's *mark*: every record below it has had its
entries and timers written in this batch or an earlier one. RocksDB writes its
write-ahead log in order and a batch whole, so what a power loss leaves of the journal
is a prefix of its batches: the records at or past a partition's mark are exactly
those whose entries and timers may be gone. After a kill -9 the unsynced batches are in
the page cache and survive, but the journal writes at most once per ``COMMIT_INTERVAL``
(decision 0057): the marks are up to two intervals behind, and those records are routed
again (an entry settled meanwhile comes back: at least once).

``redo`` runs once at start, after the vhosts, their queues and the pop groups are
loaded and before anything serves:

- a mark past the log's end (the records after it never reached the disk) comes back to
  the end, and the entries and timers pointing past it go (their offsets will be given
  again); a mark of a topic that is gone goes;
- every record from a partition's mark to its end is routed again, as its publish
  routed it (``Pipeline.route_again``: through the exchange its envelope names, a delayed
  one to its timer; a Kafka or HTTP one as ``route_record``, a deliver-at one to its
  timer), and handed to the pop groups reading the topic, skipping each queue that holds
  an entry for it already and every record that has a pending DELAY timer (its publish's
  batch survived: the timer routes it). Which queues hold what in the ranges is one pass
  over the loaded entries, and one scan of the timers, only when a range is not empty;
- the marks move to the log's end, with the entries and timers made, in one synced batch.

A partition without a mark has nothing to redo: its first mark is written with a synced
batch (``QueueStore.commit``), and a data directory of an earlier version synced every
journal batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..envelope_pb2 import Envelope
from ..log import batch as B
from ..log.manager import LogManager
from ..message import Message
from ..state import CF_TIMERS, TIMER_PREFIX
from ..state_pb2 import TimerRecord
from ..pipeline import Pipeline, decode_appended, deliver_at
from .journal import QueueStore, forget_from
from .pop import PopGroups

if TYPE_CHECKING:
    from ..vhost import VHost

log = logging.getLogger(__name__)

READ_BYTES = 1 << 20  # read from the log at a time
Position = tuple[str, int, int]  # topic, partition, offset


@dataclass
class Redone:
    records: int = 0  # records read past the marks
    timers: int = 0  # DELAY timers made again
    entries: int = 0  # queue entries made again (pop groups' included)
    clamped: list[tuple[str, int, int]] = field(default_factory=list)  # (topic, partition, log end)


def redo(log_manager: LogManager, queue_store: QueueStore, vhosts: Mapping[str, VHost], pop: PopGroups,
         pipeline: Pipeline, clock: Callable[[], int]) -> Redone:
    """Route again what the journal's marks say may be lost (see the module's text)."""
    out = Redone()
    store = queue_store.store
    if store is None:
        return out
    marks = queue_store.load_marks()
    moved: dict[tuple[str, int], int | None] = {}
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    for (topic, partition), mark in sorted(marks.items()):
        t = log_manager.topics.get(topic)
        if t is None or partition >= len(t.partitions):
            moved[(topic, partition)] = None
            continue
        p = t.partitions[partition]
        end = p.next_offset
        if mark > end:
            forget_from(store, topic, partition, end)
            moved[(topic, partition)] = end
            out.clamped.append((topic, partition, end))
        elif mark < end:
            start = max(mark, p.log_start_offset)
            moved[(topic, partition)] = end
            if start < end and _read_by_queues(topic, vhosts, pop):
                ranges[(topic, partition)] = (start, end)
    if ranges:
        held = _held(vhosts, pop, ranges)
        timed = _timed(queue_store, ranges)
        before = _entry_count(vhosts, pop)
        for (topic, partition), (start, end) in ranges.items():
            readers = [v for v in vhosts.values() if v.backs(topic)]
            for offset, message in _records(log_manager, topic, partition, start, end):
                out.records += 1
                at = (topic, partition, offset)
                if at in timed:
                    continue
                out.timers += _route(topic, partition, offset, message, readers, pop, pipeline, held, at)
        out.entries = _entry_count(vhosts, pop) - before
    if moved:
        queue_store.set_marks(moved, sync=True)
    if out.records or out.clamped:
        log.warning("recovery: %d records past the queue journal's marks routed again (%d queue entries and %d "
                    "timers made again, the rest were kept); marks past the log's end brought back: %s",
                    out.records, out.entries, out.timers,
                    ", ".join(f"{t}/{p} to {e}" for t, p, e in out.clamped) or "none")
    return out


def _route(topic: str, partition: int, offset: int, message: Message, readers: list[VHost], pop: PopGroups,
           pipeline: Pipeline, held: dict[Position, set[tuple[str, str]]], at: Position) -> int:
    """One record again; 1 when it became a timer."""
    env = message.envelope
    ts = message.timestamp or 0
    queues = held.get(at, ())
    if not env.exchange and env.protocol != _AMQP:  # a Kafka or HTTP record: its deliver-at first
        due = deliver_at(message, ts)
        if due:
            pipeline.delay(topic, partition, offset, due)
            return 1
    timer = False
    for vhost in readers:
        mine = {q for v, q in queues if v == vhost.name}
        timer |= pipeline.route_again(vhost, topic, partition, offset, message, mine)
    if timer:
        return 1
    if pop.watches(topic) and not any(v == "" for v, _ in queues):
        pop.appended(topic, partition, offset, message)
    return 0


_AMQP = Envelope.AMQP


def _read_by_queues(topic: str, vhosts: Mapping[str, VHost], pop: PopGroups) -> bool:
    return pop.watches(topic) or any(v.backs(topic) for v in vhosts.values())


def _held(vhosts: Mapping[str, VHost], pop: PopGroups,
          ranges: dict[tuple[str, int], tuple[int, int]]) -> dict[Position, set[tuple[str, str]]]:
    """(topic, partition, offset) in the ranges -> the (vhost, queue) holding an entry for
    it ("" for a pop group's queue)."""
    out: dict[Position, set[tuple[str, str]]] = {}
    services = [(v.name, v.service) for v in vhosts.values()] + [("", pop.service)]
    for owner, service in services:
        for name, qs in service.queues.items():
            for e in qs.queue.entries.values():
                r = ranges.get((e.topic, e.partition))
                if r is not None and r[0] <= e.offset < r[1]:
                    out.setdefault((e.topic, e.partition, e.offset), set()).add((owner, name))
    return out


def _timed(queue_store: QueueStore, ranges: dict[tuple[str, int], tuple[int, int]]) -> set[Position]:
    """The positions in the ranges a stored DELAY timer points at."""
    out: set[Position] = set()
    assert queue_store.store is not None
    queue_store.commit()
    for _, raw in queue_store.store.scan_prefix(CF_TIMERS, TIMER_PREFIX):
        rec = TimerRecord.FromString(raw)
        r = ranges.get((rec.topic, rec.partition))
        if rec.kind == TimerRecord.DELAY and r is not None and r[0] <= rec.offset < r[1]:
            out.add((rec.topic, rec.partition, rec.offset))
    return out


def _entry_count(vhosts: Mapping[str, VHost], pop: PopGroups) -> int:
    services = [v.service for v in vhosts.values()] + [pop.service]
    return sum(len(qs.queue.entries) for s in services for qs in s.queues.values())


def _records(log_manager: LogManager, topic: str, partition: int, start: int,
             end: int) -> Iterator[tuple[int, Message]]:
    """(offset, Message) of the records from ``start`` to ``end``, transactional batches
    left out (a produce does not route them either)."""
    p = log_manager.partition(topic, partition)
    offset = start
    while offset < end:
        res = p.read(offset, READ_BYTES, deleted=True, written=True)
        data = res.data
        if not data:
            return
        infos = B.split_validate(data, len(data))
        for at, message in decode_appended(infos[0].base_offset, data, infos):
            if start <= at < end:
                yield at, message
        offset = max(res.next_offset, offset + 1)
