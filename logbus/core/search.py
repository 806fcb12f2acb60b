"""Message search in a topic by record key, message id or time range: ``search``, which
the Admin service offers (``broker.admin.search_messages``, core/admin.py), and
``FoundMessage``, what it returns.

    admin.search_messages("orders", key=b"customer-42")              # through the key index
    admin.search_messages("orders", message_id="m-17", partition=0)
    admin.search_messages("orders", start_ms=t0, end_ms=t1, limit=50)   # .timeindex seeks
    found.truncated                                                     # more matched than limit

Theory of operation. A key or a message id is looked up in each partition's key index
(``log/keyindexer.py``), which answers candidate offsets; each candidate's record is read
(its batch: one ``pread`` and a decode up to the record) and kept only if its key or
message id is the one asked for, so a hash collision never gives a wrong record. A time
range alone seeks each partition with its time index (``Partition.offset_for_time``)
and reads forward in offset order until ``limit`` records are found, a read past
``end_ms`` holds no record at or before it, or SCAN_MAX_BYTES were read.

Results: records below each partition's high watermark and at or above its log start,
partitions in order, offsets ascending in each, at most ``limit`` in all (``Found``, a
list; its ``truncated`` says whether more matched: the search looks for one more than
``limit``). A key may have other forms in a topic (``key_forms``: on ``amq.topic``, an
MQTT topic and its AMQP routing key, the MQTT gateway's mapping): each form is looked up
and the records merged in offset order. It runs on the
reactor thread. A key lookup costs, per segment, one bisect in memory and one ``pread``
of at most 2 KiB, then a batch read and decode per candidate (a key with many records:
up to ``limit`` of them, and the collisions met on the way); page cache reads at this
scale. The key index's backlog, if any, is indexed first (keyindexer.py).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import CorruptBatch, InvalidRequest
from .log import batch as B
from .log.format import key_hash, message_id_hash
from .message import Message

if TYPE_CHECKING:
    from .log import LogManager, Partition
    from .log.keyindexer import KeyIndexer

MAX_LIMIT = 10_000
SCAN_READ_BYTES = 256 * 1024  # bytes of batches a time-range search reads at once
SCAN_MAX_BYTES = 16 << 20  # bytes a time-range search reads per partition, at most

# per log topic, the forms a record key may have there, the key itself first
KeyForms = Callable[[bytes], tuple[bytes, ...]]


@dataclass(frozen=True, slots=True)
class FoundMessage:
    """One record a search found, with the properties its envelope header carried."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    message_id: str | None  # the envelope's message id (None: none, or a plain Kafka record)
    headers: tuple[tuple[str, bytes | None], ...]  # the record's user headers, in order
    value: bytes | None
    size: int  # bytes of the value

    def to_json(self) -> dict[str, Any]:
        """As RabbitMQ's management API shows a message: bytes as UTF-8 text when they
        decode (encoding "string"), else as base64 (encoding "base64"); None as null."""
        key, key_encoding = _text(self.key)
        payload, payload_encoding = _text(self.value)
        headers = []
        for name, value in self.headers:
            text, encoding = _text(value)
            headers.append({"name": name, "value": text, "encoding": encoding})
        return {
            "partition": self.partition,
            "offset": self.offset,
            "timestamp_ms": self.timestamp_ms,
            "key": key,
            "key_encoding": key_encoding,
            "message_id": self.message_id,
            "headers": headers,
            "payload": payload,
            "payload_encoding": payload_encoding,
            "size": self.size,
        }


class Found(list[FoundMessage]):
    """What a search found, in order; ``truncated``: more records matched than it holds."""

    __slots__ = ("truncated",)

    def __init__(self, messages: list[FoundMessage], truncated: bool) -> None:
        super().__init__(messages)
        self.truncated = truncated

    def to_json(self) -> dict[str, Any]:
        return {"messages": [m.to_json() for m in self], "truncated": self.truncated}


