"""Kafka wire protocol, sans I/O: framing, request headers, response encoding.

A connection's byte stream is a sequence of frames, each an int32 size followed by
that many bytes. A request frame starts with ``api_key: int16, api_version: int16,
correlation_id: int32``, then the client id and (for flexible versions) tagged fields,
then the body. Bodies are decoded and responses encoded with kafka-python's classes,
which are generated from Apache Kafka's own JSON schemas; record bytes inside Produce
and Fetch pass through untouched.

    decoder = FrameDecoder(max_frame=100 << 20)
    for frame in decoder.feed(data):          # FrameTooLarge / MalformedFrame: close
        req = parse_request(frame, SUPPORTED)  # UnknownApi / UnsupportedVersion
        ... handler(req.body) -> response ...
        out = encode_response(req, response)

The size is checked against the limit before anything is allocated, and an
incomplete frame stays in the decoder's buffer ("need more data" is not an error).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Sequence

from ...core.types import FileSpan  # (path, position, size) of stored batches

DEFAULT_MAX_FRAME = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")  # api_key, api_version, correlation_id


class KafkaProtocolError(Exception):
    """The peer broke the protocol; the connection is closed (Kafka has no error
    frame for these), with this message logged as the reason."""


class FrameTooLarge(KafkaProtocolError):
    pass


class MalformedFrame(KafkaProtocolError):
    pass


class UnknownApi(KafkaProtocolError):
    def __init__(self, api_key: int, correlation_id: int) -> None:
        super().__init__(f"unknown or unsupported API key {api_key}")
        self.api_key = api_key
        self.correlation_id = correlation_id


class UnsupportedVersion(KafkaProtocolError):
    def __init__(self, api_key: int, version: int, correlation_id: int, supported: tuple[int, int]) -> None:
        super().__init__(f"API key {api_key} version {version} is not supported ({supported[0]}..{supported[1]})")
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id


class FrameDecoder:
    """Split a byte stream into frames (without their size prefix).

    Each frame's bytes are copied once: a frame that arrives whole inside one chunk is
    sliced out of it, and a frame spread over several chunks (a 1 MiB produce request
    arrives in 64 KiB reads) is kept as a list of views and joined once complete."""

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._head = bytearray()  # a size prefix cut short
        self._size = -1  # size of the frame being collected, -1: reading a prefix
        self._parts: list[memoryview] = []
        self._have = 0

    @property
    def buffered(self) -> int:
        return len(self._head) + self._have + (4 if self._size >= 0 else 0)

    def clear(self) -> None:
        """Forget an unfinished frame (the connection is gone): its memory is freed now."""
        self._head.clear()
        self._parts.clear()
        self._size, self._have = -1, 0

    def feed(self, data: bytes) -> list[bytes]:
        frames: list[bytes] = []
        view = memoryview(data)
        pos, end = 0, len(data)
        while pos < end:
            if self._size < 0:
                if self._head or end - pos < 4:
                    take = min(4 - len(self._head), end - pos)
                    self._head += view[pos : pos + take]
                    pos += take
                    if len(self._head) < 4:
                        break
                    (size,) = _SIZE.unpack(self._head)
                    self._head.clear()
                else:
                    (size,) = _SIZE.unpack_from(data, pos)
                    pos += 4
                if size < 0:
                    raise MalformedFrame(f"negative frame size {size}")
                if size > self.max_frame:
                    raise FrameTooLarge(f"frame of {size} bytes exceeds the limit of {self.max_frame}")
                if end - pos >= size:  # the whole frame is here
                    frames.append(bytes(view[pos : pos + size]))
                    pos += size
                    continue
                self._size, self._have = size, 0
            take = min(self._size - self._have, end - pos)
            self._parts.append(view[pos : pos + take])
            self._have += take
            pos += take
            if self._have == self._size:
                frames.append(b"".join(self._parts))
                self._parts.clear()
                self._size, self._have = -1, 0
        return frames


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kafka-python request object
    response_class: Any  # the kafka-python response class (unversioned)


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame."""
    if len(frame) < _HEAD.size:
        raise MalformedFrame(f"request frame of {len(frame)} bytes is shorter than its header")
    return _HEAD.unpack_from(frame)  # type: ignore[return-value]


