"""Half messages (RocketMQ's transactional messages): a message stored at once, invisible to
every consumer, published only when its producer commits it.

Theory of operation. A producer sends a *half* of producer group ``g`` to topic ``t``; the
half is stored (synced) in the state store (``HalfRecord``, metadata column family), never
in the log, so no Kafka consumer, queue, pop group or Spark job can see it. The producer
runs its local transaction and then commits the half (it is published to ``t`` through the
one pipeline, as an HTTP publish: appended, routed to the queues and pop groups that read
``t``) or rolls it back (it is dropped). Either way the outcome is kept for a day
(``HalfOutcome``: a late or repeated commit is told what happened) and written to the
audit log.

A half left unsettled is *checked back* with its producer group every
``check_interval_ms`` of the group (default 60 s, RocketMQ's transactionCheckInterval):
a check request (JSON: the half's id, group, topic, key and how many checks so far) is
appended to the group's check topic ``%CHECK%<g>`` (made with the group's settings or its
first half), which the producers pop (``logbus pop receive``, the pop API; a pop group
gets what is appended after it is made), and answered by committing or rolling back; or,
when the group has a ``check_url``, POSTed there, and the answer ``{"action": "commit" |
"rollback" | "unknown"}`` applied (anything else, or no answer within 10 s: asked again). After
``max_checks`` checks (default 15, RocketMQ's transactionCheckMax) a half still unsettled
is rolled back. Halves and their check counts survive restarts.

A commit caught by a crash between its publish and its settlement is published again
when the producer commits the half again (its check-back asks): at least once, as
RocketMQ.

    halves.open(state, publish=pipeline.append, ensure_topic=topics.ensure)
    hid = halves.send("orders-svc", "orders", message)          # stored; StorageError: not
    d = halves.commit(hid)                                        # Deferred[list[int]]: offsets
    halves.rollback(hid)
"""

from __future__ import annotations

import io
import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import LoopingCall

from .errors import LogbusError, StorageError
from .log import batch as B
from .message import Message
from .metrics import Metrics
from .state import (
    CF_METADATA,
    HALF_GROUP_PREFIX,
    HALF_OUTCOME_PREFIX,
    HALF_PREFIX,
    StateStore,
    half_group_key,
    half_group_of_key,
    half_id_of_key,
    half_key,
    half_outcome_key,
)
from .state_pb2 import HalfGroupRecord, HalfOutcome, HalfRecord

log = logging.getLogger(__name__)
audit_log = logging.getLogger("logbus.audit")

CHECK_INTERVAL_MS = 60_000  # RocketMQ's transactionCheckInterval
MAX_CHECKS = 15  # RocketMQ's transactionCheckMax
OUTCOME_RETENTION_MS = 86_400_000  # what happened to a settled half is told for a day
CHECK_TICK_S = 1.0  # due halves are looked for once a second
CHECK_TOPIC_PREFIX = "%CHECK%"
# Kafka producers send halves as records of this topic (made with a group's settings):
HALVES_TOPIC = "logbus.halves"
H_GROUP = "logbus.half.group"  # a half of this producer group ...
H_TOPIC = "logbus.half.topic"  # ... bound for this topic; its id "<partition>-<offset>" in HALVES_TOPIC
H_ID = "logbus.half.id"  # the half's id when its producer names it (an AMQP producer must)
H_COMMIT = "logbus.half.commit"  # a record that commits the half of this id
H_ROLLBACK = "logbus.half.rollback"  # a record that rolls back the half of this id
HALF_HEADERS = (H_GROUP, H_TOPIC, H_ID, H_COMMIT, H_ROLLBACK)
HALF_TARGET_HEADER = H_TOPIC  # a gateway checks its producer may write that topic
CHECK_POST_TIMEOUT_S = 10  # a check request POSTed to a group's URL: its answer waited for that long
COMMITTED, ROLLED_BACK = "committed", "rolled back"

Publish = Callable[[str, Sequence[Message], int | None], Deferred[list[int]]]


class UnknownHalf(LogbusError):
    """No unsettled half message has that id (never sent, or settled more than a day ago)."""

    code = "unknown_half"


class HalfSettled(LogbusError):
    """The half message was settled the other way already (committed, then rolled back, or
    the reverse)."""

    code = "half_settled"


def check_topic(group: str) -> str:
    """The topic a producer group's check requests are appended to."""
    return CHECK_TOPIC_PREFIX + group


