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
envelope bytes, so each distinct envelope is parsed once per chunk and the columns are
built by ``take``; parsed envelopes are kept across chunks. Compressed batches are decompressed (aiokafka's codecs) and parsed
the same way. ``reference_rows`` is the slow, obvious decoder (aiokafka, record by
record) the fast one is tested against.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from aiokafka import codec

from ..core.envelope_pb2 import Envelope
from .logfiles import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    COMPRESSION_MASK,
    HEADER_SIZE,
    Batch,
    LogReadError,
)
from . import kernel
from .kernel import H_KEY_LEN, H_KEY_START, H_VALUE_LEN, H_VALUE_START, KEY_LEN, KEY_START, VALUE_LEN, VALUE_START
from .schema import ARROW, HEADERS_TYPE, PROPERTIES_TYPE

ENVELOPE_HEADER = b"logbus.envelope"
_ENV = np.frombuffer(ENVELOPE_HEADER, np.uint8)
_DECOMPRESS = {1: codec.gzip_decode, 2: codec.snappy_decode, 3: codec.lz4_decode, 4: codec.zstd_decode}
_PROTOCOLS = {v.number: v.name for v in Envelope.Protocol.DESCRIPTOR.values if v.number}


class MalformedRecords(LogReadError):
    """A CRC-valid batch whose records do not parse (not written by a Kafka encoder)."""


def _bytes_array(a: np.ndarray, data: pa.Buffer, start: np.ndarray, length: np.ndarray,
                 typ: pa.DataType) -> pa.Array:
    """A ``typ`` (binary or string) array of the byte strings; a negative length is null."""
    valid = length >= 0
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    view_type = pa.string_view() if typ == pa.string() else pa.binary_view()
    views = kernel.views(a, start, length)
    arr = pa.Array.from_buffers(view_type, len(start), [validity, pa.py_buffer(views), data])
    return arr.cast(typ)


# -- the envelope ----------------------------------------------------------------------------


def envelope_columns(env: Envelope) -> tuple[str | None, str | None, list[tuple[str, str]]]:
    """(protocol, tag, properties) of an envelope: every other field that is set, by its
    field name, as text (repeated: space-separated; bytes: hex)."""
    props: list[tuple[str, str]] = []
    for field, value in env.ListFields():
        name = field.name
        if name in ("protocol", "tag"):
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
    return _PROTOCOLS.get(env.protocol), env.tag or None, props


def _parse_envelope(data: bytes) -> tuple[str | None, str | None, list[tuple[str, str]]] | None:
    try:
        return envelope_columns(Envelope.FromString(data))
    except Exception:  # DecodeError: not ours, or damaged; the header stays a user header
        return None


_PARSED: dict[bytes, Any] = {}  # envelope bytes -> _parse_envelope's answer, across chunks
_PARSED_MAX = 100_000


def _parse_cached(data: bytes) -> tuple[str | None, str | None, list[tuple[str, str]]] | None:
    parsed = _PARSED.get(data, _PARSED)
    if parsed is _PARSED:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        parsed = _PARSED[data] = _parse_envelope(data)
    return parsed  # type: ignore[return-value]


# -- the chunk decoder -------------------------------------------------------------------------


def decode_chunk(
    data: bytes,
    batches: Sequence[Batch],
    lo: int,
    hi: int,
    topic: str,
    partition: int,
    names: Sequence[str],
) -> pa.RecordBatch | None:
    """The records of ``batches`` (positions in ``data``) with offsets in ``[lo, hi)`` as
    one Arrow batch with columns ``names`` (schema.ARROW types); None when there are none."""
    blocks, buf = _blocks(data, batches)
    if not blocks:
        return None
    a = np.frombuffer(buf, np.uint8)
    info = np.array([(start, end, count, b.base_offset, b.first_timestamp, b.max_timestamp,
                      b.attributes & ATTR_TIMESTAMP_TYPE, b.last_offset_delta) for start, end, count, b in blocks],
                    np.int64).reshape(-1, 8)
    where = f"a chunk of topic {topic!r} partition {partition} at offset {blocks[0][3].base_offset}"
    status, at, f, hoff, hdr = kernel.scan(a, info[:, 0], info[:, 1], info[:, 2])
    if status:
        raise MalformedRecords(f"{kernel.MESSAGES[status]} (record {at} of {where})")
    n = f.shape[1]
    per = np.repeat(np.arange(len(blocks)), info[:, 2])
    od = f[kernel.OFFSET_DELTA]
    offsets = info[per, 3] + od
    # offsets rise, inside their batch's range: the reader seeks and slices by them
    if (od < 0).any() or (od > info[per, 7]).any() or (n > 1 and (offsets[1:] <= offsets[:-1]).any()):
        raise MalformedRecords(f"record offsets out of order or outside their batch ({where})")
    i0, i1 = (int(x) for x in np.searchsorted(offsets, [lo, hi]))
    if i0 >= i1:
        return None
    log_append = info[per, 6] != 0
    ts = np.where(log_append, info[per, 5], info[per, 4] + f[kernel.TS_DELTA])
    want = set(names)
    cols: dict[str, pa.Array] = {}
    pabuf = pa.py_buffer(buf)
    if "key" in want:
        cols["key"] = _bytes_array(a, pabuf, f[KEY_START], f[KEY_LEN], pa.binary())
    if "value" in want:
        cols["value"] = _bytes_array(a, pabuf, f[VALUE_START], f[VALUE_LEN], pa.binary())
    if "topic" in want:
        cols["topic"] = pa.repeat(pa.scalar(topic, pa.string()), n)
    if "partition" in want:
        cols["partition"] = pa.repeat(pa.scalar(partition, pa.int32()), n)
    if "offset" in want:
        cols["offset"] = pa.array(offsets, pa.int64())
    if "timestamp" in want:
        cols["timestamp"] = pa.array(ts * 1000, pa.int64()).view(ARROW["timestamp"])
    if "timestampType" in want:
        cols["timestampType"] = pa.array(log_append.astype(np.int32), pa.int32())
    if want & {"headers", "properties", "tag", "protocol"}:
        cols.update(_header_columns(a, pabuf, hoff, hdr, want))
    out = pa.RecordBatch.from_arrays([cols[c] for c in names], names=list(names))
    return out if (i0, i1) == (0, n) else out.slice(i0, i1 - i0)


