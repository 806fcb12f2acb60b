"""The one publish pipeline: every publish of every protocol goes through here.

Theory of operation (docs/architecture.md, "The publish pipeline"). A publish is a row:
a ``Message`` whose envelope says where it goes, ``exchange`` and ``routing_key`` (what
the log keeps, so a record read back routes as its publish did), with the typed headers
its gateway decoded in ``routing_headers`` (never stored). Rows come in batches: a
reactor turn's MQTT publishes from any number of connections, one AMQP read's publishes
on a channel, a dead-lettered copy, an HTTP publish, a Kafka produce already appended.
Each batch goes through the same stages, each once per batch:

1. **target**: where each row goes. An exchange-addressed row is routed by its vhost's
   router (``VHost.target``), once per (exchange, routing key) for the rows whose headers
   cannot change the route; filtered bindings are asked per row (``passing``). A row to
   a delayed exchange with a delay (``delay_of``) goes to the exchange's topic and is
   routed when due. A topic-addressed row (HTTP, a dead-letter replay, a Kafka record)
   goes to the queues bound to the exchange behind its topic in every vhost, and to the
   pop groups reading the topic.
2. **append**: consecutive rows bound for one partition are one ``Partition.append``;
   when the log refuses a run, each row is appended alone, so only those it refuses are
   refused (and in no queue: a refused publish leaves no trace).
3. **enqueue**: each appended row's queues get their entries (``QueueService.enqueue``,
   journaled with the turn's batch before the append is written), a delayed row its
   timer (``timers.py``), the pop groups their entry.
4. **dispatch**: each queue touched, once: at the end of the reactor turn
   (``dispatch_later``) or at once.

Out: ``Published`` names the rows by index: ``unrouted`` (reached no queue), ``refused``
(a queue or the log refused them: nack), ``done`` (rows published: all but for a routing
``error``, which stops the batch at that row); and ``on_durable(first, last, result)``
fires per append once its rows are durable under the topic's flush policy (``result`` an
exception for a failed write).

Kafka produces append whole batches themselves (``streams/produce.py``) and hand them to
``appended``, which decodes the records only when some queue or pop group reads the
topic. Timers come back through ``timer_due``: a retry to its queue service, a delayed
record routed as its publish would have been, staged in its queues until due.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from twisted.internet.defer import Deferred

from ..retry.policy import MAX_DELAY_MS
from .deadletters import Deaths, dead_letter_cycles
from .envelope_pb2 import Envelope
from .errors import LogbusError, RemoteUnavailable, StorageError, UnknownPartition
from .forms import NEUTRAL, Forms
from .log import batch as B
from .log.batch import BatchInfo
from .log.format import ATTR_CONTROL, ATTR_TRANSACTIONAL, scan_valid
from .log.manager import LogManager
from .log.partition import Partition
from .message import Message, per_message_ttl
from .queues.msgstore import MessageStore
from .queues.pop import check_delay
from .queues.timers import Timers
from .routing.filtered import passing
from .routing.log_topics import key_partition
from .routing.router import Refused
from .state_pb2 import TimerRecord

if TYPE_CHECKING:
    from .vhost import VHost

log = logging.getLogger(__name__)
_AMQP = Envelope.AMQP

DELIVER_AT_HEADER = "logbus.deliver_at"  # epoch ms, decimal text
DELAY_HEADER = "logbus.delay_ms"  # ms from the append, decimal text


@dataclass(slots=True)
class Published:
    """What became of a batch's rows, by index."""

    done: int  # rows published: all of them unless ``error``
    unrouted: list[int] = field(default_factory=list)  # rows that reached no queue
    refused: list[int] = field(default_factory=list)  # rows refused by a queue (overflow reject-publish) or the log
    error: Refused | None = None  # why row ``done`` was not published (a missing exchange)

    @property
    def routed(self) -> bool:
        """A one-row batch reached a queue (basic.return for a mandatory publish if not)."""
        return self.done > 0 and not self.unrouted


OnDurable = Callable[[int, int, Any], object]


