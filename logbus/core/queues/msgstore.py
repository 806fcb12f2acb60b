"""The messages behind queue entries: from memory while fresh, else from the log.

A queue entry points at a record (topic, partition, offset). Delivering it needs the
message itself. Most messages are consumed soon after they are published, so the
broker keeps each published message in memory, counted once however many queues it
was routed to, until the last of those queues settles it (``remember`` / ``release``).
The memory is bounded (``max_bytes``): past it, the oldest messages are dropped from
memory, and are read back from the log when their turn comes. A message counts its value
plus ``MESSAGE_OVERHEAD``, what the Message object, its envelope and headers and the
store's slot cost beside the value (measured: about 490 B with a small envelope and one
header), so the bound holds for small messages too: counting values alone, 256 MiB of
100-byte messages held over 1.4 GiB.

Reading from the log decodes the whole batch holding the offset. The decoded batches
sit in a small LRU cache, so a queue that is drained in order after a restart decodes
each batch once rather than once per message. Once the broker is quiet the cache goes
(``drop_batches``, from ``core/quiet.py``): 64 batches of small records are thousands of
objects nothing will read.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

from ..log import batch as B
from ..log.batch import Record
from ..log.manager import LogManager
from ..errors import LogbusError, RecordGone, RemoteUnavailable
from ..message import Message

Key = tuple[str, int, int]  # topic, partition, offset
WhenReady = Callable[[Callable[[], object]], None]
MESSAGE_OVERHEAD = 512  # bytes of memory a remembered message costs beside its value
# records in the decoded batches kept, at most (beside at most 64 batches): each is a
# few small objects, and a drain that churns many of them among the objects that outlive
# it leaves the allocator's arenas held (decision 0027)
CACHED_RECORDS = 8192


class MessageStore:
    def __init__(self, read_batch: Callable[[str, int, int], list[tuple[int, Record]]],
                 max_bytes: int = 256 << 20, cached_batches: int = 64, cached_records: int = CACHED_RECORDS,
                 remote: Callable[[str, int, int], WhenReady | None] | None = None) -> None:
        """``read_batch(topic, partition, offset)``: the (offset, record) pairs of the
        batch holding ``offset`` (the caller reads the log). ``remote(topic, partition,
        offset)``: None when that offset reads at once, else how to hear when it will
        (a remote segment being fetched: LogManager.remote_pending)."""
        self._read_batch = read_batch
        self.remote = remote
        self.max_bytes = max_bytes
        self._live: OrderedDict[Key, list] = OrderedDict()  # key -> [message, refs, size]
        self.live_bytes = 0
        self._batches: OrderedDict[tuple[str, int, int], dict[int, Record]] = OrderedDict()
        self._cached_batches = cached_batches
        self._cached_records = cached_records
        self._records = 0  # in the cached batches
        self.log_reads = 0  # batches decoded from the log (for metrics and tests)

    def remember(self, topic: str, partition: int, offset: int, message: Message, size: int, refs: int) -> None:
        """Keep ``message`` until ``refs`` releases (one per queue it was routed to)."""
        if refs <= 0:
            return
        size += MESSAGE_OVERHEAD
        self._live[(topic, partition, offset)] = [message, refs, size]
        self.live_bytes += size
        while self.live_bytes > self.max_bytes and self._live:
            _, (_, _, dropped) = self._live.popitem(last=False)
            self.live_bytes -= dropped

    def release(self, topic: str, partition: int, offset: int) -> None:
        """One queue settled its entry for this message."""
        key = (topic, partition, offset)
        item = self._live.get(key)
        if item is None:
            return
        item[1] -= 1
        if item[1] <= 0:
            del self._live[key]
            self.live_bytes -= item[2]

    def forget_topic(self, topic: str) -> None:
        """A deleted topic: what is kept of its records goes (its offsets will be given
        to new records if it is made again)."""
        for key in [k for k in self._live if k[0] == topic]:
            self.live_bytes -= self._live.pop(key)[2]
        for bkey in [k for k in self._batches if k[0] == topic]:
            self._records -= len(self._batches.pop(bkey))

    def drop_batches(self) -> int:
        """Forget the decoded batches (the next read decodes its batch again); returns
        how many there were."""
        n = len(self._batches)
        self._batches = OrderedDict()
        self._records = 0
        return n

    def pending(self, topic: str, partition: int, offset: int) -> WhenReady | None:
        """None when ``get`` would answer at once; else ``when_ready(callback)``, which
        calls ``callback()`` once (or when) it may (its record is being fetched)."""
        remote = self.remote
        if remote is None or (topic, partition, offset) in self._live:
            return None
        return remote(topic, partition, offset)

    def get(self, topic: str, partition: int, offset: int) -> Message:
        item = self._live.get((topic, partition, offset))
        if item is not None:
            msg: Message = item[0]
            return msg
        try:
            return Message.from_record(self._record(topic, partition, offset))
        except RemoteUnavailable:  # in remote storage, out of reach for now: not gone
            raise
        except (KeyError, LogbusError) as e:  # no such record, topic, partition or offset
            raise RecordGone(f"no record at offset {offset} of {topic}/{partition}: {e}") from None

    def _record(self, topic: str, partition: int, offset: int) -> Record:
        for bkey, records in reversed(self._batches.items()):
            if bkey[0] == topic and bkey[1] == partition and offset in records:
                self._batches.move_to_end(bkey)
                return records[offset]
        pairs = self._read_batch(topic, partition, offset)
        self.log_reads += 1
        records = dict(pairs)
        if offset not in records:
            raise KeyError(f"no record at offset {offset} of {topic}/{partition}")
        self._batches[(topic, partition, pairs[0][0])] = records
        self._records += len(records)
        while len(self._batches) > 1 and (len(self._batches) > self._cached_batches
                                          or self._records > self._cached_records):
            self._records -= len(self._batches.popitem(last=False)[1])
        return records[offset]


def log_batch_reader(log: LogManager) -> Callable[[str, int, int], list[tuple[int, Record]]]:
    """``read_batch`` over a LogManager: the one batch holding the offset, decoded."""

    def read_batch(topic: str, partition: int, offset: int) -> list[tuple[int, Record]]:
        res = log.partition(topic, partition).read(offset, 1, deleted=True, written=True)  # the first batch, whole
        return [(r.offset, Record(r.key, r.value, r.timestamp, r.headers)) for r in B.decode(res.data)]

    return read_batch
