"""Content properties by *shape*: the property bytes without the message-id and
timestamp values, the two properties a publisher may set anew on every message
(aio-pika sends a fresh message-id with each). Messages of one shape differ in those
two at most, so a shape decoded once is not decoded again, and mapping.py builds one
envelope per shape (docs/decisions/0009, addendum).
"""

from __future__ import annotations

import struct

from .fastpath import U32, Properties, decode_properties

_U64 = struct.Struct(">Q")
_new_tuple = tuple.__new__

_SEEN: dict[bytes, Properties] = {}  # property bytes a publisher repeats -> decoded
_SHAPES: dict[bytes, Properties] = {}  # the same without message-id and timestamp -> decoded
_CACHE_MAX = 512


def properties_of(buf: bytes, p: int, end: int) -> tuple[Properties, bytes, bytes]:
    """The properties in ``buf[p:end]``, those bytes, and their *shape*: the bytes without
    the message-id and timestamp values, the two properties a publisher may set anew on
    every message (aio-pika sets a fresh message-id on each). Messages whose shape is
    equal differ in those two at most, so a shape seen before is not decoded again
    (mapping.py builds one envelope per shape, too). Sets with a non-empty headers
    table (whose dict could be changed by whoever gets it) are decoded every time."""
    raw = buf[p:end]
    props = _SEEN.get(raw)
    if props is not None:
        return props, raw, raw
    span = _identity_span(raw)
    if span is None:  # not plain: the decoder says what is wrong, if anything
        return decode_properties(buf, p, end), raw, raw
    start, stop = span
    if start == stop:
        shape = raw
    else:
        shape = raw[:start] + raw[stop:]
        template = _SHAPES.get(shape)
        if template is not None:
            try:
                return _with_identity(template, raw, start, stop), raw, shape
            except UnicodeDecodeError:
                pass  # the decoder reports it
    props = decode_properties(buf, p, end)
    if not props.headers:
        if start == stop:
            if props.headers is None:
                if len(_SEEN) >= _CACHE_MAX:
                    _SEEN.clear()
                _SEEN[raw] = props
        else:
            if len(_SHAPES) >= _CACHE_MAX:
                _SHAPES.clear()
            _SHAPES[shape] = props._replace(message_id=None, timestamp=None)
    return props, raw, shape


def _identity_span(raw: bytes) -> tuple[int, int] | None:
    """Where the message-id and timestamp values lie in the property list ``raw``
    (start, stop: equal when it has neither), or None when ``raw`` has more than one
    flag word or does not parse as far as lengths go."""
    n = len(raw)
    if n < 2:
        return None
    flags = raw[0] << 8 | raw[1]
    if flags & 3:
        return None
    p = 2
    try:
        if flags & 0x8000:
            p += 1 + raw[p]
        if flags & 0x4000:
            p += 1 + raw[p]
        if flags & 0x2000:
            p += 4 + U32.unpack_from(raw, p)[0]
        if flags & 0x1000:
            p += 1
        if flags & 0x0800:
            p += 1
        if flags & 0x0400:
            p += 1 + raw[p]
        if flags & 0x0200:
            p += 1 + raw[p]
        if flags & 0x0100:
            p += 1 + raw[p]
        start = p
        if flags & 0x0080:
            p += 1 + raw[p]
        if flags & 0x0040:
            p += 8
        stop = p
        if flags & 0x0020:
            p += 1 + raw[p]
        if flags & 0x0010:
            p += 1 + raw[p]
        if flags & 0x0008:
            p += 1 + raw[p]
        if flags & 0x0004:
            p += 1 + raw[p]
    except (IndexError, struct.error):
        return None
    return (start, stop) if p == n else None


def _with_identity(template: Properties, raw: bytes, start: int, stop: int) -> Properties:
    """``template`` (a shape's properties) with the message-id and timestamp in
    ``raw[start:stop]``."""
    flags = raw[1]
    message_id = timestamp = None
    p = start
    if flags & 0x80:
        q = p + 1 + raw[p]
        message_id = raw[p + 1 : q].decode()
        p = q
    if flags & 0x40:
        timestamp = _U64.unpack_from(raw, p)[0]
    values = list(template)
    if values[2] is not None:
        values[2] = {}  # an empty table: each message gets its own dict
    values[8] = message_id
    values[9] = timestamp
    return _new_tuple(Properties, values)
