"""RecordBatch v2 bytes -> one Arrow record batch, column-wise (the Spark read hot path).

Theory of operation. A Kafka record is a run of zigzag varints and byte strings
(format.md section 4.3):

    length, attributes:int8, timestampDelta, offsetDelta, keyLength, key,
    valueLength, value, headerCount, [headerKeyLength, headerKey, headerValueLength,
    headerValue] * headerCount

The one loop over records, which follows the chain of record lengths and finds every
field, is compiled (``kernel.scan``); everything after it works on whole columns.
Byte-string columns are never copied record by record: they are built as Arrow
``binary_view`` arrays pointing into the chunk's bytes (``kernel.views``), and one
``cast`` to ``binary``/``string`` gathers them in C++.

The envelope header (``logbus.envelope``, the last header when present) is turned into
``properties``, ``tag`` and ``protocol``; records of one producer tend to repeat the same
envelope bytes, so each distinct envelope is parsed once per process (``_Envelopes``)
and the columns are built by ``take``. Compressed batches are decompressed (aiokafka's
codecs) and parsed the same way. ``reference_rows`` is the slow, obvious decoder (aiokafka, record by
record) the fast one is tested against.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..core.envelope_pb2 import Envelope
from ..filters.message_filter import MessageFilter
from ..core.log.format import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    COMPRESSION_MASK,
    HEADER_SIZE,
    BatchInfo,
)
from .logfiles import LogReadError
from . import kernel
from .kernel import (
    ENV_LEN,
    ENV_START,
    H_KEY_LEN,
    H_KEY_START,
    H_VALUE_LEN,
    H_VALUE_START,
    KEY_LEN,
    KEY_START,
    VALUE_LEN,
    VALUE_START,
)
from .schema import ARROW, HEADERS_TYPE, PROPERTIES_TYPE

ENVELOPE_HEADER = b"logbus.envelope"
_ENV = np.frombuffer(ENVELOPE_HEADER, np.uint8)
_PROTOCOLS = {v.number: v.name for v in Envelope.Protocol.DESCRIPTOR.values if v.number}


class MalformedRecords(LogReadError):
    """A CRC-valid batch whose records do not parse (not written by a Kafka encoder)."""


def _bytes_array(a: np.ndarray, data: pa.Buffer, start: np.ndarray, length: np.ndarray,
                 typ: pa.DataType, views: np.ndarray | None = None) -> pa.Array:
    """A ``typ`` (binary or string) array of the byte strings; a negative length is null.
    ``views``: their Arrow views when already made (kernel.scan), else made here."""
    valid = length >= 0
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    view_type = pa.string_view() if typ == pa.string() else pa.binary_view()
    if views is None:
        views = kernel.views(a, start, length)
    arr = pa.Array.from_buffers(view_type, len(start), [validity, pa.py_buffer(views), data])
    return arr.cast(typ)


# -- the envelope ----------------------------------------------------------------------------


def envelope_columns(env: Envelope) -> tuple[str | None, str | None, list[tuple[str, str]]]:
    """(protocol, tag, properties) of an envelope: every other field that is set, by its
    field name, as text (repeated: space-separated; bytes: hex), and MQTT 5 user
    properties by their own names."""
    props: list[tuple[str, str]] = []
    users: dict[str, str] = {}
    for field, value in env.ListFields():
        name = field.name
        if name in ("protocol", "tag"):
            continue
        if name == "user_properties":  # by their own names; the last of a repeated name
            users = {p.key: p.value for p in value}
            continue
        if isinstance(value, bytes):
            text = value.hex()
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (list, tuple)) or hasattr(value, "append"):  # repeated
            text = " ".join(str(v) for v in value)
        else:
            text = str(value)
        props.append((name, text))
    if users:  # a user property named as an envelope field gives way to it
        taken = {name for name, _ in props}
        props += [(k, v) for k, v in users.items() if k not in taken]
    return _PROTOCOLS.get(env.protocol), env.tag or None, props


def _parse_envelope(data: bytes) -> tuple[str | None, str | None, list[tuple[str, str]]] | None:
    try:
        return envelope_columns(Envelope.FromString(data))
    except Exception:  # DecodeError: not ours, or damaged; the header stays a user header
        return None


class _Envelopes:
    """Every distinct envelope this process has decoded, parsed once: envelope bytes ->
    a row of the ``protocol``, ``tag`` and ``properties`` columns (row 0: no envelope).
    Records of one producer repeat the same few envelopes, so chunks after the first
    find theirs here, and the columns are one ``take`` from arrays built once."""

    MAX = 100_000

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.slots: dict[bytes, int] = {}  # 0: not an envelope (stays a user header)
        self.rows: list[tuple[str | None, str | None, list[tuple[str, str]]]] = [(None, None, [])]
        self.arrays: tuple[pa.Array, pa.Array, pa.Array] | None = None
        self.judged: dict[int, tuple[MessageFilter, list[bool]]] = {}  # a filter's verdict per row

    def lookup(self, distinct: list[bytes]) -> np.ndarray:
        """The row of each of ``distinct`` envelope values, 0 when it does not parse."""
        if len(self.rows) + len(distinct) > self.MAX:
            self.clear()
        out = np.zeros(len(distinct), np.int64)
        for i, data in enumerate(distinct):
            slot = self.slots.get(data)
            if slot is None:
                parsed = _parse_envelope(data)
                slot = 0
                if parsed is not None:
                    slot = len(self.rows)
                    self.rows.append(parsed)
                    self.arrays = None
                self.slots[data] = slot
            out[i] = slot
        return out

    def taken(self, keep: MessageFilter) -> np.ndarray:
        """Whether ``keep`` takes a record with each row's envelope (row 0: none). What
        a selector sees is the ``properties`` column's map, plus ``tag`` and ``protocol``."""
        done = self.judged.get(id(keep))
        if done is None or done[0] is not keep:
            done = self.judged[id(keep)] = (keep, [])
        verdicts = done[1]
        for protocol, tag, props in self.rows[len(verdicts):]:
            seen: dict[str, Any] = dict(props)
            if tag is not None:
                seen["tag"] = tag
            if protocol is not None:
                seen["protocol"] = protocol
            verdicts.append(keep.matches(tag, seen.copy))
        return np.array(verdicts, bool)

    def columns(self) -> tuple[pa.Array, pa.Array, pa.Array]:
        """(protocol, tag, properties) arrays with one entry per row."""
        if self.arrays is None:
            rows = self.rows
            self.arrays = (pa.array([r[0] for r in rows], pa.string()), pa.array([r[1] for r in rows], pa.string()),
                           pa.array([r[2] for r in rows], PROPERTIES_TYPE))
        return self.arrays


