"""RecordBatch v2 bytes -> one Arrow record batch, column-wise (the Spark read hot path).

Theory of operation. A Kafka record is a run of zigzag varints and byte strings
(format.md section 4.3):

    length, attributes:int8, timestampDelta, offsetDelta, keyLength, key,
    valueLength, value, headerCount, [headerKeyLength, headerKey, headerValueLength,
    headerValue] * headerCount

Only the record boundaries form a chain that must be followed one record at a time:
``_heads`` does that in a tight Python loop (the one per-record loop, ~0.4 us). Every
other field is then decoded for all records of the chunk at once with numpy
(``_varint`` gathers the bytes at an array of positions), and the boundaries are checked
against the parsed fields, so a malformed record is refused rather than misread.
Byte-string columns are never copied record by record: they are built as Arrow
``binary_view`` arrays pointing into the chunk's bytes (16-byte views: the length, then
the bytes themselves when at most 12, else a 4-byte prefix and the position), and one
``cast`` to ``binary``/``string`` gathers them in C++.

The envelope header (``logbus.envelope``, the last header when present) is turned into
``properties``, ``tag`` and ``protocol``; records of one producer tend to repeat the same
envelope bytes, so each distinct envelope is parsed once per chunk and the columns are
built by ``take``. Compressed batches are decompressed (aiokafka's codecs) and parsed
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
from .schema import ARROW, HEADERS_TYPE, PROPERTIES_TYPE

ENVELOPE_HEADER = b"logbus.envelope"
_PAD = bytes(32)  # lets fixed-width gathers run past the last record
_AR12 = np.arange(12)
_ENV = np.frombuffer(ENVELOPE_HEADER, np.uint8)
_DECOMPRESS = {1: codec.gzip_decode, 2: codec.snappy_decode, 3: codec.lz4_decode, 4: codec.zstd_decode}
_PROTOCOLS = {v.number: v.name for v in Envelope.Protocol.DESCRIPTOR.values if v.number}


class MalformedRecords(LogReadError):
    """A CRC-valid batch whose records do not parse (not written by a Kafka encoder)."""


# -- the one per-record loop -----------------------------------------------------------


def _heads(buf: bytes, pos: int, count: int, app: Any) -> int:
    """Append the position of each of ``count`` records' length varint; return the end."""
    for _ in range(count):
        app(pos)
        b = buf[pos]
        if b < 128:
            pos += 1 + ((b >> 1) ^ -(b & 1))
        else:
            c = buf[pos + 1]
            if c < 128:
                n = (b & 127) | (c << 7)
                pos += 2 + ((n >> 1) ^ -(n & 1))
            else:
                n, size = _varint_at(buf, pos)
                pos += size + n
    return pos


def _varint_at(buf: bytes, pos: int) -> tuple[int, int]:
    """(zigzag value, size) of the varint at ``pos``."""
    shift = value = 0
    for i in range(10):
        b = buf[pos + i]
        value |= (b & 127) << shift
        if b < 128:
            return (value >> 1) ^ -(value & 1), i + 1
        shift += 7
    raise MalformedRecords("varint longer than 10 bytes")


# -- vectorised field decoding -----------------------------------------------------------


