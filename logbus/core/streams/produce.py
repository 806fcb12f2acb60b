"""Producing record batches a client sent already encoded (a Kafka Produce) to one
partition: the one path every protocol that receives raw batches goes through.

Theory of operation. ``produce`` checks the bytes (CRC, framing, no control batch, each
batch within the topic's max.message.bytes: ``log.batch.split_validate``), refuses a
record that carries the envelope header reserved for logbus, then:

- without a producer id: appends;
- with one (an idempotent producer): a transactional batch must belong to its producer's
  open transaction with this partition (``transactions.check_produce``); then the batch's
  sequence is checked against that producer's state on the partition (``producers.py``). A duplicate (a retry after a
  lost answer) is not appended again: it is answered with the offsets it got the first
  time, once they are readable. A gap is ``OutOfOrderSequence``, an older epoch
  ``ProducerFenced``. Otherwise it appends, remembers the batch at once (a retry sent
  before the append is durable is a duplicate), and stores the producer's state once the
  append is durable.

Whatever was appended is handed to ``route`` (the feed: the queues and pop groups that
read the topic) at once (a transactional batch when its transaction commits); the append
stands whatever routing does. Every outcome is the returned Deferred: an AppendResult
once durable under the topic's flush policy, or the failure (a ``LogbusError``). Nothing here knows a wire protocol.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import Deferred, fail, succeed

from ..errors import InvalidRecord, InvalidTxnState, LogbusError, OutOfOrderSequence, ProducerFenced
from ..log import batch as B
from ..log.format import ATTR_TRANSACTIONAL
from ..log.partition import AppendResult, Partition
from ..message import ENVELOPE_HEADER
from .group_model import Code
from .producers import APPEND, DUPLICATE, OUT_OF_ORDER, ProducerRegistry
from .transactions import TransactionCoordinator

Route = Callable[[str, int, int, bytes, list[B.BatchInfo]], object]

_RESERVED = ENVELOPE_HEADER.encode()


def reserved_header_in(data: bytes, infos: list[B.BatchInfo]) -> InvalidRecord | None:
    """A produced record may not carry logbus's reserved envelope header (readers would
    take it for logbus's own). Uncompressed batches are searched as bytes first (free);
    compressed ones are decoded. ``infos``: ``B.split_validate(data)``."""
    if all(not i.attributes & B.COMPRESSION_MASK for i in infos) and _RESERVED not in data:
        return None
    for record in B.decode(data):
        if any(k == ENVELOPE_HEADER for k, _ in record.headers):
            return InvalidRecord(f"record header {ENVELOPE_HEADER!r} is reserved for logbus")
    return None


def produce(p: Partition, data: bytes, producers: ProducerRegistry, route: Route,
            txns: TransactionCoordinator | None = None) -> Deferred[AppendResult]:
    """Check, append and route the record batches ``data`` (see the module's header)."""
    try:
        infos = B.split_validate(data, p.config.max_message_bytes)
    except LogbusError as e:
        return fail(e)
    refused = reserved_header_in(data, infos)
    if refused is not None:
        return fail(refused)
    topic = p.topic
    first = infos[0]
    if first.producer_id < 0:
        base = p.next_offset
        d = p.append_batches(data, infos)
        if p.next_offset > base:
            route(topic, p.index, base, data, infos)
        return d
    transactional = bool(first.attributes & ATTR_TRANSACTIONAL)
    if transactional:
        code = Code.INVALID_TXN_STATE if txns is None else txns.check_produce(
            topic, p.index, first.producer_id, first.producer_epoch)
        if code is Code.INVALID_PRODUCER_EPOCH:
            return fail(ProducerFenced(f"producer {first.producer_id}: epoch {first.producer_epoch} "
                                       f"is older than its current one"))
        if code is not Code.NONE:
            return fail(InvalidTxnState(f"producer {first.producer_id} has no transaction open with "
                                        f"{topic}/{p.index}"))
    states = producers.states(topic, p)
    count = sum(i.last_offset_delta + 1 for i in infos)
    verdict = states.check(first.producer_id, first.producer_epoch, first.base_sequence, count)
    if verdict.kind == DUPLICATE:
        again = AppendResult(verdict.base_offset, verdict.base_offset + count - 1, p.log_start_offset)
        return when_readable(p, verdict.base_offset).addCallback(lambda _: again)
    if verdict.kind != APPEND:
        if verdict.kind == OUT_OF_ORDER:
            return fail(OutOfOrderSequence(f"producer {first.producer_id}: sequence {first.base_sequence} "
                                           f"does not follow the last one on {topic}/{p.index}"))
        return fail(ProducerFenced(f"producer {first.producer_id}: epoch {first.producer_epoch} "
                                   f"is older than its current one"))
    base = p.next_offset
    d = p.append_batches(data, infos)
    if p.next_offset > base:  # appended (offsets assigned): remember at once, store when durable
        if transactional:  # routed when its transaction commits
            assert txns is not None
            txns.produced(topic, p.index, first.producer_id, base)
        else:
            route(topic, p.index, base, data, infos)
        pid, end = first.producer_id, p.next_offset
        states.record(pid, first.producer_epoch, first.base_sequence, count, base)
        rec = producers.snapshot(topic, p, pid)

        def durable(result: Any) -> Any:
            producers.store_durable(topic, p.index, pid, rec, end)
            return result

        d.addCallback(durable)
    return d


def when_readable(p: Partition, offset: int) -> Deferred[None]:
    """Fires once ``offset`` is below the partition's high watermark."""
    if p.high_watermark > offset:
        return succeed(None)
    d: Deferred[None] = Deferred()

    def check() -> None:
        if p.high_watermark > offset and not d.called:
            p.unwatch(check)
            d.callback(None)

    p.watch(check)
    return d
