"""Durable AMQP definitions in RocksDB (CF ``metadata``): exchanges, queues, bindings.

What RabbitMQ keeps in its schema database. Only durable things are stored: a durable
exchange, a durable queue, and a binding whose both ends are durable (RabbitMQ drops
bindings to transient queues at restart). Arguments are stored as the AMQP field table
the client sent (pamqp's encoding), so a restart declares the same thing again. The
vhost restores them in the order exchanges, queues, bindings (``VHost.load``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pamqp import decode, encode

from ....core.routing.definitions import Binding, ExchangeDef
from ....core.state import (
    BINDING_PREFIX,
    EXCHANGE_PREFIX,
    QUEUE_PREFIX,
    StateStore,
    binding_key,
    definitions_prefix,
    exchange_key,
    queue_key,
)
from ....core.state_pb2 import BindingRecord, ExchangeRecord, QueueRecord

CF_METADATA = "metadata"


def encode_table(arguments: Mapping[str, Any] | None) -> bytes:
    return encode.field_table(dict(arguments)) if arguments else b""


def decode_table(raw: bytes) -> dict[str, Any]:
    return dict(decode.field_table(raw)[1]) if raw else {}


def _binding_key(vhost: str, b: Binding) -> bytes:
    digest = hashlib.sha1(repr(b.arguments).encode()).digest()[:8]
    return binding_key(vhost, b.source, b.destination_kind, b.destination, b.routing_key, digest)


@dataclass(frozen=True, slots=True)
class Definitions:
    exchanges: list[ExchangeRecord]
    queues: list[QueueRecord]
    bindings: list[BindingRecord]


class DefinitionStore:
    def __init__(self, store: StateStore | None, vhost: str) -> None:
        self.store = store
        self.vhost = vhost

    def save_exchange(self, ex: ExchangeDef, arguments: Mapping[str, Any] | None) -> None:
        if self.store is None or not ex.durable:
            return
        rec = ExchangeRecord(name=ex.name, kind=ex.kind, auto_delete=ex.auto_delete, internal=ex.internal,
                             arguments=encode_table(arguments))
        if ex.topic is not None:
            rec.topic = ex.topic
        self.store.put(CF_METADATA, exchange_key(self.vhost, ex.name), rec, sync=True)

    def save_queue(self, name: str, auto_delete: bool, arguments: Mapping[str, Any] | None) -> None:
        if self.store is None:
            return
        rec = QueueRecord(name=name, auto_delete=auto_delete, arguments=encode_table(arguments))
        self.store.put(CF_METADATA, queue_key(self.vhost, name), rec, sync=True)

    def save_binding(self, b: Binding, arguments: Mapping[str, Any] | None) -> None:
        if self.store is None:
            return
        rec = BindingRecord(source=b.source, destination=b.destination, destination_kind=b.destination_kind,
                            routing_key=b.routing_key, arguments=encode_table(arguments))
        self.store.put(CF_METADATA, _binding_key(self.vhost, b), rec, sync=True)

    def removed(self, *, queues: tuple[str, ...] = (), exchanges: tuple[ExchangeDef, ...] = (),
                bindings: tuple[Binding, ...] = ()) -> None:
        """Delete the records of what an operation removed, in one batch."""
        if self.store is None or not (queues or exchanges or bindings):
            return
        with self.store.batch(sync=True) as wb:
            for q in queues:
                wb.delete(CF_METADATA, queue_key(self.vhost, q))
            for ex in exchanges:
                wb.delete(CF_METADATA, exchange_key(self.vhost, ex.name))
            for b in bindings:
                wb.delete(CF_METADATA, _binding_key(self.vhost, b))

    def load(self) -> Definitions:
        if self.store is None:
            return Definitions([], [], [])

        def scan(prefix: bytes, kind: Any) -> list[Any]:
            assert self.store is not None
            return [kind.FromString(v) for _, v in
                    self.store.scan_prefix(CF_METADATA, definitions_prefix(prefix, self.vhost))]

        return Definitions(scan(EXCHANGE_PREFIX, ExchangeRecord), scan(QUEUE_PREFIX, QueueRecord),
                           scan(BINDING_PREFIX, BindingRecord))
