"""Producer idempotence: per partition, the sequence state of every producer id.

Theory of operation (Kafka's rules). An idempotent producer stamps each batch with its
producer id, epoch and the sequence number of its first record; sequences count records
per (producer, partition) from 0. For each partition we keep, per producer, its epoch,
the last sequence appended and the last few batches (first and last sequence, base
offset). A batch is then:

- a **duplicate** when its sequences equal one of those recent batches: acknowledged
  again with the original base offset, not appended (a retry after a lost response);
- **next** when its first sequence follows the last one (or is 0 under a new epoch):
  appended, and remembered;
- **out of order** otherwise (OUT_OF_ORDER_SEQUENCE_NUMBER), and **fenced** when its
  epoch is older than the producer's current one (INVALID_PRODUCER_EPOCH).

**Persistence** (``ProducerRegistry``). When an idempotent batch becomes durable, the
producer's state *as of that batch* is stored in RocksDB (CF ``producers``) together
with the partition's snapshot end: the offset after that batch. A partition's states
are loaded on first use from that snapshot, then the batch headers from the snapshot
end on are replayed (batch headers carry producer id, epoch and base sequence). So
after a crash the states match exactly what the log holds:

- a store write lost or failed only moves the replay start back;
- the stored state never runs ahead of the durable log (it is written after the batch
  is durable, and holds no later batch); a snapshot that claims offsets the log does
  not have (a log lost behind an unsynced store) is ignored and the whole log replayed,
  so a retry is never acknowledged with an offset that does not hold it.

**Expiry** (Kafka's ``producer.id.expiration.ms``, ``ProducerRegistry.expire``): a
producer that appended nothing to a partition for that long is forgotten there, in
memory and in the store. A producer with no state is taken at any sequence, as Kafka
does since 2.5: a producer idle past the expiry goes on without an error, though a
retry of a batch from before it would not be recognised as a duplicate.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from ..errors import StorageError
from ..log.batch import BatchInfo, now_ms
from ..state import CF_PRODUCERS, CF_METADATA, PRODUCER_IDS_KEY, pack_uint64, unpack_uint64, producer_end_key, producer_end_prefix, producer_id_of_key, producer_key, producers_prefix
from ..state_pb2 import ProducerRecord, ProducerSnapshotEnd, RecentBatch

if TYPE_CHECKING:
    from ..log.partition import Partition
    from ..state import StateStore

log = logging.getLogger(__name__)
PRODUCER_ID_BLOCK = 1000  # ids reserved per store write, as Kafka's controller hands out

RECENT_BATCHES = 5  # Kafka keeps the last 5 batches per producer and partition
NO_PRODUCER = -1
SEQUENCE_WRAP = 2**31  # sequences are int32 and wrap to 0

APPEND = "append"
DUPLICATE = "duplicate"
OUT_OF_ORDER = "out_of_order"
FENCED = "fenced"


@dataclass(slots=True)
class ProducerState:
    epoch: int
    last_seq: int
    recent: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=RECENT_BATCHES))
    last_ms: int = 0  # when its last batch was appended here (or its state loaded): epoch ms


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: str
    base_offset: int = -1  # for DUPLICATE: the offset the batch got the first time


class ProducerStates:
    """Sequence state of every idempotent producer of one partition."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerState] = {}

    def check(self, producer_id: int, epoch: int, first_seq: int, records: int) -> Verdict:
        """What to do with a batch of ``records`` records starting at ``first_seq``."""
        if producer_id < 0:
            return Verdict(APPEND)
        last = (first_seq + records - 1) % SEQUENCE_WRAP
        st = self.producers.get(producer_id)
        if st is None:
            # no state here: a new producer, or one whose state expired (``expire``): as
            # Kafka (since 2.5), any sequence is taken, since there is nothing to check it against
            return Verdict(APPEND)
        if epoch < st.epoch:
            return Verdict(FENCED)
        if epoch > st.epoch:
            return Verdict(APPEND if first_seq == 0 else OUT_OF_ORDER)
        for first, final, base in st.recent:
            if first == first_seq and final == last:
                return Verdict(DUPLICATE, base)
        if first_seq == (st.last_seq + 1) % SEQUENCE_WRAP:
            return Verdict(APPEND)
        return Verdict(OUT_OF_ORDER)

    def record(self, producer_id: int, epoch: int, first_seq: int, records: int, base_offset: int) -> None:
        """Remember a batch that was appended at ``base_offset``."""
        if producer_id < 0:
            return
        last = (first_seq + records - 1) % SEQUENCE_WRAP
        st = self.producers.get(producer_id)
        if st is None or epoch != st.epoch:
            st = self.producers[producer_id] = ProducerState(epoch, last)
        st.last_seq = last
        st.recent.append((first_seq, last, base_offset))
        st.last_ms = now_ms()

    def rebuild(self, batches: Iterable[BatchInfo]) -> None:
        """Replay the headers of the batches in a log, oldest first."""
        for info in batches:
            if info.producer_id >= 0 and info.base_sequence >= 0:
                self.record(info.producer_id, info.producer_epoch, info.base_sequence,
                            info.last_offset_delta + 1, info.base_offset)

    def to_record(self, producer_id: int) -> ProducerRecord:
        st = self.producers[producer_id]
        return ProducerRecord(
            epoch=st.epoch, last_sequence=st.last_seq,
            recent=[RecentBatch(first_sequence=f, last_sequence=z, base_offset=b) for f, z, b in st.recent],
        )

    def load_record(self, producer_id: int, rec: ProducerRecord) -> None:
        """A stored state; it counts as used now (the record has no time: a restart
        gives every producer the full expiration time again)."""
        st = self.producers[producer_id] = ProducerState(rec.epoch, rec.last_sequence, last_ms=now_ms())
        st.recent.extend((r.first_sequence, r.last_sequence, r.base_offset) for r in rec.recent)

    def expire(self, before_ms: int) -> list[int]:
        """Forget every producer whose last batch was appended before ``before_ms``;
        returns their ids."""
        gone = [pid for pid, st in self.producers.items() if st.last_ms < before_ms]
        for pid in gone:
            del self.producers[pid]
        return gone

    def max_offset(self) -> int:
        """The highest base offset remembered (-1: none)."""
        return max((b for st in self.producers.values() for _, _, b in st.recent), default=-1)