_ENVELOPES = _Envelopes()


# -- the chunk decoder -------------------------------------------------------------------------


def decode_chunk(
    data: bytes,
    batches: Sequence[BatchInfo],
    lo: int,
    hi: int,
    topic: str,
    partition: int,
    names: Sequence[str],
    keep: MessageFilter | None = None,
) -> pa.RecordBatch | None:
    """The records of ``batches`` (positions in ``data``) with offsets in ``[lo, hi)`` as
    one Arrow batch with columns ``names`` (schema.ARROW types); None when there are none.
    ``keep``: only the records this filter takes (``filterTag``, ``filterSql``): judged
    once per distinct envelope, before any column is built."""
    blocks, buf = _blocks(data, batches)
    if not blocks:
        return None
    if len(buf) >= 2**31:  # Arrow views hold int32 positions
        raise MalformedRecords(f"{len(buf)} bytes of records in one chunk (decompressed): more than 2 GiB")
    a = np.frombuffer(buf, np.uint8)
    info = np.array([(start, end, count, b.base_offset, b.first_timestamp, b.max_timestamp,
                      1 if b.attributes & ATTR_TIMESTAMP_TYPE else 0, b.last_offset_delta)
                     for start, end, count, b in blocks], np.int64).reshape(-1, kernel.B_FIELDS)
    want = set(names)
    status, at, f, hoff, hpos, key_views, value_views = kernel.scan(a, info, _ENV, "key" in want, "value" in want)
    if status:
        raise MalformedRecords(f"{kernel.MESSAGES[status]} (record {at} of a chunk of topic {topic!r} "
                               f"partition {partition} at offset {blocks[0][3].base_offset})")
    n = f.shape[1]
    offsets = f[kernel.OFFSET]
    i0, i1 = (int(x) for x in np.searchsorted(offsets, [lo, hi]))
    if i0 >= i1:
        return None
    pabuf = pa.py_buffer(buf)
    env_index = _env_index(a, pabuf, f) if keep is not None or want & {"headers", "properties", "tag", "protocol"} \
        else None
    all_env = env_index
    rows: np.ndarray | None = None  # the records kept, when a filter leaves some out
    if keep is not None:
        assert env_index is not None
        taken = _ENVELOPES.taken(keep)
        mask = taken[env_index]
        mask[:i0] = False
        mask[i1:] = False
        if not mask.any():
            return None
        if not mask.all():
            rows = np.flatnonzero(mask)
            i0, i1 = 0, len(rows)
            f, env_index = f[:, rows], env_index[rows]
            offsets = f[kernel.OFFSET]
            if "key" in want:  # the views exist only for the columns asked for
                key_views = key_views[rows]
            if "value" in want:
                value_views = value_views[rows]
    m = f.shape[1]
    cols: dict[str, pa.Array] = {}
    if "key" in want:
        cols["key"] = _bytes_array(a, pabuf, f[KEY_START], f[KEY_LEN], pa.binary(), key_views)
    if "value" in want:
        cols["value"] = _bytes_array(a, pabuf, f[VALUE_START], f[VALUE_LEN], pa.binary(), value_views)
    if "topic" in want:
        cols["topic"] = pa.repeat(pa.scalar(topic, pa.string()), m)
    if "partition" in want:
        cols["partition"] = pa.repeat(pa.scalar(partition, pa.int32()), m)
    if "offset" in want:
        cols["offset"] = pa.array(offsets, pa.int64())
    if "timestamp" in want:
        cols["timestamp"] = pa.array(f[kernel.TIMESTAMP_US], pa.int64()).view(ARROW["timestamp"])
    if "timestampType" in want:
        cols["timestampType"] = pa.array(f[kernel.TS_TYPE].astype(np.int32), pa.int32())
    if env_index is not None and want & {"properties", "tag", "protocol"}:
        cols.update(_envelope_columns(env_index, want))
    if "headers" in want:
        assert all_env is not None
        full = _headers_column(a, pabuf, n, hoff, hpos, all_env)
        cols["headers"] = full if rows is None else full.take(pa.array(rows, pa.int64()))
    out = pa.RecordBatch.from_arrays([cols[c] for c in names], names=list(names))
    return out if (i0, i1) == (0, m) else out.slice(i0, i1 - i0)