def _blocks(data: bytes, batches: Sequence[Batch]) -> tuple[list[tuple[int, int, int, Batch]], bytes]:
    """(records start, records end, count, batch) of each data batch, in ``buf``: ``data``
    itself, or, when some batch is compressed, the record blocks decompressed and joined."""
    plain = [b for b in batches if not b.attributes & ATTR_CONTROL and b.records_count]
    if all(not b.attributes & COMPRESSION_MASK for b in plain):
        return [(b.position + HEADER_SIZE, b.position + b.size, b.records_count, b) for b in plain], data
    parts, blocks, at = [], [], 0
    for b in plain:
        raw = data[b.position + HEADER_SIZE : b.position + b.size]
        codec_id = b.attributes & COMPRESSION_MASK
        if codec_id:
            if codec_id not in _DECOMPRESS:
                raise MalformedRecords(f"unknown compression codec {codec_id}")
            raw = _DECOMPRESS[codec_id](raw)
        parts.append(raw)
        blocks.append((at, at + len(raw), b.records_count, b))
        at += len(raw)
    return blocks, b"".join(parts)


def _header_columns(a: np.ndarray, pabuf: pa.Buffer, hoff: np.ndarray, hdr: np.ndarray,
                    want: set[str]) -> dict[str, pa.Array]:
    """headers, properties, tag and protocol from every record's headers (``hoff``: where
    each record's start in ``hdr``, kernel.scan's header rows)."""
    n = len(hoff) - 1
    # the envelope: a last header named logbus.envelope with a value
    rec = np.flatnonzero(hoff[1:] > hoff[:-1])
    last = hoff[rec + 1] - 1
    fit = (hdr[H_KEY_LEN, last] == len(ENVELOPE_HEADER)) & (hdr[H_VALUE_LEN, last] >= 0)
    rec, last = rec[fit], last[fit]
    if rec.size:
        named = (a[hdr[H_KEY_START, last][:, None] + np.arange(len(_ENV))] == _ENV).all(axis=1)
        rec, last = rec[named], last[named]
    env_index = np.zeros(n, np.int64)  # 0: no envelope
    uniques: list[tuple[str | None, str | None, list[tuple[str, str]]]] = [(None, None, [])]
    is_env = np.zeros(hdr.shape[1], bool)
    if rec.size:
        # each distinct envelope is looked up once: hash them in Arrow
        encoded = _bytes_array(a, pabuf, hdr[H_VALUE_START, last], hdr[H_VALUE_LEN, last],
                               pa.binary()).dictionary_encode()
        slot = np.zeros(len(encoded.dictionary), np.int64)  # unique -> index in uniques, 0: bad
        for i, data in enumerate(encoded.dictionary.to_pylist()):
            parsed = _parse_cached(data)
            if parsed is not None:
                slot[i] = len(uniques)
                uniques.append(parsed)
        found = slot[encoded.indices.to_numpy(zero_copy_only=False)]
        good = found > 0
        is_env[last[good]] = True
        env_index[rec[good]] = found[good]
    cols: dict[str, pa.Array] = {}
    take = pa.array(env_index, pa.int64())
    if "protocol" in want:
        cols["protocol"] = pa.array([u[0] for u in uniques], pa.string()).take(take)
    if "tag" in want:
        cols["tag"] = pa.array([u[1] for u in uniques], pa.string()).take(take)
    if "properties" in want:
        cols["properties"] = pa.array([u[2] for u in uniques], PROPERTIES_TYPE).take(take)
    if "headers" in want:
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
        cols["headers"] = pa.ListArray.from_arrays(pa.array(offs, pa.int32()), entries, type=HEADERS_TYPE)
    return cols


# -- the reference decoder and helpers --------------------------------------------------------


def reference_rows(data: bytes, batches: Sequence[Batch], topic: str, partition: int) -> Iterator[dict[str, Any]]:
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


def record_timestamps(data: bytes, b: Batch) -> Iterator[tuple[int, int]]:
    """(offset, timestamp ms) of each record of batch ``b``."""
    from aiokafka.record.default_records import DefaultRecordBatch

    for rec in DefaultRecordBatch(data[b.position : b.position + b.size]):
        yield rec.offset, rec.timestamp