class ProducerRegistry:
    """The ``ProducerStates`` of every partition, loaded on first use and stored as
    batches become durable (module docstring)."""

    def __init__(self, store: StateStore | None) -> None:
        self.store = store
        self._states: dict[tuple[str, int], tuple[Partition, ProducerStates]] = {}
        self._next_id = self._id_limit = 0

    def new_producer_id(self) -> int:
        """A producer id never handed out before, by this data directory."""
        if self._next_id >= self._id_limit:
            start = 0
            if self.store is not None:
                raw = self.store.get(CF_METADATA, PRODUCER_IDS_KEY)
                start = unpack_uint64(raw) if raw is not None else 0
                self.store.put(CF_METADATA, PRODUCER_IDS_KEY, pack_uint64(start + PRODUCER_ID_BLOCK), sync=True)
            self._next_id, self._id_limit = max(start, self._next_id), start + PRODUCER_ID_BLOCK
        pid = self._next_id
        self._next_id += 1
        return pid

    def states(self, topic: str, p: Partition) -> ProducerStates:
        key = (topic, p.index)
        cached = self._states.get(key)
        if cached is not None and cached[0] is p:  # not a deleted and re-created topic
            return cached[1]
        states = self._load(topic, p)
        self._states[key] = (p, states)
        return states

    def _load(self, topic: str, p: Partition) -> ProducerStates:
        states = ProducerStates()
        start = 0
        if self.store is not None:
            end_rec = self.store.get_msg(CF_PRODUCERS, producer_end_key(topic, p.index), ProducerSnapshotEnd)
            if end_rec is not None:
                for k, v in self.store.scan_prefix(CF_PRODUCERS, producers_prefix(topic, p.index)):
                    states.load_record(producer_id_of_key(k), ProducerRecord.FromString(v))
                p.drain()
                if end_rec.offset > p.next_offset or states.max_offset() >= p.next_offset:
                    log.warning("%s/%d: stored producer states run past the log end %d; replaying the whole log",
                                topic, p.index, p.next_offset)
                    states = ProducerStates()
                else:
                    start = end_rec.offset
        states.rebuild(p.batch_headers(start))
        return states

    def snapshot(self, topic: str, p: Partition, producer_id: int) -> ProducerRecord | None:
        """The producer's state now, to store (``store_durable``) once the batch just
        recorded is durable; None when there is no store."""
        if self.store is None:
            return None
        return self.states(topic, p).to_record(producer_id)

    def store_durable(self, topic: str, partition: int, producer_id: int, rec: ProducerRecord | None, end: int) -> None:
        if self.store is None or rec is None:
            return
        try:
            with self.store.batch() as b:
                b.put(CF_PRODUCERS, producer_key(topic, partition, producer_id), rec)
                b.put(CF_PRODUCERS, producer_end_key(topic, partition), ProducerSnapshotEnd(offset=end))
        except StorageError as e:  # the log still has the batch: the next load replays it
            log.warning("producer %d state for %s/%d not stored (the log's batches rebuild it): %s",
                        producer_id, topic, partition, e)
        except Exception:
            log.exception("storing producer %d state for %s/%d failed", producer_id, topic, partition)

    def expire(self, max_age_ms: int, now: int | None = None) -> int:
        """Kafka's producer.id.expiration.ms: forget, here and in the store, the state of
        every producer that appended no batch to a partition for ``max_age_ms``; its next
        batch there is taken whatever its sequence (``ProducerStates.check``). Only the
        partitions loaded since the start are looked at (a stored state is loaded, and
        its time starts, on a partition's first idempotent produce). Returns how many
        (producer, partition) states were forgotten."""
        before = (now_ms() if now is None else now) - max_age_ms
        gone: list[bytes] = []
        for (topic, partition), (_, states) in self._states.items():
            for pid in states.expire(before):
                gone.append(producer_key(topic, partition, pid))
                log.info("producer %d on %s/%d: state expired (no batch for %d ms)", pid, topic, partition,
                         max_age_ms)
        if gone and self.store is not None:
            try:
                with self.store.batch() as b:
                    for key in gone:
                        b.delete(CF_PRODUCERS, key)
            except StorageError as e:  # kept in memory as forgotten; a restart loads them again, to expire later
                log.warning("%d expired producer states not deleted from the state store: %s", len(gone), e)
            except Exception:
                log.exception("deleting %d expired producer states failed", len(gone))
        return len(gone)

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's states, in memory and in the store."""
        for key in [k for k in self._states if k[0] == topic]:
            del self._states[key]
        if self.store is None:
            return
        with self.store.batch() as b:
            for prefix in (producers_prefix(topic), producer_end_prefix(topic)):
                for k, _ in self.store.scan_prefix(CF_PRODUCERS, prefix):
                    b.delete(CF_PRODUCERS, k)
