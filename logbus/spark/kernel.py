"""The record-by-record part of decoding, compiled (numba): walking RecordBatch v2 records.

Theory of operation. A Kafka record is a run of zigzag varints and byte strings
(format.md section 4.3):

    length, attributes:int8, timestampDelta, offsetDelta, keyLength, key,
    valueLength, value, headerCount, [headerKeyLength, headerKey, headerValueLength,
    headerValue] * headerCount

Record boundaries form a chain (each record's length says where the next one starts),
so some loop must visit every record. In Python that loop alone cost ~0.3 us a record,
and numpy cannot follow a chain (decision 0011 has the measurements), so it is written
here once, compiled by numba to machine code: ``scan`` walks every record of a chunk
once and returns its fields as arrays (and where a ``logbus.envelope`` last header's
value is), checking every length against the bytes it covers, so a malformed record is
reported rather than read past. ``headers`` lists the headers of records ``scan``
accepted, for the ``headers`` column. Byte strings become Arrow ``binary_view`` structs
(16 bytes: the length, then the bytes themselves when at most 12, else a 4-byte prefix
and the int32 position, so a chunk stays under 2 GiB), written by ``scan`` for keys and
values and by ``views`` for other (start, length) pairs; Arrow's C++ ``cast`` gathers
them into a ``binary`` column.

The kernels never raise (numba exceptions would cross into Python as opaque errors):
``scan`` returns a status code, ``MESSAGES[status]`` its meaning. Compiled code is cached
on disk (``cache=True``), so a Spark Python worker compiles only once per install.
"""

from __future__ import annotations

import numpy as np
from numba import njit

MESSAGES = {
    1: "varint longer than 10 bytes, or past the end of its record",
    2: "record runs past the end of its batch",
    3: "record shorter than its fixed fields",
    4: "record fields run past the record's length",
    5: "negative header count",
    6: "header key with a negative length",
    7: "record length does not match its fields",
    8: "records do not end where their batch ends",
    9: "record offsets out of order or outside their batch",
}

# scan's input: one row per block (a batch's records)
B_START, B_END, B_COUNT, B_BASE_OFFSET, B_FIRST_TS, B_MAX_TS, B_LOG_APPEND, B_LAST_DELTA, B_FIELDS = range(9)
# scan's output: rows of int64 with one entry per record (timestamps in microseconds;
# the envelope: the value of a last header named as ``env``, -1 when there is none)
OFFSET, TIMESTAMP_US, TS_TYPE, KEY_START, KEY_LEN, VALUE_START, VALUE_LEN, ENV_START, ENV_LEN, FIELDS = range(10)
# headers' output: rows with one entry per header
H_KEY_START, H_KEY_LEN, H_VALUE_START, H_VALUE_LEN, H_FIELDS = range(5)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _varint(a: np.ndarray, p: int, limit: int) -> tuple[int, int]:
    """(zigzag value, position after it) of the varint at ``p``; position -1 when it is
    longer than 10 bytes or reaches ``limit``. One and two bytes take a short path."""
    if p + 1 < limit:
        b = a[p]
        if b < 128:
            v = int(b)
            return (v >> 1) ^ -(v & 1), p + 1
        c = a[p + 1]
        if c < 128:
            v = int(b & 127) | (int(c) << 7)
            return (v >> 1) ^ -(v & 1), p + 2
    v = 0
    shift = 0
    for i in range(10):
        if p + i >= limit:
            return 0, -1
        b = a[p + i]
        v |= int(b & 127) << shift
        if b < 128:
            return (v >> 1) ^ -(v & 1), p + i + 1
        shift += 7
    return 0, -1


