"""Durable definitions of a vhost in RocksDB (CF ``metadata``): exchanges, queues, bindings.

Only durable things are stored: a durable exchange, a durable queue, and a binding whose
both ends are durable (transient queues lose their bindings at restart, as in RabbitMQ).
Everything is in the neutral form (``state.proto``):

- declared arguments as a ``Table`` of typed ``Value``s (``encode_values`` /
  ``decode_values``: None, bool, int, float, Decimal, str, bytes, datetime, lists and
  tables, what any protocol may declare), kept for the declaring protocol's checks;
- a queue's neutral ``QueueSettings`` (``settings_record`` / ``settings_of``), so a
  restart needs no protocol to read them back;
- a binding's filter as its tag expression and selector text.

Records written before the neutral form (``neutral`` unset) hold the arguments as the
declaring protocol encoded them (``legacy_arguments``: the AMQP field table the client
sent); ``load`` refuses them (``LegacyDefinitions``) until ``upgrade`` has rewritten
them, with the ``LegacyTranslation`` of that protocol (the AMQP gateway's,
``gateway/amqp/model/upgrade.py``; the broker runs it at start when the server hands it
one, decision 0021). The vhost restores what ``load`` returns in the order exchanges,
queues, bindings (``VHost.load``).
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import hashlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..filters.message_filter import FilterSpec
from ..retry.policy import RetryPolicy
from .errors import LegacyDefinitions, LogbusError, StorageError
from .queues.queue import DROP_HEAD, QueueLimits
from .queues.service import DeadLetterTarget, QueueSettings
from .routing.definitions import HEADERS, QUEUE, Binding, DestKind, ExchangeDef, HeaderMatch, freeze, freeze_arguments
from .routing.router import PREDECLARED
from .state import (
    BINDING_PREFIX,
    CF_METADATA,
    EXCHANGE_PREFIX,
    QUEUE_PREFIX,
    StateStore,
    binding_key,
    definition_vhost,
    definitions_prefix,
    exchange_key,
    queue_key,
)
from .state_pb2 import BindingRecord, ExchangeRecord, QueueRecord, QueueSettingsRecord, Table, Value

log = logging.getLogger(__name__)


# -- typed values ---------------------------------------------------------------------------


def encode_value(v: Any, out: Value) -> None:
    if v is None:
        out.none = True
    elif isinstance(v, bool):
        out.flag = v
    elif isinstance(v, int):
        out.integer = v
    elif isinstance(v, float):
        out.real = v
    elif isinstance(v, str):
        out.text = v
    elif isinstance(v, (bytes, bytearray, memoryview)):
        out.data = bytes(v)
    elif isinstance(v, decimal.Decimal):
        out.decimal = str(v)
    elif isinstance(v, datetime.datetime):
        out.timestamp_s = int(v.timestamp())
    elif isinstance(v, Mapping):
        encode_values(v, out.table)
    elif isinstance(v, (list, tuple)):
        out.list.SetInParent()
        for item in v:
            encode_value(item, out.list.items.add())
    else:
        raise TypeError(f"an argument value of type {type(v).__name__} cannot be stored")


def decode_value(v: Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind is None or kind == "none":
        return None
    if kind == "decimal":
        return decimal.Decimal(v.decimal)
    if kind == "timestamp_s":
        return datetime.datetime.fromtimestamp(v.timestamp_s, datetime.timezone.utc)
    if kind == "list":
        return [decode_value(i) for i in v.list.items]
    if kind == "table":
        return decode_values(v.table)
    return getattr(v, kind)


def encode_values(values: Mapping[str, Any] | None, out: Table) -> Table:
    out.SetInParent()
    for name, value in (values or {}).items():
        f = out.fields.add()
        f.name = str(name)
        encode_value(value, f.value)
    return out


def decode_values(table: Table) -> dict[str, Any]:
    return {f.name: decode_value(f.value) for f in table.fields}


def thaw(value: Any) -> Any:
    """A frozen argument value (``routing.definitions.freeze``) as a plain one: tables
    were sorted pairs, lists tuples. A frozen table and a frozen list of pairs look
    alike; either way the value freezes back to the same thing."""
    if isinstance(value, tuple):
        if value and all(isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) for v in value):
            return {k: thaw(v) for k, v in value}
        return [thaw(v) for v in value]
    return value


# -- queue settings ---------------------------------------------------------------------------


def settings_record(s: QueueSettings, out: QueueSettingsRecord) -> QueueSettingsRecord:
    out.SetInParent()
    lim, retry = s.limits, s.retry
    if lim.max_length is not None:
        out.max_length = lim.max_length
    if lim.max_length_bytes is not None:
        out.max_length_bytes = lim.max_length_bytes
    out.overflow = lim.overflow
    out.max_priority = lim.max_priority
    if lim.message_ttl_ms is not None:
        out.message_ttl_ms = lim.message_ttl_ms
    out.retry_levels_ms.extend(retry.levels_ms)
    out.retry_initial_ms = retry.initial_ms
    out.retry_multiplier = retry.multiplier
    out.retry_max_delay_ms = retry.max_delay_ms
    if retry.max_deliveries is not None:
        out.max_deliveries = retry.max_deliveries
    if s.dead_letter is not None:
        out.dead_letter = True
        d = s.dead_letter
        if d.exchange is not None:
            out.dead_letter_exchange = d.exchange
        if d.routing_key is not None:
            out.dead_letter_routing_key = d.routing_key
        if d.topic is not None:
            out.dead_letter_topic = d.topic
    if s.expires_ms is not None:
        out.expires_ms = s.expires_ms
    out.single_active_consumer = s.single_active_consumer
    return out


def settings_of(r: QueueSettingsRecord) -> QueueSettings:
    def opt(name: str) -> Any:
        return getattr(r, name) if r.HasField(name) else None

    limits = QueueLimits(opt("max_length"), opt("max_length_bytes"), r.overflow or DROP_HEAD,
                         r.max_priority, opt("message_ttl_ms"))
    retry = RetryPolicy(tuple(r.retry_levels_ms), r.retry_initial_ms, r.retry_multiplier or 2.0,
                        r.retry_max_delay_ms, opt("max_deliveries"))
    dead_letter = (DeadLetterTarget(opt("dead_letter_exchange"), opt("dead_letter_routing_key"),
                                    opt("dead_letter_topic")) if r.dead_letter else None)
    return QueueSettings(limits, retry, dead_letter, opt("expires_ms"), r.single_active_consumer)


# -- records ---------------------------------------------------------------------------------------


def binding_digest(b: Binding) -> bytes:
    """What tells apart bindings with the same ends and key: their arguments and filter.
    A binding without a filter keeps the digest of the form before (its arguments')."""
    text = repr(b.arguments) if b.filter is None else repr((b.arguments, b.filter.tag, b.filter.sql))
    return hashlib.sha1(text.encode()).digest()[:8]


def exchange_record(ex: ExchangeDef, arguments: Mapping[str, Any] | None) -> ExchangeRecord:
    rec = ExchangeRecord(name=ex.name, kind=ex.kind, auto_delete=ex.auto_delete, internal=ex.internal,
                         delayed=ex.delayed, neutral=True)
    encode_values(arguments, rec.arguments)
    if ex.topic is not None:
        rec.topic = ex.topic
    return rec


def queue_record(name: str, auto_delete: bool, settings: QueueSettings,
                 arguments: Mapping[str, Any] | None) -> QueueRecord:
    rec = QueueRecord(name=name, auto_delete=auto_delete, neutral=True)
    encode_values(arguments, rec.arguments)
    settings_record(settings, rec.settings)
    return rec


def binding_record(b: Binding, arguments: Mapping[str, Any] | None) -> BindingRecord:
    rec = BindingRecord(source=b.source, destination=b.destination, destination_kind=b.destination_kind,
                        routing_key=b.routing_key, neutral=True)
    encode_values(arguments, rec.arguments)
    if b.match is not None:
        rec.has_match = True
        rec.match_all = b.match.match_all
        encode_values({k: thaw(v) for k, v in b.match.headers}, rec.match_headers)
    if b.filter is not None:
        if b.filter.tag is not None:
            rec.filter_tag = b.filter.tag
        if b.filter.sql is not None:
            rec.filter_sql = b.filter.sql
    return rec


def binding_match(rec: BindingRecord) -> HeaderMatch | None:
    if not rec.has_match:
        return None
    return HeaderMatch(rec.match_all, tuple((k, freeze(v)) for k, v in decode_values(rec.match_headers).items()))


def binding_filter(rec: BindingRecord) -> FilterSpec | None:
    tag = rec.filter_tag if rec.HasField("filter_tag") else None
    sql = rec.filter_sql if rec.HasField("filter_sql") else None
    return FilterSpec.parse(tag, sql)


@dataclass(frozen=True, slots=True)
class Definitions:
    exchanges: list[ExchangeRecord]
    queues: list[QueueRecord]
    bindings: list[BindingRecord]


class DefinitionStore:
    """One vhost's durable definitions; every write is synced. A save the state store
    refuses raises StorageError (nothing is made). A deletion it refuses (a full disk) is
    kept and made once the store takes writes again (``write_kept``, from
    core/faults.py): what an operation removed is gone from the model at once, whatever
    the store says, and the store catches up, as the queue journal does."""

    def __init__(self, store: StateStore | None, vhost: str) -> None:
        self.store = store
        self.vhost = vhost
        self.kept: set[bytes] = set()  # keys whose deletion the store refused

    def _put(self, key: bytes, record: Any) -> None:
        assert self.store is not None
        self.store.put(CF_METADATA, key, record, sync=True)
        self.kept.discard(key)  # made again: its old deletion must not follow

    def save_exchange(self, ex: ExchangeDef, arguments: Mapping[str, Any] | None) -> None:
        if self.store is None or not ex.durable:
            return
        self._put(exchange_key(self.vhost, ex.name), exchange_record(ex, arguments))

    def save_queue(self, name: str, auto_delete: bool, settings: QueueSettings,
                   arguments: Mapping[str, Any] | None) -> None:
        if self.store is None:
            return
        self._put(queue_key(self.vhost, name), queue_record(name, auto_delete, settings, arguments))

    def save_binding(self, b: Binding, arguments: Mapping[str, Any] | None) -> None:
        if self.store is None:
            return
        key = binding_key(self.vhost, b.source, b.destination_kind, b.destination, b.routing_key, binding_digest(b))
        self._put(key, binding_record(b, arguments))

    def removed(self, *, queues: tuple[str, ...] = (), exchanges: tuple[ExchangeDef, ...] = (),
                bindings: tuple[Binding, ...] = ()) -> None:
        """Delete the records of what an operation removed, in one batch (never raises:
        a deletion the store refuses is kept, ``write_kept``)."""
        if self.store is None or not (queues or exchanges or bindings):
            return
        keys = [queue_key(self.vhost, q) for q in queues]
        keys += [exchange_key(self.vhost, ex.name) for ex in exchanges]
        keys += [binding_key(self.vhost, b.source, b.destination_kind, b.destination, b.routing_key,
                             binding_digest(b)) for b in bindings]
        try:
            with self.store.batch(sync=True) as wb:
                for key in keys:
                    wb.delete(CF_METADATA, key)
        except StorageError as e:
            log.warning("vhost %r: %d removed definitions stay stored until the state store takes writes again: %s",
                        self.vhost, len(keys), e)
            self.kept.update(keys)

    def write_kept(self) -> None:
        """Make the deletions the store refused before (StorageError: still kept)."""
        if self.store is None or not self.kept:
            return
        with self.store.batch(sync=True) as wb:
            for key in self.kept:
                wb.delete(CF_METADATA, key)
        self.kept = set()

    def load(self) -> Definitions:
        """Every stored definition of the vhost; raises LegacyDefinitions when one is in
        the form before the neutral one."""
        if self.store is None:
            return Definitions([], [], [])

        def scan(prefix: bytes, kind: Any) -> list[Any]:
            assert self.store is not None
            out = [kind.FromString(v) for _, v in
                   self.store.scan_prefix(CF_METADATA, definitions_prefix(prefix, self.vhost))]
            old = [r for r in out if not r.neutral]
            if old:
                raise LegacyDefinitions(
                    f"vhost {self.vhost!r} has {len(old)} {kind.__name__}s stored with AMQP field tables: "
                    "start the broker with `logbus serve`, which upgrades them")
            return out

        return Definitions(scan(EXCHANGE_PREFIX, ExchangeRecord), scan(QUEUE_PREFIX, QueueRecord),
                           scan(BINDING_PREFIX, BindingRecord))


# -- the form before ---------------------------------------------------------------------------------


class LegacyTranslation(Protocol):
    """How the protocol that stored definitions in the form before reads them: its
    arguments' encoding, and its words for what the neutral form has as fields."""

    def exchange(self, kind: str, arguments: bytes) -> tuple[str, bool, dict[str, Any]]:
        """(the type it routes as, delayed, the arguments)."""
        ...

    def queue(self, name: str, vhost: str, arguments: bytes) -> tuple[QueueSettings, dict[str, Any]]:
        """(its settings, the arguments)."""
        ...

    def binding(self, arguments: bytes, to_queue: bool,
                headers: bool) -> tuple[dict[str, Any], FilterSpec | None, HeaderMatch | None]:
        """(the arguments without the filter's, the filter, the match when its source is
        a headers exchange, ``headers``)."""
        ...


def upgrade(state: StateStore, translation: LegacyTranslation) -> int:
    """Rewrite every definition still in the form before in the neutral one, in one
    synced batch (a binding's key too: its digest now covers its filter); returns how
    many. A second run finds nothing."""
    n = 0
    kinds = {name: kind for name, kind in PREDECLARED.items()}
    headers: set[tuple[str, str]] = set()  # (vhost, exchange) of the headers exchanges stored
    with state.batch(sync=True) as wb:
        for key, value in state.scan_prefix(CF_METADATA, EXCHANGE_PREFIX):
            ex = ExchangeRecord.FromString(value)
            vhost = definition_vhost(EXCHANGE_PREFIX, key)
            if ex.neutral:
                if ex.kind == HEADERS:
                    headers.add((vhost, ex.name))
                continue
            with _naming("exchange", vhost, ex.name):
                routing, delayed, args = translation.exchange(ex.kind, ex.legacy_arguments)
            if routing == HEADERS:
                headers.add((vhost, ex.name))
            d = ExchangeDef(ex.name, routing, True, ex.auto_delete, ex.internal, freeze_arguments(args),
                            ex.topic if ex.HasField("topic") else None, delayed)
            wb.put(CF_METADATA, exchange_key(vhost, ex.name), exchange_record(d, args))
            n += 1
        for key, value in state.scan_prefix(CF_METADATA, QUEUE_PREFIX):
            q = QueueRecord.FromString(value)
            if q.neutral:
                continue
            vhost = definition_vhost(QUEUE_PREFIX, key)
            with _naming("queue", vhost, q.name):
                settings, args = translation.queue(q.name, vhost, q.legacy_arguments)
            wb.put(CF_METADATA, queue_key(vhost, q.name), queue_record(q.name, q.auto_delete, settings, args))
            n += 1
        for key, value in state.scan_prefix(CF_METADATA, BINDING_PREFIX):
            b = BindingRecord.FromString(value)
            if b.neutral:
                continue
            vhost = definition_vhost(BINDING_PREFIX, key)
            kind: DestKind = "exchange" if b.destination_kind == "exchange" else QUEUE
            from_headers = (vhost, b.source) in headers or kinds.get(b.source) == HEADERS
            with _naming("binding", vhost, f"{b.source} -> {b.destination} ({b.routing_key!r})"):
                args, spec, match = translation.binding(b.legacy_arguments, kind == QUEUE, from_headers)
            binding = Binding(b.source, b.destination, kind, b.routing_key, freeze_arguments(args), spec, match)
            wb.delete(CF_METADATA, key)
            wb.put(CF_METADATA, binding_key(vhost, b.source, kind, b.destination, b.routing_key,
                                            binding_digest(binding)), binding_record(binding, args))
            n += 1
    return n


@contextlib.contextmanager
def _naming(kind: str, vhost: str, name: str) -> Iterator[None]:
    """A record the translation refuses: LegacyDefinitions naming it (the upgrade's batch
    is not written, the broker does not start, nothing is lost)."""
    try:
        yield
    except LogbusError as e:
        raise LegacyDefinitions(f"stored {kind} {name!r} in vhost {vhost!r} cannot be upgraded: {e}") from None
