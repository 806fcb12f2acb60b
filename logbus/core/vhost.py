"""One virtual host of the neutral model: exchanges, queues, routing and dispatch.

Theory of operation (docs/architecture.md sections 4 and 5). A publish is routed here
(``target``: ``core/routing/router.py``) and made by the broker's one publish pipeline
(``core/pipeline.py``), which appends the message ONCE, to the log topic behind the
exchange, whatever the number of queues it reaches; each queue gets an entry pointing
at it (``core/queues/queue.py``), and the message itself stays in memory until every one of
those queues settled it (``core/queues/msgstore.py``). The publisher's confirm fires when the
append is durable under the topic's flush policy.

Consumers are registered per queue. After anything that can make a delivery possible
(a publish, an ack, a requeue, more credit), ``dispatch(queue)`` hands ready entries
round-robin to the consumers that have credit (their prefetch allows one more). A
consumer without acks settles the entry as it is handed out.

Entries that leave a queue without an ack (rejected, expired, dropped by overflow, past
the delivery limit) go to the queue's dead-letter exchange when it has one, as the copy
the broker's ``Forms`` make (``core/forms.py``; the AMQP gateway's add ``x-death``)
published like any message; else they are dropped. Nothing here touches a socket and
nothing speaks a protocol: every gateway declares, publishes and consumes through these
methods in neutral terms (settings, a delay, a filter), translating its own words (the
AMQP gateway's ``x-`` arguments: ``gateway/amqp/model/``), and implements ``Consumer``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..filters.message_filter import FilterSpec
from .definitions import DefinitionStore, binding_filter, binding_match, decode_values, settings_of
from .errors import LogbusError
from .envelope_pb2 import Envelope
from .deadletters import Deaths
from .forms import NEUTRAL, Forms
from .log.manager import LogManager
from .message import Message
from .queues.journal import QueueStore
from .queues.msgstore import MessageStore, log_batch_reader
from .queues.queue import Delivery, Entry, Outcome
from .queues.service import Consumer, QueueService, QueueSettings, QueueState
from .queues.stats import SESSION
from .queues.timers import Timers
from .routing.definitions import QUEUE, Binding, DestKind, ExchangeDef, HeaderMatch
from .routing.definitions import Removed as Unbound
from .routing.filtered import passing
from .routing.log_topics import key_partition
from .routing.router import (
    Candidates,
    NotFound,
    PreconditionFailed,
    ResourceLocked,
    Router,
)
from .state import StateStore

from .pipeline import NoPopGroups, Pipeline, one_row

if TYPE_CHECKING:
    from .pipeline import Published

log = logging.getLogger(__name__)
_AMQP = Envelope.AMQP


class VHost:
    def __init__(self, name: str, log: LogManager, create_topic: Callable[[str], Any],
                 queue_store: QueueStore, *, clock: Callable[[], int],
                 store: StateStore | None = None, message_memory: int = 256 << 20,
                 topic_owner: Callable[[str], str | None] | None = None,
                 timers: Timers | None = None, forms: Forms = NEUTRAL, pipeline: Pipeline | None = None) -> None:
        self.name = name
        self.topic_owner = topic_owner  # "exchange 'x' in vhost 'v'" backed by a topic, across vhosts
        self.defs = DefinitionStore(store, name)
        self.log = log
        self._create_topic = create_topic
        self.queue_store = queue_store
        self.clock = clock  # epoch milliseconds
        self.forms = forms
        self.router = Router(name)
        self.messages = MessageStore(log_batch_reader(log), max_bytes=message_memory,
                                     remote=log.remote_pending if log.remote_reads is not None else None)
        if timers is None:
            timers = Timers(queue_store, store, clock)
        self.service = QueueService(name, queue_store, timers, self.messages, clock=clock,
                                    dead_letter=self._dead_letter, message_for=self._message,
                                    message_properties=forms.properties)
        self.queues: dict[str, QueueState] = self.service.queues
        self.session_queues: set[str] = set()  # made by open_queue: not stored definitions
        # the broker's one publish pipeline (core/pipeline.py): dead-lettered copies and
        # ``publish`` go through it; without a broker, one of its own (no pop groups)
        if pipeline is None:
            pipeline = Pipeline(log, {name: self}, NoPopGroups(), timers, self.messages, clock, forms=forms)
        self.pipeline = pipeline

    # -- exchanges -----------------------------------------------------------------------

    def load(self) -> None:
        """Declare again what was durable before a restart: exchanges, queues, bindings."""
        d = self.defs.load()
        for ex in d.exchanges:
            self.router.declare(ex.name, ex.kind, durable=True, auto_delete=ex.auto_delete, internal=ex.internal,
                                arguments=decode_values(ex.arguments), topic=ex.topic if ex.HasField("topic") else None,
                                delayed=ex.delayed)
        for q in d.queues:
            self.declare_queue(q.name, settings_of(q.settings), durable=True, auto_delete=q.auto_delete,
                               arguments=decode_values(q.arguments), _restoring=True)
        for b in d.bindings:
            kind: DestKind = "exchange" if b.destination_kind == "exchange" else QUEUE
            self.router.bind(b.source, b.destination, b.routing_key, decode_values(b.arguments), kind=kind,
                             filter=binding_filter(b), match=binding_match(b))

    def declare_exchange(self, name: str, kind: str = "direct", *, durable: bool = False, auto_delete: bool = False,
                         internal: bool = False, arguments: Mapping[str, Any] | None = None,
                         passive: bool = False, delayed: bool = False) -> None:
        """Declare an exchange routing as ``kind``; ``delayed``: a publish with a delay is
        routed through it when due."""
        new = not self.router.has_exchange(name)
        if new and not passive and self.topic_owner is not None:
            topic = self.router.topic_for(name)
            owner = self.topic_owner(topic)
            if owner is not None:
                raise PreconditionFailed(f"log topic '{topic}' already backs {owner}")
        ex = self.router.declare(name, kind, durable=durable, auto_delete=auto_delete, internal=internal,
                                 arguments=arguments, passive=passive, delayed=delayed)
        if not new:
            self._ensure_topic(ex.log_topic)
            return
        try:  # a declare that fails (no topic: out of descriptors, a full disk) leaves nothing
            self._ensure_topic(ex.log_topic)
            self.defs.save_exchange(ex, arguments)
        except BaseException:
            self.router.delete(name)
            raise

    def delete_exchange(self, name: str, *, if_unused: bool = False) -> None:
        self._forget(self.router.delete(name, if_unused=if_unused))

    def bind(self, source: str, destination: str, routing_key: str = "",
             arguments: Mapping[str, Any] | None = None, *, kind: DestKind = QUEUE,
             filter: FilterSpec | None = None, match: HeaderMatch | None = None) -> None:
        """Bind; with ``filter`` (to a queue) only what it takes is queued (docs/filters.md);
        ``match``: what a headers exchange asks of a message's headers."""
        new = not self.router.has_binding(source, destination, routing_key, arguments, kind=kind, filter=filter,
                                          match=match)
        b = self.router.bind(source, destination, routing_key, arguments, kind=kind, filter=filter, match=match)
        if self._durable_binding(b):
            try:
                self.defs.save_binding(b, arguments)
            except BaseException:  # not stored: not made either
                if new:
                    self.router.unbind(source, destination, routing_key, arguments, kind=kind, filter=filter,
                                       match=match)
                raise

    def unbind(self, source: str, destination: str, routing_key: str = "",
               arguments: Mapping[str, Any] | None = None, *, kind: DestKind = QUEUE,
               filter: FilterSpec | None = None, match: HeaderMatch | None = None) -> None:
        self._forget(self.router.unbind(source, destination, routing_key, arguments, kind=kind, filter=filter,
                                        match=match))

    def _durable_binding(self, b: Binding) -> bool:
        src = self.router.exchange_or_none(b.source)
        if src is None or not src.durable:
            return False
        if b.destination_kind == QUEUE:
            if b.destination in self.session_queues:
                return False  # its session's record holds it
            qs = self.queues.get(b.destination)
            return qs is not None and qs.durable and qs.exclusive is None
        dst = self.router.exchange_or_none(b.destination)
        return dst is not None and dst.durable

    def _forget(self, removed: Unbound, queues: tuple[str, ...] = ()) -> None:
        self.defs.removed(queues=queues, exchanges=removed.exchanges, bindings=removed.bindings)

    def _ensure_topic(self, topic: str) -> None:
        if topic not in self.log.topics:
            self._create_topic(topic)

    # -- queues --------------------------------------------------------------------------

    def declare_queue(self, name: str, settings: QueueSettings = QueueSettings(), *, durable: bool = False,
                      exclusive: Any = None, auto_delete: bool = False, arguments: Mapping[str, Any] | None = None,
                      passive: bool = False, declarer: Any = None,
                      equivalent: Callable[[QueueState, dict[str, Any]], None] | None = None,
                      _restoring: bool = False) -> QueueState:
        """The queue ``name``, made with ``settings`` if new. ``arguments``: what the
        declaring protocol gave, kept (and stored) for its ``equivalent(queue,
        arguments)`` check of a later declare, which raises PreconditionFailed.
        ``exclusive``: the owning connection of an exclusive queue, else None.
        ``declarer``: the connection declaring; a passive declare by an exclusive queue's
        owner succeeds whatever its exclusive bit (RabbitMQ's lax check), a non-passive
        one must repeat it (the strict check)."""
        qs = self.queues.get(name)
        if qs is not None:
            owner = declarer if passive and declarer is not None else exclusive
            if qs.exclusive is not None and qs.exclusive is not owner:
                raise ResourceLocked(f"cannot obtain exclusive access to locked queue '{name}' in vhost '{self.name}'."
                                     " It could be originally declared on another connection or the exclusive"
                                     " property value does not match that of the original declaration.")
            if not passive:
                self._check_equivalent(qs, durable, auto_delete)
                if equivalent is not None:
                    equivalent(qs, dict(arguments or {}))
            qs.used_ms = self.clock()
            return qs
        if passive:
            raise NotFound(f"no queue '{name}' in vhost '{self.name}'")
        if durable and exclusive is None and not _restoring:  # stored first: a failed store makes nothing
            self.defs.save_queue(name, auto_delete, settings, arguments)
        qs = self.service.create(name, settings, durable=durable, exclusive=exclusive, auto_delete=auto_delete,
                                 declared=dict(arguments or {}))
        self.router.add_queue(name)
        return qs

    def _check_equivalent(self, qs: QueueState, durable: bool, auto_delete: bool) -> None:
        where = f"for queue '{qs.name}' in vhost '{self.name}'"
        if qs.durable != durable:
            raise PreconditionFailed(f"inequivalent arg 'durable' {where}: received '{str(durable).lower()}' "
                                     f"but current is '{str(qs.durable).lower()}'")
        if qs.auto_delete != auto_delete:
            raise PreconditionFailed(f"inequivalent arg 'auto_delete' {where}: received "
                                     f"'{str(auto_delete).lower()}' but current is '{str(qs.auto_delete).lower()}'")

    def open_queue(self, name: str, settings: QueueSettings = QueueSettings(), *, durable: bool = False,
                   kind: str = SESSION) -> QueueState:
        """A queue a protocol's sessions own (an MQTT session's, a shared subscription's:
        ``kind`` "session" or "shared"), made if new: routable like any, but not a stored
        definition (the session record says it exists)."""
        qs = self.queues.get(name)
        if qs is None:
            qs = self.service.create(name, settings, durable=durable, kind=kind)
            self.router.add_queue(name)
            self.session_queues.add(name)
        return qs

    def close_queue(self, name: str) -> None:
        """Delete a queue ``open_queue`` made, with its bindings and entries."""
        if name in self.queues:
            self.router.delete_queue(name)
            self.service.delete(name)
        self.session_queues.discard(name)

    def queue(self, name: str) -> QueueState:
        return self.service.state(name)

    def delete_queue(self, name: str, *, if_unused: bool = False, if_empty: bool = False) -> int:
        qs = self.queue(name)
        if if_unused and qs.consumers:
            raise PreconditionFailed(f"queue '{name}' in vhost '{self.name}' in use")
        if if_empty and qs.queue.message_count:
            raise PreconditionFailed(f"queue '{name}' in vhost '{self.name}' not empty")
        count = self.service.delete(name)
        stored = qs.durable and name not in self.session_queues
        self.session_queues.discard(name)
        self._forget(self.router.delete_queue(name), (name,) if stored else ())
        return count

    def purge_queue(self, name: str) -> int:
        return self.service.purge(name)

    # -- publish: where a row goes (the pipeline, core/pipeline.py, publishes) ------------

    def publish(self, exchange: str, routing_key: str, message: Message, *,
                headers: Mapping[str, Any] | None = None, delay_ms: int = 0,
                on_durable: Callable[[Any], object] | None = None,
                deaths: Deaths | None = None) -> Published:
        """One publish through the pipeline (``Pipeline.publish``): ``message`` to
        ``exchange`` with ``routing_key`` (written into its envelope), ``headers`` the
        typed headers it routes by, ``delay_ms`` honoured on a delayed exchange;
        ``on_durable(result_or_exception)`` fires when its append is durable. Raises
        NotFound / AccessRefused for a bad exchange."""
        env = message.envelope
        if env.exchange != exchange:
            env.exchange = exchange
        if env.routing_key != routing_key:
            env.routing_key = routing_key
        if headers is not None:
            message.routing_headers = headers
        out = self.pipeline.publish(self, [message], None if on_durable is None else one_row(on_durable),
                                    delay_of=(lambda _: delay_ms) if delay_ms > 0 else None, deaths=deaths)
        if out.error is not None:
            raise out.error
        return out

    def target(self, exchange: str, routing_key: str,
               headers: Mapping[str, Any] | None) -> tuple[str, int, frozenset[str], Candidates]:
        """Where a publish goes: the log topic and partition behind ``exchange`` (the
        topic created on first use), the queues it routes to and the candidates of
        filtered bindings (``passing``). Raises NotFound."""
        ex = self.router.exchange(exchange)
        queues, candidates = self.router.route_filtered(exchange, routing_key, headers)
        topic = ex.log_topic
        if topic not in self.log.topics:  # the default exchange's, on first use
            self._ensure_topic(topic)
        return topic, self._partition_for(topic, routing_key), queues, candidates

    def delayed_target(self, exchange: str, routing_key: str) -> tuple[str, int]:
        """Where a publish to a delayed exchange with a delay is appended (routed when
        due). Raises NotFound."""
        topic = self.router.exchange(exchange).log_topic
        self._ensure_topic(topic)
        return topic, self._partition_for(topic, routing_key)

    def routes_topic(self, topic: str) -> bool:
        """Whether records appended to ``topic`` outside this vhost's publishes (Kafka,
        HTTP) can reach one of its queues: it backs an exchange here."""
        return self.router.routes_topic(topic)

    def backs(self, topic: str) -> bool:
        """Whether ``topic`` is the log topic behind one of this vhost's exchanges (the
        default exchange's included, which ``routes_topic`` leaves out): its records'
        queue entries are journaled, and routed again after a power loss."""
        return self.router.exchange_for_topic(topic) is not None

    def record_queues(self, topic: str, message: Message) -> frozenset[str]:
        """The queues a record appended to ``topic`` by a Kafka producer or over HTTP
        reaches: those bound to the exchange behind the topic, with the record key as
        routing key and the record headers as headers (docs/architecture.md section 4)."""
        key = (message.key or b"").decode("utf-8", "replace")
        headers = {k: v.decode("utf-8", "replace") if v is not None else None
                   for k, v in message.headers} if message.headers else None
        queues, candidates = self.router.route_log_filtered(topic, key, headers)
        if candidates:
            queues = queues | passing(candidates, message, topic, self.forms.properties)
        return queues

    def _message(self, entry: Entry) -> Message:
        """The message an entry points at. One a Kafka producer appended is delivered as
        published to the exchange behind its topic, with its key as routing key."""
        message = self.messages.get(entry.topic, entry.partition, entry.offset)
        env = message.envelope
        if not env.exchange and env.protocol != _AMQP:
            ex = self.router.exchange_for_topic(entry.topic)
            if ex is not None:
                env.exchange = ex.name
                env.routing_key = (message.key or b"").decode("utf-8", "replace")
        return message

    def pinned_from(self, topic: str, partition: int) -> int | None:
        """The lowest offset an entry of any of this vhost's queues points at in (topic,
        partition) (retention keeps the segments from there; None: none)."""
        return self.service.pinned_from(topic, partition)

    def _partition_for(self, topic: str, routing_key: str) -> int:
        return key_partition(routing_key.encode(), len(self.log.topics[topic].partitions))

    # -- consumers -----------------------------------------------------------------------

    def consume(self, queue: str, consumer: Consumer, spec: FilterSpec | None = None) -> None:
        """A push consumer of ``queue``; with ``spec`` it gets only what its filter takes,
        the rest waits for other consumers (decision 0020)."""
        self.service.consume(queue, consumer, spec)

    def cancel(self, queue: str, consumer: Consumer) -> None:
        qs = self.service.cancel(queue, consumer)
        if qs is not None and qs.auto_delete and qs.had_consumer and not qs.consumers:
            self.delete_queue(queue)

    def dispatch(self, queue: str) -> None:
        self.service.dispatch(queue)

    def get(self, queue: str, owner: Any, no_ack: bool) -> Delivery | None:
        """basic.get: one message, leased to ``owner`` unless ``no_ack``."""
        got = self.service.take(queue, owner, 1, no_ack=no_ack)
        return got[0] if got else None

    # -- settling ----------------------------------------------------------------------------

    def ack(self, d: Delivery) -> None:
        """Done with delivery ``d`` (StaleReceipt: it is no current lease)."""
        self.service.ack(d)

    def reject(self, d: Delivery, requeue: bool) -> None:
        """nack/reject: with requeue, again at once in its old place, or after the queue's
        retry policy; without, dead-lettered."""
        self.service.settle(d, Outcome.RETRY if requeue else Outcome.DEAD_LETTER)

    def settle(self, d: Delivery, outcome: Outcome = Outcome.ACK) -> None:
        """Settle a delivery: ack, requeue, retry (after the queue's backoff) or dead-letter."""
        self.service.settle(d, outcome)

    def holds(self, queue: str, seq: int) -> bool:
        """Whether entry ``seq`` of ``queue`` is still unsettled."""
        qs = self.queues.get(queue)
        return qs is not None and seq in qs.queue.entries

    def has_exchange(self, name: str) -> bool:
        return self.router.has_exchange(name)

    def exchange(self, name: str) -> ExchangeDef:
        """The exchange ``name`` as declared; raises NotFound."""
        return self.router.exchange(name)

    def release(self, queue: str, owner: Any) -> None:
        """Requeue every lease of ``owner`` (its channel closed or recovered)."""
        self.service.release(queue, owner)

    def expire(self) -> None:
        """Drop (or dead-letter) expired heads of every queue, give back leases past their
        deadline, and delete queues unused for their ``expires_ms``; the broker calls this
        every 100 ms."""
        now = self.clock()
        self.service.tick(now)
        queues = self.queues
        for name in list(self.service.expiring):  # not every queue: an MQTT session's has no expiry
            qs = queues[name]
            ttl = qs.settings.expires_ms
            if ttl is not None and not qs.consumers and now - qs.used_ms >= ttl:
                log.info("queue %r unused for %d ms (its expiry): deleted", qs.name, ttl)
                self.delete_queue(qs.name)

    def _dead_letter(self, qs: QueueState, original: Message, reason: str, entry: Entry | None = None) -> None:
        """Publish the dead-lettered copy of ``original`` (in the broker's ``Forms``) to
        the queue's dead-letter exchange."""
        target = qs.settings.dead_letter
        assert target is not None
        dlx = target.exchange
        if dlx is None:
            return
        try:
            copy = self.forms.dead_letter(original, qs.name, reason, self.clock(), dlx, target.routing_key)
            self.publish(dlx, copy.message.envelope.routing_key, copy.message, headers=copy.headers,
                         deaths=copy.deaths)
        except LogbusError as exc:
            log.info("dead-lettering from %r to %r failed: %s", qs.name, dlx, exc)