def _blocks(data: bytes, batches: Sequence[BatchInfo]) -> tuple[list[tuple[int, int, int, BatchInfo]], bytes]:
    """(records start, records end, count, batch) of each data batch, in ``buf``: ``data``
    itself, or, when some batch is compressed, the record blocks decompressed and joined."""
    plain = [b for b in batches if not b.attributes & ATTR_CONTROL and b.records_count]
    if all(not b.attributes & COMPRESSION_MASK for b in plain):
        return [(b.position + HEADER_SIZE, b.position + b.size, b.records_count, b) for b in plain], data
    from aiokafka import codec  # here: most logs hold no compressed batch

    decompress = {CODEC_GZIP: codec.gzip_decode, CODEC_SNAPPY: codec.snappy_decode, CODEC_LZ4: codec.lz4_decode,
                  CODEC_ZSTD: codec.zstd_decode}
    parts, blocks, at = [], [], 0
    for b in plain:
        raw = data[b.position + HEADER_SIZE : b.position + b.size]
        codec_id = b.attributes & COMPRESSION_MASK
        if codec_id:
            if codec_id not in decompress:
                raise MalformedRecords(f"unknown compression codec {codec_id}")
            raw = decompress[codec_id](raw)
        parts.append(raw)
        blocks.append((at, at + len(raw), b.records_count, b))
        at += len(raw)
    return blocks, b"".join(parts)


