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
once and returns its fields as arrays, checking every length against the bytes it
covers, so a malformed record is reported rather than read past. ``views`` turns
(start, length) pairs into Arrow ``binary_view`` structs (16 bytes: the length, then the
bytes themselves when at most 12, else a 4-byte prefix and the position), from which
Arrow's C++ ``cast`` gathers a ``binary`` column.

The kernels never raise (numba exceptions would cross into Python as opaque errors):
``scan`` returns a status code, ``MESSAGES[status]`` its meaning. Compiled code is cached
on disk (``cache=True``), so a Spark Python worker compiles only once per install.
"""

from __future__ import annotations

import numpy as np
from numba import njit

OK = 0
MESSAGES = {
    1: "varint longer than 10 bytes, or past the end of its record",
    2: "record runs past the end of its batch",
    3: "record shorter than its fixed fields",
    4: "record fields run past the record's length",
    5: "negative header count",
    6: "header key with a negative length",
    7: "record length does not match its fields",
    8: "records do not end where their batch ends",
}

# scan's output: rows of int64 with one entry per record
TS_DELTA, OFFSET_DELTA, KEY_START, KEY_LEN, VALUE_START, VALUE_LEN, FIELDS = 0, 1, 2, 3, 4, 5, 6
# and rows with one entry per header
H_KEY_START, H_KEY_LEN, H_VALUE_START, H_VALUE_LEN, H_FIELDS = 0, 1, 2, 3, 4


@njit(cache=True, nogil=True, boundscheck=False)
def _varint(a: np.ndarray, p: int, limit: int) -> tuple[int, int]:
    """(zigzag value, position after it) of the varint at ``p``; position -1 when it is
    longer than 10 bytes or reaches ``limit``."""
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
def _skip_headers(a: np.ndarray, q: int, count: int, end: int, out: np.ndarray, h: int) -> tuple[int, int]:
    """Parse ``count`` headers at ``q`` (record end ``end``); when ``out`` has rows,
    write them from row ``h``. Returns (position after them, status)."""
    for _ in range(count):
        kl, q = _varint(a, q, end)
        if q < 0:
            return q, 1
        if kl < 0:
            return q, 6
        if out.shape[1]:
            out[0, h] = q
            out[1, h] = kl
        q += kl
        if q > end:
            return q, 4
        vl, q = _varint(a, q, end)
        if q < 0:
            return q, 1
        if out.shape[1]:
            out[2, h] = q
            out[3, h] = vl
        h += 1
        if vl > 0:
            q += vl
        if q > end:
            return q, 4
    return q, 0


@njit(cache=True, nogil=True, boundscheck=False)
def scan(a: np.ndarray, starts: np.ndarray, ends: np.ndarray, counts: np.ndarray) -> tuple:
    """Every record of the blocks ``[starts[i], ends[i])`` holding ``counts[i]`` records
    of ``a`` (uint8). Returns (status, index of the record at fault, fields: int64
    (FIELDS, records), header offsets: int64 (records + 1), headers: int64 (H_FIELDS,
    headers)). Lengths of -1 are nulls."""
    n = 0
    for b in range(len(counts)):
        n += counts[b]
    fields = np.empty((FIELDS, n), np.int64)
    hoff = np.zeros(n + 1, np.int64)
    hpos = np.empty(n, np.int64)
    none = np.empty((H_FIELDS, 0), np.int64)
    r = 0
    for b in range(len(counts)):
        p = starts[b]
        block_end = ends[b]
        for _ in range(counts[b]):
            if p >= block_end:
                return 2, r, fields, hoff, none
            length, q = _varint(a, p, block_end)
            if q < 0:
                return 1, r, fields, hoff, none
            end = q + length
            if end > block_end or length < 0:
                return 2, r, fields, hoff, none
            if length < 6:
                return 3, r, fields, hoff, none
            q += 1  # attributes
            ts, q = _varint(a, q, end)
            if q < 0:
                return 1, r, fields, hoff, none
            od, q = _varint(a, q, end)
            if q < 0:
                return 1, r, fields, hoff, none
            fields[0, r] = ts
            fields[1, r] = od
            for c in range(2):  # the key, then the value
                ln, q = _varint(a, q, end)
                if q < 0:
                    return 1, r, fields, hoff, none
                fields[2 + 2 * c, r] = q
                fields[3 + 2 * c, r] = ln
                if ln > 0:
                    q += ln
                if q > end:
                    return 4, r, fields, hoff, none
            hc, q = _varint(a, q, end)
            if q < 0:
                return 1, r, fields, hoff, none
            if hc < 0:
                return 5, r, fields, hoff, none
            hpos[r] = q
            hoff[r + 1] = hoff[r] + hc
            q, status = _skip_headers(a, q, hc, end, none, 0)
            if status:
                return status, r, fields, hoff, none
            if q != end:
                return 7, r, fields, hoff, none
            p = end
            r += 1
        if p != block_end:
            return 8, r - 1, fields, hoff, none
    headers = np.empty((H_FIELDS, hoff[n]), np.int64)
    for i in range(n):
        if hoff[i + 1] > hoff[i]:
            _skip_headers(a, hpos[i], hoff[i + 1] - hoff[i], a.shape[0], headers, hoff[i])
    return 0, 0, fields, hoff, headers


@njit(cache=True, nogil=True, boundscheck=False)
def views(a: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Arrow binary-view structs (uint8, (len(start), 16)) for the byte strings of ``a``
    at ``start`` of ``length`` (a negative length: an empty view, for a null)."""
    n = len(start)
    out = np.zeros((n, 16), np.uint8)
    words = out.view(np.int32)
    for i in range(n):
        ln = length[i]
        if ln <= 0:
            continue
        s = start[i]
        words[i, 0] = ln
        if ln <= 12:
            for j in range(ln):
                out[i, 4 + j] = a[s + j]
        else:
            for j in range(4):
                out[i, 4 + j] = a[s + j]
            words[i, 3] = s
    return out