def _varint(a: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at positions ``p`` of ``a``: (values, sizes)."""
    b = a[p].astype(np.int64)
    value = b & 0x7F
    size = np.ones(len(p), np.int64)
    more = np.flatnonzero(b >= 0x80)
    shift = 7
    while more.size:
        if shift > 63:
            raise MalformedRecords("varint longer than 10 bytes")
        b = a[p[more] + size[more]].astype(np.int64)
        value[more] |= (b & 0x7F) << shift
        size[more] += 1
        more = more[b >= 0x80]
        shift += 7
    return (value >> 1) ^ -(value & 1), size


def _views(w12: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Arrow binary-view structs for byte strings at ``start`` of ``length`` (>= 0)."""
    n = len(start)
    v = np.empty((n, 16), np.uint8)
    v[:, 4:] = w12[start]
    short = length <= 12
    if short.any():
        cut = (_AR12[None, :] >= length[:, None]) & short[:, None]
        v[:, 4:][cut] = 0
    words = v.view(np.int32)
    words[:, 0] = length
    long_ = ~short
    if long_.any():
        words[long_, 2] = 0
        words[long_, 3] = start[long_]
    return v


def _bytes_array(w12: np.ndarray, data: pa.Buffer, start: np.ndarray, length: np.ndarray,
                 typ: pa.DataType) -> pa.Array:
    """A ``typ`` (binary or string) array of the byte strings; length -1 is null."""
    valid = length >= 0
    ln = np.where(valid, length, 0).astype(np.int32)
    views = _views(w12, start, ln)
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    view_type = pa.string_view() if typ == pa.string() else pa.binary_view()
    arr = pa.Array.from_buffers(view_type, len(start), [validity, pa.py_buffer(views), data])
    return arr.cast(typ)


class _Records:
    """Field positions of every record of a chunk (numpy arrays, one entry per record)."""

    def __init__(self, buf: bytes, blocks: Sequence[tuple[int, int, int, Batch]]) -> None:
        heads: Any = []
        app = heads.append
        for start, end, count, _ in blocks:
            try:
                stop = _heads(buf, start, count, app)
            except IndexError:
                raise MalformedRecords("record runs past the end of its batch") from None
            if stop != end:
                raise MalformedRecords(f"records end at byte {stop}, the batch at {end}")
        self.a = a = np.frombuffer(buf, np.uint8)
        h = np.array(heads, np.int64)
        n = len(h)
        length, size = _varint(a, h)
        start = h + size
        self.end = start + length
        if n and (length < 6).any():
            raise MalformedRecords("record shorter than its fixed fields")
        self.attributes = a[start]
        p = start + 1
        self.ts_delta, size = _varint(a, p)
        p = p + size
        self.offset_delta, size = _varint(a, p)
        p = p + size
        self.key_len, size = _varint(a, p)
        p = p + size
        self.key_start = p
        p = p + np.maximum(self.key_len, 0)
        self.value_len, size = _varint(a, p)
        p = p + size
        self.value_start = p
        p = p + np.maximum(self.value_len, 0)
        self.header_count, size = _varint(a, p)
        self.after = p + size
        self.n = n
        if n and (self.after > self.end).any():
            raise MalformedRecords("record fields run past the record's length")
        if n and (self.header_count < 0).any():
            raise MalformedRecords("negative header count")

    def headers(self) -> tuple[np.ndarray, ...]:
        """(record, key start, key length, value start, value length) of every header,
        in record order, then header order; checks that records end where they say."""
        a, hc = self.a, self.header_count
        recs, ks, kl, vs, vl = [], [], [], [], []
        p = self.after.copy()
        idx = np.flatnonzero(hc > 0)
        j = 0
        while idx.size:
            q = p[idx]
            klen, size = _varint(a, q)
            if (klen < 0).any():
                raise MalformedRecords("header key with a negative length")
            q = q + size
            kstart = q
            q = q + klen
            vlen, size = _varint(a, q)
            q = q + size
            vstart = q
            q = q + np.maximum(vlen, 0)
            p[idx] = q
            recs.append(idx)
            ks.append(kstart)
            kl.append(klen)
            vs.append(vstart)
            vl.append(vlen)
            j += 1
            idx = idx[hc[idx] > j]
        if self.n and (p != self.end).any():
            raise MalformedRecords("record length does not match its fields")
        if not recs:
            e = np.empty(0, np.int64)
            return e, e, e, e, e
        rec = np.concatenate(recs)
        order = np.argsort(rec, kind="stable")  # stable: header order within a record
        return (rec[order], np.concatenate(ks)[order], np.concatenate(kl)[order],
                np.concatenate(vs)[order], np.concatenate(vl)[order])


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
    buf = buf + _PAD
    r = _Records(buf, blocks)
    n = r.n
    counts = np.array([c for _, _, c, _ in blocks], np.int64)
    info = np.array([(b.base_offset, b.first_timestamp, b.max_timestamp, b.attributes & ATTR_TIMESTAMP_TYPE)
                     for _, _, _, b in blocks], np.int64).reshape(-1, 4)
    per = np.repeat(np.arange(len(blocks)), counts)
    offsets = info[per, 0] + r.offset_delta
    i0, i1 = (int(x) for x in np.searchsorted(offsets, [lo, hi]))
    if i0 >= i1:
        return None
    log_append = info[per, 3] != 0
    ts = np.where(log_append, info[per, 2], info[per, 1] + r.ts_delta)
    want = set(names)
    need_headers = bool(want & {"headers", "properties", "tag", "protocol"})
    cols: dict[str, pa.Array] = {}
    pabuf = pa.py_buffer(buf)
    w12 = np.lib.stride_tricks.sliding_window_view(r.a, 12)
    if "key" in want:
        cols["key"] = _bytes_array(w12, pabuf, r.key_start, r.key_len, pa.binary())
    if "value" in want:
        cols["value"] = _bytes_array(w12, pabuf, r.value_start, r.value_len, pa.binary())
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
    if need_headers:
        cols.update(_header_columns(r, buf, w12, pabuf, want))
    else:
        r.headers()  # still check every record's length against its fields
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


def _header_columns(r: _Records, buf: bytes, w12: np.ndarray, pabuf: pa.Buffer, want: set[str]) -> dict[str, pa.Array]:
    n = r.n
    rec, ks, kl, vs, vl = r.headers()
    # the envelope: a last header named logbus.envelope
    last = np.zeros(len(rec), bool)
    if len(rec):
        last[:-1] = rec[1:] != rec[:-1]
        last[-1] = True
    cand = np.flatnonzero(last & (kl == len(ENVELOPE_HEADER)) & (vl >= 0))
    if cand.size:
        match = (r.a[ks[cand][:, None] + np.arange(len(_ENV))] == _ENV).all(axis=1)
        cand = cand[match]
    env_index = np.zeros(n, np.int64)  # 0: no envelope
    uniques: list[tuple[str | None, str | None, list[tuple[str, str]]]] = [(None, None, [])]
    is_env = np.zeros(len(rec), bool)
    if cand.size:
        # each distinct envelope is parsed once: hash them in Arrow, parse the uniques
        encoded = _bytes_array(w12, pabuf, vs[cand], vl[cand], pa.binary()).dictionary_encode()
        slot = np.zeros(len(encoded.dictionary), np.int64)  # unique -> index in uniques, 0: bad
        for i, data in enumerate(encoded.dictionary.to_pylist()):
            parsed = _parse_envelope(data)
            if parsed is not None:
                slot[i] = len(uniques)
                uniques.append(parsed)
        found = slot[encoded.indices.to_numpy(zero_copy_only=False)]
        good = found > 0
        is_env[cand[good]] = True
        env_index[rec[cand[good]]] = found[good]
    cols: dict[str, pa.Array] = {}
    take = pa.array(env_index, pa.int64())
    if "protocol" in want:
        cols["protocol"] = pa.array([u[0] for u in uniques], pa.string()).take(take)
    if "tag" in want:
        cols["tag"] = pa.array([u[1] for u in uniques], pa.string()).take(take)
    if "properties" in want:
        cols["properties"] = pa.array([u[2] for u in uniques], PROPERTIES_TYPE).take(take)
    if "headers" in want:
        user = ~is_env
        urec = rec[user]
        per_record = np.bincount(urec, minlength=n)
        offs = np.zeros(n + 1, np.int32)
        np.cumsum(per_record, out=offs[1:])
        keys = _bytes_array(w12, pabuf, ks[user], kl[user], pa.binary())
        try:
            keys = keys.cast(pa.string())
        except pa.ArrowInvalid:  # not UTF-8: decode leniently, as a Java String would
            keys = pa.array([k.decode("utf-8", "replace") for k in keys.to_pylist()], pa.string())
        values = _bytes_array(w12, pabuf, vs[user], vl[user], pa.binary())
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
