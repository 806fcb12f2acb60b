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

The state is rebuilt from the log itself (batch headers carry producer id, epoch and
base sequence), so after a crash it matches exactly what the log holds.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable

from .log.batch import BatchInfo

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
            # unknown here: a new producer starts at 0 (Kafka also accepts other
            # sequences once its state has expired; we keep state for every producer seen)
            return Verdict(APPEND if first_seq == 0 else OUT_OF_ORDER)
        if epoch < st.epoch:
            return Verdict(FENCED)
        if epoch > st.epoch:
            return Verdict(APPEND if first_seq == 0 else OUT_OF_ORDER)
        for f, l, base in st.recent:
            if f == first_seq and l == last:
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

    def rebuild(self, batches: Iterable[BatchInfo]) -> None:
        """Replay the headers of the batches in a log, oldest first."""
        for info in batches:
            if info.producer_id >= 0 and info.base_sequence >= 0:
                self.record(info.producer_id, info.producer_epoch, info.base_sequence,
                            info.last_offset_delta + 1, info.base_offset)
