"""Message: the one in-memory shape of a message, whatever protocol carried it.

A ``Message`` is a log ``Record`` (key, value, timestamp, user headers) plus an
``Envelope`` of system properties (``envelope.proto``). On disk the envelope travels
as ONE reserved record header, ``ENVELOPE_HEADER``, holding the serialized Envelope:

- written only when the envelope is non-empty, so plain records stay plain;
- always the LAST header, after the user headers;
- stripped again by ``from_record``; a record without it (a plain Kafka producer's)
  gives an empty Envelope.

A Kafka consumer or Spark therefore sees an ordinary record with one extra header.
User headers may not use the reserved name (``to_record`` raises ValueError), so a
reserved header anywhere but last, or one that does not parse, means the record was
not written by us or was damaged: ``from_record`` raises ``CorruptBatch``.

Both conversions sit on the publish and deliver hot paths: they share the header
list instead of copying it when nothing is added or removed, so a ``Record`` made by
``to_record`` and the ``Message`` it came from may share ``headers``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError

from .envelope_pb2 import Envelope
from .errors import CorruptBatch, PreconditionFailed
from .log.batch import Record

__all__ = ["ENVELOPE_HEADER", "Envelope", "Message"]

ENVELOPE_HEADER = "logbus.envelope"

_parse_envelope = Envelope.FromString
_new_tuple = tuple.__new__  # what Record._make uses: skips the Python-level __new__


@dataclass(slots=True, init=False)
class Message:
    key: bytes | None = None
    value: bytes | None = None
    timestamp: int | None = None  # epoch milliseconds; None: the append time
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)  # user properties
    envelope: Envelope = field(default_factory=Envelope)
    # The properties as the publisher's protocol encoded them (``envelope.protocol``;
    # the AMQP gateway delivers them unchanged while the message is in memory, as
    # RabbitMQ keeps the content header). Never stored: a message read back from the
    # log has None and its properties are built from the envelope.
    origin_properties: bytes | None = field(default=None, compare=False, repr=False)
    # What every delivery of this message in a protocol repeats, encoded by that
    # protocol's gateway on the first one, by protocol name; never stored.
    encoded: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    # What ``to_record`` would make of ``headers`` and ``envelope``, when the publisher
    # already has it (messages with equal properties share one); never stored.
    record_headers: list[tuple[str, bytes | None]] | None = field(default=None, compare=False, repr=False)
    # What a selector sees of this message (``filters.properties.record_properties``):
    # (log topic, properties), built at the first filter that asks; never stored.
    selector_properties: tuple[str, Any] | None = field(default=None, compare=False, repr=False)
    # The typed headers the publisher's gateway decoded (AMQP's field table), which a
    # headers exchange routes by and a delayed exchange reads the delay from
    # (core/pipeline.py); never stored: read back from the log, ``Forms.headers`` gives them.
    routing_headers: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    # Written out, not generated: mypyc compiles this one; a dataclass's generated
    # ``__init__`` runs interpreted (one per message; decision 0055). ``headers`` and
    # ``envelope`` left out (None): a new list, an empty Envelope.
    def __init__(self, key: bytes | None = None, value: bytes | None = None, timestamp: int | None = None,
                 headers: list[tuple[str, bytes | None]] | None = None, envelope: Envelope | None = None,
                 origin_properties: bytes | None = None, encoded: dict[str, Any] | None = None,
                 record_headers: list[tuple[str, bytes | None]] | None = None,
                 selector_properties: tuple[str, Any] | None = None,
                 routing_headers: Mapping[str, Any] | None = None) -> None:
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.headers = [] if headers is None else headers
        self.envelope = Envelope() if envelope is None else envelope
        self.origin_properties = origin_properties
        self.encoded = encoded
        self.record_headers = record_headers
        self.selector_properties = selector_properties
        self.routing_headers = routing_headers

    def to_record(self) -> Record:
        """The record to append: user headers, then the envelope header if non-empty."""
        if self.record_headers is not None:
            return _new_tuple(Record, (self.key, self.value, self.timestamp, self.record_headers))
        headers = self.headers
        for name, _ in headers:
            if name == ENVELOPE_HEADER:
                raise ValueError(f"header name {ENVELOPE_HEADER!r} is reserved for the envelope")
        data = self.envelope.SerializeToString()
        if data:
            headers = [*headers, (ENVELOPE_HEADER, data)]
        return _new_tuple(Record, (self.key, self.value, self.timestamp, headers))

    @classmethod
    def from_record(cls, record: Record) -> Message:
        """The message a record holds; raises CorruptBatch on a bad envelope header."""
        key, value, timestamp, headers = record
        if not headers:
            # A fresh list: never alias Record's shared default ``[]``.
            return cls(key, value, timestamp, [], Envelope())
        name, data = headers[-1]
        if name == ENVELOPE_HEADER:
            if data is None:
                raise CorruptBatch(f"record header {ENVELOPE_HEADER!r} has no value")
            try:
                envelope = _parse_envelope(data)
            except DecodeError as e:
                raise CorruptBatch(
                    f"record header {ENVELOPE_HEADER!r} is not a valid Envelope: {e}"
                ) from e
            headers = headers[:-1]
        else:
            envelope = Envelope()
        for name, _ in headers:
            if name == ENVELOPE_HEADER:
                raise CorruptBatch(
                    f"record header {ENVELOPE_HEADER!r} is reserved and must come last"
                )
        return cls(key, value, timestamp, headers, envelope)


def per_message_ttl(expiration: str | None) -> int | None:
    """A message's ``expiration`` (milliseconds as text, as AMQP carries it) as an int;
    None: absent. Anything but a non-negative integer is refused (PRECONDITION_FAILED,
    RabbitMQ's wording)."""
    if expiration is None or expiration == "":
        return None
    if not expiration.isdigit():
        raise PreconditionFailed(f"invalid expiration '{expiration}': {{value_negative,{expiration}}}"
                                 if expiration.startswith("-") else f"invalid expiration '{expiration}': badarg")
    return int(expiration)