def parse_request(frame: bytes, supported: dict[int, tuple[Any, Any, int, int]]) -> Request:
    """Decode a request frame. ``supported`` maps api_key to (request class, response
    class, min version, max version)."""
    api_key, version, correlation_id = peek_header(frame)
    entry = supported.get(api_key)
    if entry is None:
        raise UnknownApi(api_key, correlation_id)
    req_cls, resp_cls, lo, hi = entry
    if not lo <= version <= hi:
        raise UnsupportedVersion(api_key, version, correlation_id, (lo, hi))
    try:
        body = req_cls.decode(frame, version=version, header=True)
    except Exception as e:  # the generated decoders raise several kinds on short/bad input
        raise MalformedFrame(f"cannot decode {req_cls.__name__} v{version}: {e!r}") from None
    client_id = body.header.client_id if body.header is not None else None
    return Request(api_key, version, correlation_id, client_id, body, resp_cls)


def encode_response(req: Request, response: Any) -> bytes:
    """The framed response to ``req`` (header version chosen by the response class)."""
    return frame_response(response, req.api_version, req.correlation_id)


def frame_response(response: Any, version: int, correlation_id: int) -> bytes:
    # the version goes first: setting it after with_header() touches request-only fields
    response.API_VERSION = version
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


# -- Fetch responses, encoded without copying record bytes ----------------------------
#
# Fetch v4..v11 responses are not "flexible" (no tagged fields, no compact arrays), so
# their layout is fixed. They are built as a list of chunks in which each partition's
# records appear either as bytes or as ranges of the log's segment files, which the
# connection sends with sendfile(2) (protocol.py). tests/unit/test_kafka_codec.py checks
# this encoder byte for byte against kafka-python's generated FetchResponse encoder.

FAST_FETCH_VERSIONS = range(4, 12)
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART = struct.Struct(">ihqq")  # partition, error, high watermark, last stable offset
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset


@dataclass(frozen=True, slots=True)
class FetchPartition:
    index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes | Sequence[FileSpan]
    aborted: Sequence[tuple[int, int]] = ()  # (producer id, first offset) of aborted transactions


class Chunks(list[bytes | FileSpan]):
    """A response already encoded as chunks: bytes, and file ranges to be sent as they
    are (gateway/output.py: with sendfile, or read where sendfile cannot be used)."""


def _records_size(records: bytes | Sequence[FileSpan]) -> int:
    if isinstance(records, bytes):
        return len(records)
    return sum(r.size for r in records)


def encode_fetch_response(
    version: int,
    correlation_id: int,
    error_code: int,
    topics: list[tuple[str, list[FetchPartition]]],
) -> Chunks:
    if version not in FAST_FETCH_VERSIONS:
        raise ValueError(f"Fetch v{version} is not encoded here")
    head = bytearray(_I32.pack(0))  # frame size, filled in below
    head += _I32.pack(correlation_id)
    head += _I32.pack(0)  # throttle_time_ms
    if version >= 7:
        head += _I16.pack(error_code) + _I32.pack(0)  # error_code, session_id
    head += _I32.pack(len(topics))
    chunks = Chunks()
    buf = head
    for name, parts in topics:
        raw = name.encode()
        buf += _I16.pack(len(raw)) + raw + _I32.pack(len(parts))
        for p in parts:
            buf += _PART.pack(p.index, p.error_code, p.high_watermark, p.last_stable_offset)
            if version >= 5:
                buf += _I64.pack(p.log_start_offset)
            buf += _I32.pack(len(p.aborted))  # aborted_transactions
            for producer_id, first_offset in p.aborted:
                buf += _ABORTED.pack(producer_id, first_offset)
            if version >= 11:
                buf += _I32.pack(-1)  # preferred_read_replica
            size = _records_size(p.records)
            buf += _I32.pack(size)
            if size:
                chunks.append(bytes(buf))
                if isinstance(p.records, bytes):
                    chunks.append(p.records)
                else:
                    chunks.extend(p.records)
                buf = bytearray()
    if buf:
        chunks.append(bytes(buf))
    size = sum(len(c) if isinstance(c, bytes) else c.size for c in chunks) - 4
    first = chunks[0]
    assert isinstance(first, bytes)
    chunks[0] = _I32.pack(size) + first[4:]
    return chunks