@dataclass
class GroupSettings:
    check_interval_ms: int = CHECK_INTERVAL_MS
    max_checks: int = MAX_CHECKS
    check_url: str = ""  # check requests POSTed there (else appended to the check topic)


def _now_ms() -> int:
    return int(time.time() * 1000)


class HalfService:
    def __init__(self, reactor: Any, metrics: Metrics | None = None, *, clock: Callable[[], int] = _now_ms) -> None:
        self.reactor = reactor
        self.clock = clock
        metrics = metrics or Metrics()
        self._outcomes = {
            COMMITTED: metrics.counter("logbus_half_messages_committed", "Half messages committed (published)"),
            ROLLED_BACK: metrics.counter("logbus_half_messages_rolled_back",
                                         "Half messages rolled back (by their producer, or unsettled after max checks)"),
        }
        self._sent = metrics.counter("logbus_half_messages_sent", "Half messages stored")
        self._checks_made = metrics.counter("logbus_half_message_checks",
                                            "Check requests made to producer groups about unsettled half messages")
        self.store: StateStore | None = None
        self.halves: dict[str, HalfRecord] = {}
        self.groups: dict[str, GroupSettings] = {}
        self._publish: Publish | None = None
        self._ensure_topic: Callable[[str], object] = lambda name: None
        self._checks: LoopingCall | None = None
        self._committing: dict[str, list[Deferred[list[int]]]] = {}  # commits being published
        self._forget_at = 0  # when settled outcomes older than a day are looked for next

    # -- lifecycle ----------------------------------------------------------------------

    def open(self, store: StateStore, publish: Publish, ensure_topic: Callable[[str], object]) -> int:
        """Load the unsettled halves and the groups' settings; how many halves."""
        self.store, self._publish, self._ensure_topic = store, publish, ensure_topic
        for key, raw in store.scan_prefix(CF_METADATA, HALF_PREFIX):
            rec = HalfRecord()
            rec.ParseFromString(raw)
            self.halves[half_id_of_key(key)] = rec
        for key, raw in store.scan_prefix(CF_METADATA, HALF_GROUP_PREFIX):
            g = HalfGroupRecord()
            g.ParseFromString(raw)
            self.groups[half_group_of_key(key)] = GroupSettings(g.check_interval_ms, g.max_checks, g.check_url)
        return len(self.halves)

    def start(self) -> None:
        self._checks = LoopingCall(self.check)
        self._checks.clock = self.reactor
        self._checks.start(CHECK_TICK_S, now=False)

    def stop(self) -> None:
        if self._checks is not None and self._checks.running:
            self._checks.stop()

    def _started(self) -> tuple[StateStore, Publish]:
        if self.store is None or self._publish is None:
            raise RuntimeError("the half-message service is not open")
        return self.store, self._publish

    # -- producer groups ------------------------------------------------------------------

    def settings(self, group: str) -> GroupSettings:
        return self.groups.get(group) or GroupSettings()

    def set_group(self, group: str, check_interval_ms: int, max_checks: int, check_url: str = "") -> None:
        """A producer group's check-back: how often, how many times before a rollback, and
        where (``check_url``: POSTed there; empty: appended to its check topic)."""
        if check_interval_ms < 100 or not 1 <= max_checks <= 1000:
            raise ValueError("check_interval_ms must be at least 100 and max_checks from 1 to 1000")
        if check_url and not check_url.startswith(("http://", "https://")):
            raise ValueError("check_url must be an http:// or https:// URL")
        store, _ = self._started()
        self._ensure_topic(check_topic(group))  # its producers' pop group can be made on it now
        self._ensure_topic(HALVES_TOPIC)  # where its Kafka producers send halves
        store.put(CF_METADATA, half_group_key(group), HalfGroupRecord(
            check_interval_ms=check_interval_ms, max_checks=max_checks, check_url=check_url), sync=True)
        self.groups[group] = GroupSettings(check_interval_ms, max_checks, check_url)

    # -- a producer's half messages -------------------------------------------------------------

    def send(self, group: str, topic: str, message: Message, partition: int | None = None,
             half_id: str | None = None) -> str:
        """Store ``message`` as a half of ``group`` bound for ``topic``; its id (``half_id``,
        else a new one). Synced before it returns (StorageError: not stored)."""
        store, _ = self._started()
        self._ensure_topic(check_topic(group))
        half_id = half_id or uuid.uuid4().hex
        now = self.clock()
        rec = HalfRecord(group=group, topic=topic, partition=-1 if partition is None else partition,
                         record=bytes(B.build([message.to_record()], 0, now)), created_ms=now, checks=0,
                         next_check_ms=now + self.settings(group).check_interval_ms)
        store.put(CF_METADATA, half_key(half_id), rec, sync=True)
        self.halves[half_id] = rec
        self._sent.inc()
        return half_id

    def describe(self, half_id: str) -> dict[str, Any]:
        """What is known of a half: unsettled (with its checks so far) or its outcome."""
        rec = self.halves.get(half_id)
        if rec is not None:
            return {"id": half_id, "group": rec.group, "topic": rec.topic, "state": "unsettled",
                    "checks": rec.checks, "created_ms": rec.created_ms}
        out = self._outcome(half_id)
        if out is None:
            raise UnknownHalf(f"no half message {half_id!r}")
        return {"id": half_id, "group": out.group, "topic": out.topic, "state": out.state, "reason": out.reason,
                "settled_ms": out.settled_ms, "offsets": list(out.offsets)}

    def unsettled(self, group: str | None = None) -> list[dict[str, Any]]:
        """The unsettled halves (of ``group``), oldest first."""
        ids = sorted((h for h, r in self.halves.items() if group is None or r.group == group),
                     key=lambda h: self.halves[h].created_ms)
        return [self.describe(h) for h in ids]

    def _outcome(self, half_id: str) -> HalfOutcome | None:
        store, _ = self._started()
        return store.get_msg(CF_METADATA, half_outcome_key(half_id), HalfOutcome)

    def commit(self, half_id: str, reason: str = "by its producer") -> Deferred[list[int]]:
        """Publish the half to its topic (through the pipeline); fires with the offsets once
        durable, then the half is settled. A commit of a committed half answers its
        offsets again; of a rolled-back one, HalfSettled."""
        store, publish = self._started()
        out: Deferred[list[int]] = Deferred()
        waiting = self._committing.get(half_id)
        if waiting is not None:
            waiting.append(out)
            return out
        rec = self.halves.get(half_id)
        if rec is None:
            settled = self._outcome(half_id)
            if settled is None:
                return fail(UnknownHalf(f"no half message {half_id!r}"))
            if settled.state != COMMITTED:
                return fail(HalfSettled(f"half message {half_id} was {settled.state}"))
            return succeed(list(settled.offsets))
        messages = [Message.from_record(B.Record(r.key, r.value, r.timestamp, r.headers))
                    for r in B.decode(rec.record)]
        try:
            self._ensure_topic(rec.topic)
            d = publish(rec.topic, messages, None if rec.partition < 0 else rec.partition)
        except LogbusError as e:
            return fail(e)
        waiters = self._committing[half_id] = [out]

        def published(offsets: list[int]) -> None:
            self._committing.pop(half_id, None)
            try:
                self._settle(half_id, rec, COMMITTED, reason, offsets)
            except StorageError as e:  # published, not settled: a check-back asks again (at least once)
                log.warning("half message %s published at %s but not settled: %s", half_id, offsets, e)
            for w in waiters:
                w.callback(list(offsets))

        def failed(f: Any) -> None:
            self._committing.pop(half_id, None)
            for w in waiters:
                w.errback(f)

        d.addCallbacks(published, failed)
        return out

    def rollback(self, half_id: str, reason: str = "by its producer") -> None:
        """Drop the half (UnknownHalf; HalfSettled when it was committed)."""
        self._started()
        rec = self.halves.get(half_id)
        if rec is None or half_id in self._committing:
            out = self._outcome(half_id)
            if out is None and half_id not in self._committing:
                raise UnknownHalf(f"no half message {half_id!r}")
            if half_id in self._committing or (out is not None and out.state != ROLLED_BACK):
                raise HalfSettled(f"half message {half_id} is {COMMITTED}")
            return
        self._settle(half_id, rec, ROLLED_BACK, reason, [])

    def _settle(self, half_id: str, rec: HalfRecord, state: str, reason: str, offsets: list[int]) -> None:
        store, _ = self._started()
        out = HalfOutcome(group=rec.group, topic=rec.topic, state=state, reason=reason, settled_ms=self.clock(),
                          offsets=offsets)
        with store.batch(sync=True) as b:
            b.delete(CF_METADATA, half_key(half_id))
            b.put(CF_METADATA, half_outcome_key(half_id), out)
        self.halves.pop(half_id, None)
        self._outcomes[state].inc()
        audit_log.info("half message %s of producer group %r to topic %r %s (%s)", half_id, rec.group, rec.topic,
                       state, reason)

    # -- halves sent as records of HALVES_TOPIC (Kafka producers) --------------------------------

    def record_appended(self, partition: int, offset: int, message: Message) -> None:
        """A record appended to ``HALVES_TOPIC`` (a Kafka produce, or an AMQP publish to the
        exchange of that name, whose text headers are record headers): a half to store
        (headers ``H_GROUP`` and ``H_TOPIC``; its id ``H_ID``, else ``<partition>-<offset>``,
        which a Kafka producer knows from its answer), or the commit or rollback of one
        (``H_COMMIT`` / ``H_ROLLBACK``: the id).
        Called as it is appended, before it is acknowledged; the half is stored (synced)
        then. A record with none of them, or a failure, is logged and left."""
        headers = {k: v for k, v in message.headers if k in HALF_HEADERS and v is not None}
        try:
            if H_COMMIT in headers or H_ROLLBACK in headers:  # after this append (not inside it)
                commit = H_COMMIT in headers
                half_id = headers[H_COMMIT if commit else H_ROLLBACK].decode("utf-8", "replace")
                self.reactor.callLater(0, self._settle_asked, half_id, commit, f"{partition}/{offset}")
            elif H_GROUP in headers and H_TOPIC in headers:
                half_id = headers[H_ID].decode("utf-8", "replace") if H_ID in headers else f"{partition}-{offset}"
                if half_id in self.halves or self._outcome(half_id) is not None:
                    return  # seen before (the same record handed over again, or an id used twice)
                target = headers[H_TOPIC].decode("utf-8", "replace")
                kept = [(k, v) for k, v in message.headers if k not in HALF_HEADERS]
                envelope = type(message.envelope)()
                envelope.CopyFrom(message.envelope)
                if envelope.exchange == HALVES_TOPIC:  # an AMQP publish: as if published to the target's exchange
                    envelope.exchange = target
                half = Message(message.key, message.value, message.timestamp, kept, envelope)
                self.send(headers[H_GROUP].decode("utf-8", "replace"), target, half, None, half_id)
            else:
                log.info("a record at %s/%d offset %d names no half message (headers %s, %s, %s or %s)",
                         HALVES_TOPIC, partition, offset, *HALF_HEADERS)
        except LogbusError as e:  # a StorageError: the half is not stored; an unknown or settled one
            log.warning("the record at %s/%d offset %d was not taken as a half message: %s", HALVES_TOPIC,
                        partition, offset, e)

    def _settle_asked(self, half_id: str, commit: bool, where: str) -> None:
        why = f"a record of {HALVES_TOPIC} ({where})"
        try:
            if commit:
                self.commit(half_id, f"by {why}").addErrback(lambda f: log.warning(
                    "%s commits half message %s: %s", why, half_id, f.getErrorMessage()))
            else:
                self.rollback(half_id, f"by {why}")
        except LogbusError as e:
            log.warning("%s rolls back half message %s: %s", why, half_id, e)

    # -- check-back -----------------------------------------------------------------------------

    def check(self, now_ms: int | None = None) -> int:
        """Ask the producer group of each half due about it (a check request on its check
        topic), or roll it back after its group's max checks; forget outcomes older than
        a day. How many halves were checked or rolled back. A failure is logged and the
        half tried again at the next tick."""
        now = self.clock() if now_ms is None else now_ms
        done = 0
        for half_id, rec in list(self.halves.items()):
            if rec.next_check_ms > now or half_id in self._committing:
                continue
            settings = self.settings(rec.group)
            try:
                if rec.checks >= settings.max_checks:
                    self._settle(half_id, rec, ROLLED_BACK, f"unsettled after {rec.checks} checks", [])
                else:
                    self._ask(half_id, rec, now, settings)
                done += 1
            except (LogbusError, StorageError, OSError) as e:
                log.warning("checking back half message %s of group %r failed, tried again: %s", half_id,
                            rec.group, e)
        if now >= self._forget_at:
            self._forget_at = now + 60_000
            self._forget_outcomes(now)
        return done

    def _ask(self, half_id: str, rec: HalfRecord, now: int, settings: GroupSettings) -> None:
        store, publish = self._started()
        records = list(B.decode(rec.record))
        first = records[0] if records else None
        request = {"id": half_id, "group": rec.group, "topic": rec.topic, "check": rec.checks + 1,
                   "max_checks": settings.max_checks, "created_ms": rec.created_ms,
                   "key": first.key.decode("utf-8", "replace") if first is not None and first.key else None}
        if settings.check_url:
            self._post(half_id, settings.check_url, json.dumps(request).encode())
        else:
            topic = check_topic(rec.group)
            self._ensure_topic(topic)
            publish(topic, [Message(half_id.encode(), json.dumps(request).encode())], None).addErrback(
                lambda f: log.warning("the check request of half message %s was not appended: %s", half_id,
                                      f.getErrorMessage()))
        updated = HalfRecord()
        updated.CopyFrom(rec)
        updated.checks = rec.checks + 1
        updated.next_check_ms = now + settings.check_interval_ms
        store.put(CF_METADATA, half_key(half_id), updated)
        self.halves[half_id] = updated
        self._checks_made.inc()

    def _post(self, half_id: str, url: str, body: bytes) -> None:
        """POST a check request to the group's URL; its answer ``{"action": "commit" |
        "rollback" | "unknown"}`` is applied (anything else: asked again at the next check)."""
        from twisted.web.client import Agent, FileBodyProducer, readBody
        from twisted.web.http_headers import Headers
        from twisted.web.iweb import IBodyProducer

        agent = Agent(self.reactor, connectTimeout=CHECK_POST_TIMEOUT_S)
        producer = cast(IBodyProducer, FileBodyProducer(io.BytesIO(body), cooperator=_cooperator(self.reactor)))
        d = agent.request(b"POST", url.encode(), Headers({b"Content-Type": [b"application/json"]}), producer)
        d.addTimeout(CHECK_POST_TIMEOUT_S, self.reactor)
        d.addCallback(lambda response: readBody(response).addCallback(lambda data: (response.code, data)))
        d.addCallback(self._answered, half_id)
        d.addErrback(lambda f: log.warning("the check request of half message %s to %s failed: %s", half_id,
                                           url, f.getErrorMessage()))

    def _answered(self, answer: tuple[int, bytes], half_id: str) -> None:
        code, data = answer
        try:
            action = json.loads(data).get("action") if code == 200 else None
        except (ValueError, AttributeError):
            action = None
        if half_id not in self.halves:
            return  # settled meanwhile
        if action == "commit":
            self.commit(half_id, "by its producer's check-back").addErrback(
                lambda f: log.warning("committing half message %s failed: %s", half_id, f.getErrorMessage()))
        elif action == "rollback":
            self.rollback(half_id, "by its producer's check-back")
        elif action != "unknown":
            log.warning("the check-back of half message %s answered %d %r: asked again at the next check",
                        half_id, code, data[:200])

    def _forget_outcomes(self, now: int) -> None:
        store, _ = self._started()
        old = []
        for key, raw in store.scan_prefix(CF_METADATA, HALF_OUTCOME_PREFIX):
            out = HalfOutcome()
            out.ParseFromString(raw)
            if now - out.settled_ms > OUTCOME_RETENTION_MS:
                old.append(key)
        if old:
            with store.batch() as b:
                for key in old:
                    b.delete(CF_METADATA, key)


def _cooperator(reactor: Any) -> Any:
    """A cooperator on ``reactor`` (the request body's producer: not the global reactor's)."""
    from twisted.internet.task import Cooperator

    return Cooperator(scheduler=lambda work: reactor.callLater(0, work))


class WithHalves:
    """The pipeline's readers of appended records (``pipeline.PopReaders``): the pop
    groups, and the half service on ``HALVES_TOPIC``."""

    def __init__(self, pop: Any, halves: HalfService) -> None:
        self.pop = pop
        self.halves = halves
        self.service = pop.service

    def watches(self, topic: str) -> bool:
        return topic == HALVES_TOPIC or bool(self.pop.watches(topic))

    def appended(self, topic: str, partition: int, offset: int, message: Message, expires_ms: int = 0,
                 visible_ms: int = 0) -> None:
        if topic == HALVES_TOPIC:
            self.halves.record_appended(partition, offset, message)
        self.pop.appended(topic, partition, offset, message, expires_ms, visible_ms)