def _text(data: bytes | None) -> tuple[str | None, str | None]:
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), "string"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def _found(partition: int, r: B.StoredRecord) -> FoundMessage:
    try:
        m = Message.from_record(B.Record(r.key, r.value, r.timestamp, r.headers))
        headers, mid = m.headers, (m.envelope.message_id or None)
    except CorruptBatch:  # an envelope header that does not parse: shown as a header
        headers, mid = r.headers, None
    return FoundMessage(partition, r.offset, r.timestamp, r.key, mid, tuple(headers), r.value,
                        len(r.value) if r.value is not None else 0)


def search(log: LogManager, topic: str, *, key: bytes | None = None, message_id: str | None = None,
           start_ms: int | None = None, end_ms: int | None = None, partition: int | None = None,
           limit: int = 100, key_forms: KeyForms | None = None) -> Found:
    """``Admin.search_messages`` over a log manager (core/admin.py says what it finds)."""
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit {limit} is not in [1, {MAX_LIMIT}]")
    if key is None and message_id is None and start_ms is None and end_ms is None:
        raise InvalidRequest("a search needs a key, a message id or a time range")
    if start_ms is not None and end_ms is not None and end_ms < start_ms:
        raise InvalidRequest(f"the time range ends ({end_ms}) before it starts ({start_ms})")
    t = log.topic(topic)  # UnknownTopic
    parts = t.partitions if partition is None else [t.partition(partition)]  # UnknownPartition
    keys: tuple[bytes | None, ...] = (key,) if key is None or key_forms is None else key_forms(key)
    out: list[FoundMessage] = []
    for p in parts:
        want = limit + 1 - len(out)  # one more than asked: whether more match
        if key is not None or message_id is not None:
            found = [f for k in keys for f in _by_hash(log.keys, p, k, message_id, start_ms, end_ms, want)]
            if len(keys) > 1:  # each form's records in offset order: merged, at most want
                found = sorted({f.offset: f for f in found}.values(), key=lambda f: f.offset)[:want]
            out += found
        else:
            out += _by_time(p, start_ms, end_ms, want)
        if len(out) > limit:
            break
    return Found(out[:limit], len(out) > limit)


def _by_hash(keys: KeyIndexer, p: Partition, key: bytes | None, message_id: str | None,
             start_ms: int | None, end_ms: int | None, want: int) -> list[FoundMessage]:
    p.drain()  # what this turn appended is written, so the index sees it
    h = message_id_hash(message_id) if message_id is not None else key_hash(key)  # type: ignore[arg-type]
    low, high = p.log_start_offset, p.high_watermark
    out: list[FoundMessage] = []
    last = -1
    for offset in keys.candidates(p, h, since_ms=start_ms):
        if offset == last or not low <= offset < high:
            continue  # (a record's key and message id may share a hash: one candidate)
        last = offset
        res = p.read(offset, 1)
        r = B.record_at(res.data, offset)
        if r is None or (key is not None and r.key != key):
            continue
        if (start_ms is not None and r.timestamp < start_ms) or (end_ms is not None and r.timestamp > end_ms):
            continue
        found = _found(p.index, r)
        if message_id is not None and found.message_id != message_id:
            continue
        out.append(found)
        if len(out) >= want:
            break
    return out


def _by_time(p: Partition, start_ms: int | None, end_ms: int | None, want: int) -> list[FoundMessage]:
    offset = p.log_start_offset
    if start_ms is not None:
        first = p.offset_for_time(start_ms)
        if first is None:
            return []
        offset = max(offset, first[0])
    out: list[FoundMessage] = []
    read = 0
    while offset < p.high_watermark and read < SCAN_MAX_BYTES:
        res = p.read(offset, SCAN_READ_BYTES)
        if not res.spans:
            break
        read += res.size
        earliest = None
        for r in B.decode(res.data):
            if r.offset < offset:
                continue
            ts = r.timestamp
            earliest = ts if earliest is None else min(earliest, ts)
            if (start_ms is None or ts >= start_ms) and (end_ms is None or ts <= end_ms):
                out.append(_found(p.index, r))
                if len(out) >= want:
                    return out
        if end_ms is not None and earliest is not None and earliest > end_ms:
            break  # records after the range: the log is appended in (about) time order
        offset = res.next_offset
    return out