@njit(cache=True, nogil=True, boundscheck=False)
def scan(a: np.ndarray, blocks: np.ndarray, env: np.ndarray, key_views: bool, value_views: bool) -> tuple:
    """Every record of ``blocks`` (int64 (blocks, B_FIELDS): the records of a batch at
    ``[B_START, B_END)`` of ``a``, uint8). Returns (status, index of the record at
    fault, fields: int64 (FIELDS, records), header offsets: int64 (records + 1), where
    each record's headers start: int64 (records), the keys' and the values' Arrow views
    (as ``views`` makes them; empty unless asked for)). Lengths of -1 are nulls."""
    n = 0
    for b in range(len(blocks)):
        n += blocks[b, B_COUNT]
    kv = np.zeros((n if key_views else 0, 16), np.uint8)
    vv = np.zeros((n if value_views else 0, 16), np.uint8)
    kw = kv.view(np.int32)
    vw = vv.view(np.int32)
    fields = np.empty((FIELDS, n), np.int64)
    hoff = np.zeros(n + 1, np.int64)
    hpos = np.empty(n, np.int64)
    el = len(env)
    r = 0
    last_offset = -(2**63)
    for b in range(len(blocks)):
        p = blocks[b, B_START]
        block_end = blocks[b, B_END]
        base = blocks[b, B_BASE_OFFSET]
        log_append = blocks[b, B_LOG_APPEND]
        for _ in range(blocks[b, B_COUNT]):
            if p >= block_end:
                return 2, r, fields, hoff, hpos, kv, vv
            length, q = _varint(a, p, block_end)
            if q < 0:
                return 1, r, fields, hoff, hpos, kv, vv
            end = q + length
            if end > block_end or length < 0:
                return 2, r, fields, hoff, hpos, kv, vv
            if length < 6:
                return 3, r, fields, hoff, hpos, kv, vv
            q += 1  # attributes
            ts, q = _varint(a, q, end)
            if q < 0:
                return 1, r, fields, hoff, hpos, kv, vv
            od, q = _varint(a, q, end)
            if q < 0:
                return 1, r, fields, hoff, hpos, kv, vv
            if od < 0 or od > blocks[b, B_LAST_DELTA] or base + od <= last_offset:
                return 9, r, fields, hoff, hpos, kv, vv
            last_offset = base + od
            fields[OFFSET, r] = last_offset
            fields[TIMESTAMP_US, r] = (blocks[b, B_MAX_TS] if log_append else blocks[b, B_FIRST_TS] + ts) * 1000
            fields[TS_TYPE, r] = log_append
            for c in range(2):  # the key, then the value
                ln, q = _varint(a, q, end)
                if q < 0:
                    return 1, r, fields, hoff, hpos, kv, vv
                fields[KEY_START + 2 * c, r] = q
                fields[KEY_LEN + 2 * c, r] = ln
                if ln > 0:
                    if q + ln > end:
                        return 4, r, fields, hoff, hpos, kv, vv
                    if c == 0 and key_views:
                        _view(a, kv, kw, r, q, ln)
                    elif c == 1 and value_views:
                        _view(a, vv, vw, r, q, ln)
                    q += ln
            hc, q = _varint(a, q, end)
            if q < 0:
                return 1, r, fields, hoff, hpos, kv, vv
            if hc < 0:
                return 5, r, fields, hoff, hpos, kv, vv
            hpos[r] = q
            hoff[r + 1] = hoff[r] + hc
            fields[ENV_START, r] = -1
            fields[ENV_LEN, r] = -1
            for h in range(hc):
                kl, q = _varint(a, q, end)
                if q < 0:
                    return 1, r, fields, hoff, hpos, kv, vv
                if kl < 0:
                    return 6, r, fields, hoff, hpos, kv, vv
                ks = q
                q += kl
                if q > end:
                    return 4, r, fields, hoff, hpos, kv, vv
                vl, q = _varint(a, q, end)
                if q < 0:
                    return 1, r, fields, hoff, hpos, kv, vv
                if h == hc - 1 and kl == el and vl >= 0:
                    same = True
                    for j in range(el):
                        if a[ks + j] != env[j]:
                            same = False
                            break
                    if same:
                        fields[ENV_START, r] = q
                        fields[ENV_LEN, r] = vl
                if vl > 0:
                    q += vl
                    if q > end:
                        return 4, r, fields, hoff, hpos, kv, vv
            if q != end:
                return 7, r, fields, hoff, hpos, kv, vv
            p = end
            r += 1
        if p != block_end:
            return 8, r - 1, fields, hoff, hpos, kv, vv
    return 0, 0, fields, hoff, hpos, kv, vv


@njit(cache=True, nogil=True, boundscheck=False)
def headers(a: np.ndarray, hpos: np.ndarray, hoff: np.ndarray) -> np.ndarray:
    """Every header of records that ``scan`` accepted: int64 (H_FIELDS, headers)."""
    out = np.empty((H_FIELDS, hoff[-1]), np.int64)
    limit = len(a)
    for r in range(len(hpos)):
        q = hpos[r]
        for h in range(hoff[r], hoff[r + 1]):
            kl, q = _varint(a, q, limit)
            out[H_KEY_START, h] = q
            out[H_KEY_LEN, h] = kl
            q += kl
            vl, q = _varint(a, q, limit)
            out[H_VALUE_START, h] = q
            out[H_VALUE_LEN, h] = vl
            if vl > 0:
                q += vl
    return out


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _view(a: np.ndarray, out: np.ndarray, words: np.ndarray, i: int, s: int, ln: int) -> None:
    """Row ``i`` of ``out`` (zeros; ``words``: it as int32): the view of ``ln`` > 0 bytes
    of ``a`` at ``s``."""
    words[i, 0] = ln
    if ln <= 12:
        for j in range(ln):
            out[i, 4 + j] = a[s + j]
    else:
        for j in range(4):
            out[i, 4 + j] = a[s + j]
        words[i, 3] = s


@njit(cache=True, nogil=True, boundscheck=False)
def views(a: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Arrow binary-view structs (uint8, (len(start), 16)) for the byte strings of ``a``
    at ``start`` of ``length`` (a negative length: an empty view, for a null)."""
    n = len(start)
    out = np.zeros((n, 16), np.uint8)
    words = out.view(np.int32)
    for i in range(n):
        if length[i] > 0:
            _view(a, out, words, i, start[i], length[i])
    return out