class PopReaders(Protocol):
    """What the pipeline asks of the pop groups (``queues/pop.py``)."""

    service: Any  # their queue service: retries due go back to it

    def watches(self, topic: str) -> bool: ...

    def appended(self, topic: str, partition: int, offset: int, message: Message, expires_ms: int = 0,
                 visible_ms: int = 0) -> None: ...


class NoPopGroups:
    """No pop group reads anything: the pipeline of a vhost model on its own (``VHost``
    made without a broker, as core tests do)."""

    service = None

    def watches(self, topic: str) -> bool:
        return False

    def appended(self, topic: str, partition: int, offset: int, message: Message, expires_ms: int = 0,
                 visible_ms: int = 0) -> None:
        pass


class Pipeline:
    def __init__(self, log: LogManager, vhosts: Mapping[str, VHost], pop: PopReaders, timers: Timers,
                 messages: MessageStore, clock: Callable[[], int], *, forms: Forms = NEUTRAL,
                 later: Callable[[Callable[[], object]], None] | None = None) -> None:
        self.log = log
        self.vhosts = vhosts  # the broker's live dict
        self.pop = pop
        self.timers = timers
        self.messages = messages  # delayed records read back from the log when due
        self.clock = clock  # epoch milliseconds
        self.forms = forms
        # work run once at the end of the reactor turn (core/tick.py): the dispatches of
        # ``publish(dispatch_later=True)``; None: at once
        self._later = later
        self._due: dict[VHost, dict[str, None]] = {}  # queues to dispatch at the end of the turn, in order
        self._last_refusal: tuple[str, str] | None = None  # what _refused logged last

    # -- exchange-addressed rows (AMQP, MQTT, dead letters) ---------------------------------

    def publish(self, vhost: VHost, rows: Sequence[Message], on_durable: OnDurable | None = None, *,
                delay_of: Callable[[Message], int] | None = None, deaths: Deaths | None = None,
                dispatch_later: bool = False) -> Published:
        """Route, append and enqueue ``rows`` (see the module's header). ``delay_of(row)``:
        the delay a row's protocol asks for (ms; 0: none), honoured on a delayed exchange.
        ``deaths``: a dead-lettered copy's, newest first: the queues it would cycle back
        into are left out (``dead_letter_cycles``)."""
        routes: dict[tuple[str, str], tuple[str, int, frozenset[str], Any]] = {}
        router = vhost.router
        properties = self.forms.properties
        unrouted: list[int] = []
        refused: list[int] = []
        touched: set[str] = set()
        run: list[Message] = []  # rows bound for one partition, appended together
        fates: list[frozenset[str] | int] = []  # per row of the run: its queues, or a delayed row's due time
        run_at: tuple[str, int] | None = None
        run_first = 0
        now = self.clock()
        error: Refused | None = None
        done = 0
        for i, m in enumerate(rows):
            env = m.envelope
            exchange, key = env.exchange, env.routing_key
            headers = m.routing_headers
            fate: frozenset[str] | int
            delay = delay_of(m) if delay_of is not None else 0
            try:
                if delay and router.has_exchange(exchange) and router.exchange(exchange).delayed:
                    # appended now, routed through the exchange as it is when due; counts as
                    # routed, as in RabbitMQ's plugin (no basic.return for mandatory)
                    at = vhost.delayed_target(exchange, key)
                    fate = now + min(delay, MAX_DELAY_MS)
                else:
                    cached = not headers or router.headers_free(exchange)  # headers cannot change the route
                    hit = routes.get((exchange, key)) if cached else None
                    if hit is None:
                        hit = vhost.target(exchange, key, headers)
                        if cached:
                            routes[(exchange, key)] = hit
                    at = hit[0], hit[1]
                    queues = hit[2]
                    if hit[3]:
                        queues = queues | passing(hit[3], m, hit[0], properties)
                    if deaths and queues:
                        queues = queues - dead_letter_cycles(queues, deaths)
                    if not queues:
                        unrouted.append(i)
                    fate = queues
            except Refused as e:
                error = e
                break
            if at != run_at:
                if run:
                    self._append_run(vhost, run_at, run_first, run, fates, now, on_durable, refused, touched)
                    run, fates = [], []
                run_at, run_first = at, i
            run.append(m)
            fates.append(fate)
            done = i + 1
        if run:
            self._append_run(vhost, run_at, run_first, run, fates, now, on_durable, refused, touched)
        if touched:
            self._dispatch(vhost, touched, dispatch_later)
        return Published(done, unrouted, refused, error)

    def _append_run(self, vhost: VHost, at: Any, first: int, run: list[Message], fates: list[frozenset[str] | int],
                    now: int, on_durable: OnDurable | None, refused: list[int], touched: set[str]) -> None:
        """Append ``run`` (rows ``first``... of a batch) to one partition and give each row
        its queue entries (or timer). When the log refuses the run, each row is appended
        alone, so only those it refuses are refused."""
        topic, partition = at
        p = self.log.partition(topic, partition)
        base = p.next_offset
        last = first + len(run) - 1
        try:
            if on_durable is None:
                p.append([m.to_record() for m in run], callback=_ignore)
            else:
                p.append([m.to_record() for m in run], callback=lambda result: on_durable(first, last, result))
        except LogbusError as e:
            if len(run) > 1:
                for j, m in enumerate(run):
                    self._append_run(vhost, at, first + j, [m], [fates[j]], now, on_durable, refused, touched)
                return
            self._refused(vhost, topic, e)
            refused.append(first)
            if on_durable is not None:
                on_durable(first, first, e)
            return
        watched = self.pop.watches(topic)
        for j, m in enumerate(run):
            fate = fates[j]
            if type(fate) is int:  # a delayed row: routed through its exchange when due
                env = m.envelope
                self.delay(topic, partition, base + j, fate, vhost=vhost.name, exchange=env.exchange,
                           routing_key=env.routing_key)
                continue
            if fate:
                assert isinstance(fate, frozenset)
                if self._enqueue(vhost, fate, topic, partition, base + j, m, now):
                    refused.append(first + j)
                touched |= fate
            if watched:
                self.pop.appended(topic, partition, base + j, m)

    def _enqueue(self, vhost: VHost, queues: frozenset[str], topic: str, partition: int, offset: int,
                 message: Message, now: int, visible_ms: int = 0) -> bool:
        """Give each of ``queues`` an entry for the record at ``offset`` (staged until
        ``visible_ms`` if not 0); True when a queue refused it (overflow reject-publish).
        A per-message TTL counts from when the message is visible."""
        env = message.envelope
        ttl = per_message_ttl(env.expiration) if env.expiration else None
        return vhost.service.enqueue(queues, topic, partition, offset, message, now, False,
                                     max(now, visible_ms) + ttl if ttl is not None else 0, visible_ms)

    def _dispatch(self, vhost: VHost, touched: set[str], later: bool) -> None:
        if later and self._later is not None:
            due = self._due
            if not due:
                self._later(self._dispatch_at_end)
            names = due.get(vhost)
            if names is None:
                names = due[vhost] = {}
            for name in touched:
                names[name] = None
        else:
            for name in touched:
                vhost.service.dispatch(name)

    def _dispatch_at_end(self) -> None:
        due, self._due = self._due, {}
        for vhost, names in due.items():
            queues = vhost.queues
            for name in names:
                if name in queues:
                    vhost.service.dispatch(name)

    def _refused(self, vhost: VHost, topic: str, error: LogbusError) -> None:
        """Logged once per topic and reason (a full disk refuses thousands in a row)."""
        said = (topic, str(error))
        if self._last_refusal != said:
            self._last_refusal = said
            log.warning("publishes in vhost '%s' are refused by the log (topic '%s'): %s", vhost.name, topic, error)

    # -- topic-addressed rows (HTTP, dead-letter replay) ------------------------------------

    def append(self, topic: str, rows: Sequence[Message], partition: int | None = None) -> Deferred[list[int]]:
        """Append ``rows`` to ``topic`` (one partition: ``partition``, else chosen by the
        first row's key) and hand them to the queues and pop groups that read the topic
        (at their deliver-at time if in the future). Fires with their offsets once durable
        per the topic's flush policy."""
        t = self.log.topic(topic)
        n = len(t.partitions)
        if partition is None:
            partition = key_partition(rows[0].key if rows else None, n)
        if not 0 <= partition < n:
            raise UnknownPartition(f"topic {topic!r} has no partition {partition}")
        now = self.clock()
        for m in rows:
            if m.envelope.deliver_at_ms:
                check_delay(max(0, m.envelope.deliver_at_ms - now))
        p = t.partitions[partition]
        base = p.next_offset
        d = p.append([m.to_record() for m in rows])
        assert d is not None
        vhosts = self._readers(topic)
        for i, m in enumerate(rows):
            due = m.envelope.deliver_at_ms
            if due > now:
                self.delay(topic, partition, base + i, due)
            else:
                self.record(topic, partition, base + i, m, vhosts)
        return d.addCallback(lambda _: list(range(base, base + len(rows))))

    def appended(self, topic: str, partition: int, base: int, data: bytes, infos: list[BatchInfo]) -> int:
        """Kafka-produced batches just appended at ``base``: each record goes to the queues
        bound to the exchange behind ``topic``, in every vhost that has one
        (docs/architecture.md section 4), and to the pop groups reading ``topic``; a
        record with a deliver-at header (``logbus.deliver_at``, epoch ms, or
        ``logbus.delay_ms``) gets there when due. Returns how many records reached a
        queue now. Transactional batches are not routed (docs/interop.md). The append
        stands whatever happens here: a failure is logged, not raised."""
        vhosts = self._readers(topic)
        if not vhosts and not self.pop.watches(topic):
            return 0
        return self._hand_on(topic, partition, decode_appended(base, data, infos), vhosts)

    def committed(self, topic: str, partition: int, producer_id: int, start: int, end: int) -> int:
        """A committed Kafka transaction's records: those of ``producer_id``'s
        transactional batches in [start, end) of the partition go on as ``appended``
        routes a produce's. Returns how many reached a queue now."""
        vhosts = self._readers(topic)
        if not vhosts and not self.pop.watches(topic):
            return 0
        records = committed_records(self.log.partition(topic, partition), producer_id, start, end)
        return self._hand_on(topic, partition, records, vhosts)

    def _hand_on(self, topic: str, partition: int, records: list[tuple[int, Message]], vhosts: list[VHost]) -> int:
        """Records of ``topic`` (offset, message) to its readers: now, or a deliver-at one
        when due. How many reached a queue now."""
        routed = 0
        now = self.clock()
        for offset, message in records:
            due = deliver_at(message, now)
            if due:
                self.delay(topic, partition, offset, due)
                continue
            routed += self.record(topic, partition, offset, message, vhosts)
        return routed

    def _readers(self, topic: str) -> list[VHost]:
        """The vhosts where ``topic`` backs an exchange."""
        return [v for v in self.vhosts.values() if v.routes_topic(topic)]

    def record(self, topic: str, partition: int, offset: int, message: Message,
               vhosts: list[VHost] | None = None, visible_ms: int = 0, *, strict: bool = False) -> int:
        """A record of ``topic``, visible now (or staged until ``visible_ms``), to the
        queues that read the topic: those bound to the exchange behind it in every vhost
        (with the record key as routing key and the record headers as headers), and the
        pop groups. 1 if it reached a vhost's queue. A vhost whose routing fails is logged
        (a StorageError as a warning line, anything else with its traceback) and the
        others go on; ``strict`` (a released timer): then the first failure is raised, so
        that the record is handed over again."""
        if vhosts is None:
            vhosts = self._readers(topic)
        routed = 0
        failure: Exception | None = None
        for vhost in vhosts:
            try:
                routed |= self._route_record(vhost, topic, partition, offset, message, visible_ms)
            except Exception as exc:
                if not strict:
                    text = "routing the record at %s/%d offset %d in vhost %r failed"
                    if isinstance(exc, StorageError):  # the disk, not a bug: no traceback
                        log.warning(text + ": %s", topic, partition, offset, vhost.name, exc)
                    else:
                        log.exception(text, topic, partition, offset, vhost.name)
                failure = failure or exc
        self.pop.appended(topic, partition, offset, message, visible_ms=visible_ms)
        if strict and failure is not None:
            raise failure
        return routed

    def _route_record(self, vhost: VHost, topic: str, partition: int, offset: int, message: Message,
                      visible_ms: int = 0) -> bool:
        queues = vhost.record_queues(topic, message)
        if not queues:
            return False
        self._enqueue(vhost, queues, topic, partition, offset, message, self.clock(), visible_ms)
        for name in queues:
            vhost.service.dispatch(name)
        return True

    # -- start-up: what a power loss took from the queue journal -------------------------

    def route_again(self, vhost: VHost, topic: str, partition: int, offset: int, message: Message,
                    held: Container[str] = ()) -> bool:
        """A record of ``topic`` whose queue entries and timers a power loss may have
        taken, routed again at start (``queues/redo.py``) as its publish routed it: one
        of ``vhost``'s publishes (its envelope names the exchange) through that exchange
        with its routing key and headers, a delayed one to its timer (due at the record's
        timestamp + its delay); any other (Kafka, HTTP) as a record of its topic. Queues
        in ``held`` have their entry already. A per-message TTL counts from the record's
        timestamp. True when it became a timer."""
        env = message.envelope
        now = message.timestamp if message.timestamp is not None else self.clock()
        router = vhost.router
        if env.exchange or env.protocol == _AMQP:
            ex = router.exchange_or_none(env.exchange)
            if ex is None:  # deleted since: a publish to it now would go nowhere
                return False
            delay = self.forms.delay(message) if ex.delayed else 0
            if delay > 0:
                self.delay(topic, partition, offset, now + min(delay, MAX_DELAY_MS), vhost=vhost.name,
                           exchange=env.exchange, routing_key=env.routing_key)
                return True
            try:
                queues = self._stored_route(vhost, env.exchange, env.routing_key, topic, message)
            except Refused:
                return False
        elif router.routes_topic(topic):  # as a Kafka or HTTP record is routed
            queues = vhost.record_queues(topic, message)
        else:
            return False
        if held:
            queues = frozenset(q for q in queues if q not in held)
        if queues:
            self._enqueue(vhost, queues, topic, partition, offset, message, now)
        return False

    # -- timers ----------------------------------------------------------------------------

    def delay(self, topic: str, partition: int, offset: int, due_ms: int, *, vhost: str = "", exchange: str = "",
              routing_key: str = "") -> None:
        """Route the record at ``offset`` when ``due_ms`` comes, not now: through
        ``exchange`` of ``vhost`` (an AMQP publish), else as any record appended to
        ``topic`` (to the queues bound to the exchange behind it, in every vhost, and to
        the pop groups reading it)."""
        self.timers.add(due_ms, TimerRecord(kind=TimerRecord.DELAY, vhost=vhost, exchange=exchange,
                                            routing_key=routing_key, topic=topic, partition=partition,
                                            offset=offset))

    def timer_due(self, due_ms: int, rec: TimerRecord) -> None:
        """A timer released (at most ``timers.LEAD_MS`` before due): a retry goes back to
        its queue, a delayed message is routed as its publish would have routed it; both
        staged in their queues until due. (Routing is done on release: a binding made or
        removed in the last ``LEAD_MS`` before the due time is not seen.) A delayed
        message no longer in the log is logged and dropped; any other failure raises, and
        the timer is handed over again later (``Timers``)."""
        if rec.kind == TimerRecord.RETRY:
            service = self.pop.service if rec.vhost == "" else getattr(self.vhosts.get(rec.vhost), "service", None)
            if service is not None:
                service.retry_due(rec, due_ms)
            return
        try:
            message = self.messages.get(rec.topic, rec.partition, rec.offset)
        except RemoteUnavailable:
            raise  # out of reach for now: the timer is handed over again later
        except (KeyError, LogbusError) as exc:
            log.warning("a delayed message at %s/%d offset %d is gone: %s", rec.topic, rec.partition, rec.offset,
                        exc)
            return
        vhost = self.vhosts.get(rec.vhost) if rec.vhost else None
        if vhost is not None:
            self._released(vhost, rec.exchange, rec.routing_key, rec.topic, rec.partition, rec.offset, message,
                           due_ms)
            self.pop.appended(rec.topic, rec.partition, rec.offset, message, visible_ms=due_ms)
        else:
            self.record(rec.topic, rec.partition, rec.offset, message, visible_ms=due_ms, strict=True)

    def _released(self, vhost: VHost, exchange: str, routing_key: str, topic: str, partition: int, offset: int,
                  message: Message, visible_ms: int) -> None:
        """A delayed publish whose timer was released (staged in its queues until
        ``visible_ms``): routed through ``exchange`` as it is now (gone: dropped, as
        RabbitMQ's plugin drops it)."""
        try:
            queues = self._stored_route(vhost, exchange, routing_key, topic, message)
        except Refused as e:
            log.info("a delayed message for exchange %r in vhost %r was dropped: %s", exchange, vhost.name, e)
            return
        if queues:
            self._enqueue(vhost, queues, topic, partition, offset, message, self.clock(), visible_ms)
            for name in queues:
                vhost.service.dispatch(name)


    def _stored_route(self, vhost: VHost, exchange: str, routing_key: str, topic: str,
                      message: Message) -> frozenset[str]:
        """The queues a message read back from the log reaches through ``exchange`` as it is
        now, by the typed headers its protocol's forms find in it. Raises Refused."""
        queues, candidates = vhost.router.route_filtered(exchange, routing_key, self.forms.headers(message))
        if candidates:
            queues = queues | passing(candidates, message, topic, self.forms.properties)
        return queues