def _env_index(a: np.ndarray, pabuf: pa.Buffer, f: np.ndarray) -> np.ndarray:
    """Each record's row in ``_ENVELOPES`` (0: no envelope), from kernel.scan's output."""
    env_index = np.zeros(f.shape[1], np.int64)
    rec = np.flatnonzero(f[ENV_LEN] >= 0)  # a last header named logbus.envelope, with a value
    if rec.size:
        # each distinct envelope once: hash them in Arrow
        encoded = _bytes_array(a, pabuf, f[ENV_START, rec], f[ENV_LEN, rec], pa.binary()).dictionary_encode()
        slots = _ENVELOPES.lookup(encoded.dictionary.to_pylist())
        env_index[rec] = slots[encoded.indices.to_numpy(zero_copy_only=False)]
    return env_index


def _envelope_columns(env_index: np.ndarray, want: set[str]) -> dict[str, pa.Array]:
    """protocol, tag and properties: one ``take`` from the envelopes' columns."""
    cols: dict[str, pa.Array] = {}
    take = pa.array(env_index, pa.int64())
    protocol, tag, properties = _ENVELOPES.columns()
    if "protocol" in want:
        cols["protocol"] = protocol.take(take)
    if "tag" in want:
        cols["tag"] = tag.take(take)
    if "properties" in want:
        cols["properties"] = properties.take(take)
    return cols


def _headers_column(a: np.ndarray, pabuf: pa.Buffer, n: int, hoff: np.ndarray, hpos: np.ndarray,
                    env_index: np.ndarray) -> pa.Array:
    """The user headers of every record (a parsed envelope is not one)."""
    hdr = kernel.headers(a, hpos, hoff)
    is_env = np.zeros(hdr.shape[1], bool)
    is_env[hoff[1:][env_index > 0] - 1] = True
    user = np.flatnonzero(~is_env)
    offs = np.zeros(n + 1, np.int32)
    np.cumsum(np.diff(hoff) - (env_index > 0), out=offs[1:])
    keys = _bytes_array(a, pabuf, hdr[H_KEY_START, user], hdr[H_KEY_LEN, user], pa.binary())
    try:
        keys = keys.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: decode leniently, as a Java String would
        keys = pa.array([k.decode("utf-8", "replace") for k in keys.to_pylist()], pa.string())
    values = _bytes_array(a, pabuf, hdr[H_VALUE_START, user], hdr[H_VALUE_LEN, user], pa.binary())
    entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADERS_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(offs, pa.int32()), entries, type=HEADERS_TYPE)


# -- the reference decoder and helpers --------------------------------------------------------


def reference_rows(data: bytes, batches: Sequence[BatchInfo], topic: str, partition: int) -> Iterator[dict[str, Any]]:
    """Every data record as a dict of the schema's columns (timestamps in ms), decoded
    record by record with aiokafka: slow and obvious, the oracle for ``decode_chunk``."""
    from aiokafka.record.default_records import DefaultRecordBatch

    for b in batches:
        rb = DefaultRecordBatch(data[b.position : b.position + b.size])
        if rb.is_control_batch:
            continue
        for rec in rb:
            headers = list(rec.headers)
            protocol = tag = None
            props: list[tuple[str, str]] = []
            if headers and headers[-1][0] == ENVELOPE_HEADER.decode() and headers[-1][1] is not None:
                parsed = _parse_envelope(headers[-1][1])
                if parsed is not None:
                    protocol, tag, props = parsed
                    headers = headers[:-1]
            yield {
                "key": rec.key,
                "value": rec.value,
                "topic": topic,
                "partition": partition,
                "offset": rec.offset,
                "timestamp_ms": rec.timestamp,
                "timestampType": rec.timestamp_type,
                "headers": headers,
                "properties": props,
                "tag": tag,
                "protocol": protocol,
            }


def record_timestamps(data: bytes, b: BatchInfo) -> Iterator[tuple[int, int]]:
    """(offset, timestamp ms) of each record of batch ``b``."""
    from aiokafka.record.default_records import DefaultRecordBatch

    for rec in DefaultRecordBatch(data[b.position : b.position + b.size]):
        yield rec.offset, rec.timestamp