def one_row(on_durable: Callable[[Any], object]) -> OnDurable:
    """A one-row publish's ``on_durable(result)`` as the pipeline calls it."""
    return partial(_one_row, on_durable)


def _one_row(on_durable: Callable[[Any], object], first: int, last: int, result: Any) -> None:
    on_durable(result)


def _ignore(_: Any) -> None:
    pass


def decode_appended(base: int, data: bytes, infos: list[BatchInfo]) -> list[tuple[int, Message]]:
    """The records of batches appended at ``base`` as (offset, Message); transactional
    batches left out."""
    out = []
    pos, offset = 0, base
    for info in infos:
        if not info.attributes & ATTR_TRANSACTIONAL:
            for r in B.decode(memoryview(data)[pos : pos + info.size]):
                message = Message.from_record(B.Record(r.key, r.value, r.timestamp, r.headers))
                out.append((offset + r.offset - info.base_offset, message))
        offset += info.last_offset_delta + 1
        pos += info.size
    return out


COMMITTED_READ_BYTES = 1 << 20  # a committed transaction's records are read this much at a time


def committed_records(p: Partition, producer_id: int, start: int, end: int) -> list[tuple[int, Message]]:
    """(offset, Message) of ``producer_id``'s transactional records in [start, end) of ``p``
    (control batches left out)."""
    out = []
    offset = start
    while offset < end:
        res = p.read(offset, COMMITTED_READ_BYTES, written=True)
        data = res.data
        if not data:
            break
        for info in scan_valid(data, 0, len(data), None)[0]:
            if info.producer_id == producer_id and info.attributes & ATTR_TRANSACTIONAL \
                    and not info.attributes & ATTR_CONTROL and start <= info.base_offset < end:
                for r in B.decode(memoryview(data)[info.position : info.position + info.size]):
                    out.append((r.offset, Message.from_record(B.Record(r.key, r.value, r.timestamp, r.headers))))
        offset = max(res.next_offset, offset + 1)
    return out


def deliver_at(message: Message, now: int) -> int:
    """When a record appended now should reach queues (0: at once): its envelope's
    deliver-at time, or a Kafka producer's ``logbus.deliver_at`` / ``logbus.delay_ms``
    header. A malformed or out-of-range header is ignored (the record is delivered)."""
    due = message.envelope.deliver_at_ms
    if not due and message.headers:
        for name, value in message.headers:
            if name in (DELIVER_AT_HEADER, DELAY_HEADER) and value is not None and value.isdigit():
                due = int(value) if name == DELIVER_AT_HEADER else now + int(value)
                if not 0 <= due - now <= MAX_DELAY_MS:
                    return 0
    return due if due > now else 0
