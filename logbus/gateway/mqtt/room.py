"""The MQTT room: every MQTT session of the broker, over the queue service of one vhost.

Theory of operation (docs/mqtt.md). MQTT publishes go to the exchange ``amq.topic`` of
the room's vhost (``/``), so they land on its log topic and reach every queue bound to it:
AMQP queues, and the sessions' own queues. A session (``session.Session``) is a client of
the vhost's queue service, not of the AMQP model:

- **its queue**, ``mqtt-session:<client id>``, is created in the queue service at the
  session's first subscription (a client that only publishes has none: no empty queue
  per sensor in the queue lists, docs/decisions/0042), and bound to ``amq.topic`` once
  per subscription with the filter as an AMQP binding key
  (``topic_map.filter_to_amqp``); a filter with a literal ``*`` level, which AMQP would
  read as a wildcard, is bound with ``*`` there, and the session drops what its filter
  does not match (``subscriptions.copy`` decides every copy anyway: ``$`` topics, No
  Local, the QoS). The queue is durable (its entries in the state store) when the session
  outlives its connection, so offline messages are pointers into the log, replayed from
  it after a restart.
- **a shared subscription** ``$share/<group>/<filter>`` is a queue of its own,
  ``mqtt-shared:<group>/<filter>``, consumed by every session subscribed to it: the queue
  service hands each message to one of them, round robin among those with credit. A
  member's message filter (MQTT 5) is its consumer's filter (a view of the queue,
  docs/decisions/0020), and the queue is bound once per distinct filter among its
  members (once without a filter if a member has none), so it holds only what some
  member takes.
- **the session record** (``MqttSessionRecord``, CF ``sessions``) holds what the queue
  does not: subscriptions, expiry, QoS 2 hand-overs in flight. It is written when it
  changes, not synced (a kill -9 keeps it, as it keeps queue entries); while connected,
  once per flush of the connection's output, before the bytes it speaks for
  (``protocol.MqttProtocol.flush_output``), never once per message.
- **limits** (docs/operations.md, "MQTT session limits"): a session's queue and a shared
  subscription's hold at most ``max_queued`` ready messages; past it a new message is
  dropped for that queue alone (overflow drop-new: the publisher is not told, as in
  Mosquitto) and counted (``dropped``). Messages in flight to the client do not count.
  Expiry is capped at ``max_session_expiry``, stored sessions included when taken up
  again at start.
- **retained messages** are in ``core.retained.RetainedStore``, durable and indexed. An
  operator lists them (``retained_messages``) and deletes one (``delete_retained``) as a
  client's empty retained PUBLISH to its topic clears it (the store's ``clear``), synced.

Sessions end (queue deleted, record deleted) when their connection ends with a session
expiry of 0, when the expiry runs out offline (a reactor call, re-armed at start from the
stored disconnect time), or at a clean connect. Will messages are published when a
connection ends without a DISCONNECT, after the will delay (MQTT 5), unless the session
is taken up again first.

The room knows nothing of sockets: connections (``protocol.MqttProtocol``) call it.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...core.errors import InvalidRequest, LogbusError, StorageError
from ...core.types import Message, Published, one_row
from ...core.types import Outcome
from ...core.types import DROP_NEW, Delivery, QueueLimits, QueueSettings
from ...core.types import RetainedStore
from ...core.types import MqttSessionRecord, RetainedRecord
from .connect import NEVER_EXPIRES, Accepted
from .mapping import EXCHANGE, message_from_publish
from .outbound import PUBLISHED, released
from .packets import Publish, Subscription, Will
from .reasons import MqttError
from .session import SESSION_QUEUE, Session
from .subscriptions import SHARE_PREFIX, SHARED_QUEUE, Filtered, shared_queue
from .topic_map import Unmappable, filter_to_amqp
from .topics import check_topic_filter

if TYPE_CHECKING:
    from ...core.ports import Queues, Sessions, VHosts

log = logging.getLogger(__name__)

PROTOCOL = "mqtt"  # the broker's name for this protocol's stored sessions


class Unavailable(LogbusError):
    """The room's vhost is not open (deleted): MQTT clients are refused."""


def _queues(s: Session) -> tuple[str, ...]:
    """The queues a session consumes: its own, once made, and its shared subscriptions'."""
    return (s.queue, *sorted(s.shared)) if s.has_queue else tuple(sorted(s.shared))


def binding_key(topic_filter: str) -> str:
    """The AMQP binding key a filter's queue is bound with: the filter mapped, a literal
    ``*`` level widened to AMQP's ``*`` (the session filters exactly)."""
    try:
        return filter_to_amqp(topic_filter)
    except Unmappable:
        return filter_to_amqp("/".join("+" if level == "*" else level for level in topic_filter.split("/")))


def shared_key(queue: str) -> str:
    """The binding key of a shared subscription's queue: its inner filter's."""
    return binding_key(queue[len(SHARED_QUEUE):].split("/", 1)[1])


class SessionConsumer:
    """A connected session's consumer of one queue (the queue service's ``Consumer``).
    While the session's subscriptions are all QoS 0 it takes messages without a lease
    (``no_ack``): the queue service settles them as it hands them out."""

    __slots__ = ("tag", "owner", "invisible_ms", "connection")

    def __init__(self, session: Session, connection: Any) -> None:
        self.tag = session.client_id
        self.owner = session  # leases are the session's: they outlive the connection
        self.invisible_ms = 0
        self.connection = connection

    @property
    def no_ack(self) -> bool:
        return self.owner.subscriptions.max_qos <= 0

    def has_credit(self) -> bool:
        return bool(self.connection.has_credit())

    def deliver(self, delivery: Delivery) -> None:
        self.connection.deliver(delivery, self.no_ack)


class MqttRoom:
    def __init__(self, vhosts: VHosts, store: Sessions, reactor: Any, *, vhost: str = "/", max_queued: int = 0,
                 max_session_expiry: int = NEVER_EXPIRES, dropped: Callable[[], object] | None = None) -> None:
        self.vhosts = vhosts  # the vhosts' queue models: the room's is ``vhost``'s
        self.store = store  # the broker's session records and retained messages
        store.on_start(self.start)  # its stored sessions' queues, before the broker's redo
        self.reactor = reactor
        self.vhost_name = vhost
        self.max_session_expiry = max_session_expiry
        # a session's (or a shared subscription's) queue: ready messages past max_queued dropped
        self.queue_settings = QueueSettings(QueueLimits(max_length=max_queued or None, overflow=DROP_NEW))
        self._dropped = dropped  # told of each message dropped at that limit
        self.sessions: dict[str, Session] = {}  # client id -> session, connected or kept
        # shared queue -> client id of each member -> its message filter
        self.shared_members: dict[str, dict[str, Filtered | None]] = {}
        self._consumers: dict[tuple[str, str], SessionConsumer] = {}  # (client id, queue) -> consumer
        self._timers: dict[tuple[str, str], Any] = {}  # (client id, "expiry" | "will") -> reactor call
        self._keep_alive: dict[str, int] = {}  # connected client id -> the keep alive its CONNECT got (s)
        self.started = False
        self.factory: Any = None  # the protocol factory serving the room (TCP and WebSocket)

    def clock(self) -> int:
        return int(self.reactor.seconds() * 1000)

    @property
    def retained(self) -> RetainedStore:
        """The broker's retained messages."""
        return self.store.retained

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Once the broker has started: index the retained messages, and take up every
        stored session again, offline, with its queue and bindings."""
        if self.started:
            return
        self.started = True
        now = self.clock()
        vhost = self.vhosts.queues(self.vhost_name)
        for raw in self.store.stored_sessions(PROTOCOL):
            s = Session.from_record(MqttSessionRecord.FromString(raw))
            if vhost is None:
                continue
            if not s.disconnected_ms:  # connected when the broker stopped
                s.disconnected_ms = now
            s.expiry = min(s.expiry, self.max_session_expiry)  # stored before the cap (or a lower one)
            self.sessions[s.client_id] = s
            if s.has_queue:
                self._open_queue(vhost, s.queue, durable=True)
            for sub, _ in s.subscriptions.by_filter.values():
                self._bind(vhost, s, sub)
            self._arm_expiry(s)
        if self.sessions:
            log.info("MQTT: %d stored sessions taken up again", len(self.sessions))

    def stop(self) -> None:
        for call in self._timers.values():
            if call.active():
                call.cancel()
        self._timers.clear()

    def vhost(self) -> Queues:
        v = self.vhosts.queues(self.vhost_name)
        if v is None:
            raise Unavailable(f"vhost {self.vhost_name!r} is not open")
        return v

    # -- sessions --------------------------------------------------------------------------

    def new_client_id(self) -> str:
        return "logbus-" + secrets.token_hex(8)

    def attach(self, connection: Any, acc: Accepted, user: str) -> tuple[Session, bool]:
        """Open the session of an accepted CONNECT for ``connection``: (session, session
        present). A connection holding the same client id is taken over first.
        StorageError: the session's record could not be stored (the CONNECT is to be refused)."""
        self.vhost()  # Unavailable when the room's vhost is gone
        cid = acc.client_id
        old = self.sessions.get(cid)
        if old is not None and old.connection is not None:
            old.connection.take_over()  # closes it; detaches the session (maybe ending it)
            old = self.sessions.get(cid)
        if old is not None:
            self._cancel(cid, "will")  # taken up again within the will delay: no will
            self._cancel(cid, "expiry")
            if acc.clean_start:
                self.end(old)
                old = None
        s = Session(cid, SESSION_QUEUE + cid) if old is None else old  # its queue: at its first SUBSCRIBE
        s.version, s.expiry, s.user = acc.version, acc.session_expiry, user
        s.connection, s.disconnected_ms = connection, 0
        self._keep_alive[cid] = acc.keep_alive
        s.outbound.receive_maximum = acc.receive_maximum
        s.outbound.maximum_packet_size = acc.maximum_packet_size
        s.outbound.topic_alias_maximum = acc.topic_alias_maximum
        self.sessions[cid] = s
        if s.kept:
            try:
                self.save(s)
            except StorageError:  # not stored: the CONNECT is refused, a new session not made
                if old is None:
                    self.end(s)
                else:
                    self.detach(s, connection)
                raise
        elif old is not None:
            self._forget_record(cid)
        return s, old is not None

    def consume(self, s: Session) -> None:
        """Start handing the session's queues to its connection."""
        vhost = self.vhost()
        for queue in _queues(s):
            c = self._consumers.get((s.client_id, queue))
            if c is not None and c.connection is s.connection:
                continue  # consumed already: its queue was made by this connection's SUBSCRIBE
            c = self._consumers[(s.client_id, queue)] = SessionConsumer(s, s.connection)
            vhost.consume(queue, c, self.shared_members.get(queue, {}).get(s.client_id))

    def dispatch(self, s: Session) -> None:
        """The connection may take more: hand out what its queues hold."""
        vhost = self.vhosts.queues(self.vhost_name)
        if vhost is not None:
            if s.has_queue:
                vhost.dispatch(s.queue)
            for queue in s.shared:
                vhost.dispatch(queue)

    def detach(self, s: Session, connection: Any, will: Will | None = None, will_delay: int = 0) -> None:
        """``connection`` ended. Its will (if any) is published, after ``will_delay``
        seconds if the session outlives it; the session ends unless it is kept."""
        if s.connection is not connection:
            return
        vhost = self.vhosts.queues(self.vhost_name)
        s.connection = None
        s.disconnected_ms = self.clock()
        self._keep_alive.pop(s.client_id, None)
        if vhost is not None:
            for queue in _queues(s):
                c = self._consumers.pop((s.client_id, queue), None)
                if c is not None:
                    vhost.cancel(queue, c)
            self._give_back(vhost, s)
        if will is not None:
            delay = min(will_delay, s.expiry)
            if delay and s.kept:
                self._timers[(s.client_id, "will")] = self.reactor.callLater(
                    delay, self._will_due, s.client_id, will, s.user)
            else:
                self.publish_will(will, s.client_id)
        if s.kept:
            try:
                self.save(s)
            except StorageError as e:  # kept by the broker, written once the store takes writes
                log.warning("MQTT session %r: its record is written once the state store takes writes again: %s",
                            s.client_id, e)
            self._arm_expiry(s)
        else:
            self.end(s)

    def _give_back(self, vhost: Queues, s: Session) -> None:
        """The messages in flight to a connection that ended go back to their queues (to
        be sent again, DUP, with the same packet id; a shared queue's to any member),
        except QoS 2 ones already PUBRECed: only their PUBREL is left to send."""
        for pid, d in list(s.outbound.in_flight.items()):
            if d.state == PUBLISHED:
                del s.outbound.in_flight[pid]
                if d.queue == s.queue:
                    s.restored[(d.queue, d.entry.seq)] = (pid, d.qos)
        s.outbound.shrink()
        s.subscriptions.forget_copies()
        for queue in _queues(s):
            vhost.release(queue, s)

    def end(self, s: Session) -> None:
        """The session is over: its queue, its shared memberships and its record go."""
        if self.sessions.get(s.client_id) is s:
            del self.sessions[s.client_id]
            self._keep_alive.pop(s.client_id, None)
        self._cancel(s.client_id, "expiry")
        vhost = self.vhosts.queues(self.vhost_name)
        if vhost is not None:
            for queue in sorted(s.shared):
                self._leave_shared(vhost, s, queue)
            if s.has_queue:
                vhost.close_queue(s.queue)
        self._forget_record(s.client_id)

    def kick(self, client_id: str) -> bool:
        s = self.sessions.get(client_id)
        if s is None or s.connection is None:
            return False
        s.connection.kick()
        return True

    def delete_session(self, client_id: str) -> bool:
        s = self.sessions.get(client_id)
        if s is None:
            return False
        if s.connection is not None:
            s.connection.kick()
        s = self.sessions.get(client_id)
        if s is not None:
            self.end(s)
        return True

    def save(self, s: Session) -> None:
        """Store the session's record (if it outlives its connection). StorageError: the
        state store refused it (the broker writes it once the store takes writes again);
        the connection must not say what the record does not hold."""
        if not s.kept or self.sessions.get(s.client_id) is not s:  # not stored, or ended meanwhile
            return
        self.store.save_session(PROTOCOL, s.client_id, s.to_record())

    def _forget_record(self, client_id: str) -> None:
        self.store.forget_session(PROTOCOL, client_id)  # never raises: deleted once it can be

    def _arm_expiry(self, s: Session) -> None:
        at = s.expires_at()
        if at is None:
            return
        self._cancel(s.client_id, "expiry")
        delay = max(0.0, (at - self.clock()) / 1000)
        self._timers[(s.client_id, "expiry")] = self.reactor.callLater(delay, self._expired, s.client_id)

    def _expired(self, client_id: str) -> None:
        self._timers.pop((client_id, "expiry"), None)
        s = self.sessions.get(client_id)
        if s is not None and s.connection is None:
            log.info("MQTT session %r expired", client_id)
            self.end(s)

    def _cancel(self, client_id: str, what: str) -> None:
        call = self._timers.pop((client_id, what), None)
        if call is not None and call.active():
            call.cancel()

    def _open_queue(self, vhost: Queues, name: str, *, durable: bool, kind: str = "session") -> None:
        qs = vhost.open_queue(name, self.queue_settings, durable=durable, kind=kind)
        qs.on_dropped = self._dropped

    # -- subscriptions ---------------------------------------------------------------------

    def subscribe(self, s: Session, sub: Subscription, subscription_id: int | None,
                  filtered: Filtered | None = None) -> bool:
        """Add (or replace) a subscription; True when its filter was subscribed already.
        ``filtered``: its message filter (MQTT 5 user properties), carried by its binding.
        StorageError: made, but the session's record does not say so yet (``save``)."""
        vhost = self.vhost()
        before = s.subscriptions.filters.get(sub.topic_filter)
        existed = s.subscriptions.subscribe(sub, subscription_id, filtered)
        if existed and before != filtered and not sub.topic_filter.startswith(SHARE_PREFIX):
            self._unbind(vhost, s, sub.topic_filter, before)
        if not existed or before != filtered:
            self._bind(vhost, s, sub)
        self.save(s)
        return existed

    def _bind(self, vhost: Queues, s: Session, sub: Subscription) -> None:
        f = sub.topic_filter
        filtered = s.subscriptions.filters.get(f)
        if f.startswith(SHARE_PREFIX):
            queue = shared_queue(f)
            self._open_queue(vhost, queue, durable=True, kind="shared")
            members = self.shared_members.setdefault(queue, {})
            if s.client_id in members:  # subscribed again, with another filter
                self._unshare(vhost, queue, s.client_id)
            members[s.client_id] = filtered
            if list(members.values()).count(filtered) == 1:
                vhost.bind(EXCHANGE, queue, shared_key(queue), filter=filtered)
            s.shared.add(queue)
            if s.connection is not None:
                old = self._consumers.pop((s.client_id, queue), None)
                if old is not None:
                    vhost.cancel(queue, old)
                c = self._consumers[(s.client_id, queue)] = SessionConsumer(s, s.connection)
                vhost.consume(queue, c, filtered)
        else:
            if not s.has_queue:
                self._make_session_queue(vhost, s)
            vhost.bind(EXCHANGE, s.queue, binding_key(f), filter=filtered)

    def _make_session_queue(self, vhost: Queues, s: Session) -> None:
        """The session's first subscription (not a shared one): its queue is made, durable
        if the session outlives its connection, and a connected session consumes it."""
        self._open_queue(vhost, s.queue, durable=s.kept)
        s.has_queue = True
        if s.connection is not None:
            c = self._consumers[(s.client_id, s.queue)] = SessionConsumer(s, s.connection)
            vhost.consume(s.queue, c)

    def unsubscribe(self, s: Session, topic_filter: str) -> bool:
        """False when there was no such subscription. StorageError: as ``subscribe``."""
        filtered = s.subscriptions.filters.get(topic_filter)
        if not s.subscriptions.unsubscribe(topic_filter):
            return False
        vhost = self.vhost()
        if topic_filter.startswith(SHARE_PREFIX):
            self._leave_shared(vhost, s, shared_queue(topic_filter))
        else:
            self._unbind(vhost, s, topic_filter, filtered)
        self.save(s)
        return True

    def _unbind(self, vhost: Queues, s: Session, topic_filter: str, filtered: Filtered | None) -> None:
        """Remove the binding of a subscription gone (or replaced), unless another of the
        session's subscriptions has the same key and filter."""
        key = binding_key(topic_filter)
        filters = s.subscriptions.filters
        if not any(binding_key(f) == key and filters.get(f) == filtered
                   for f in s.subscriptions.by_filter if not f.startswith(SHARE_PREFIX) and f != topic_filter):
            vhost.unbind(EXCHANGE, s.queue, key, filter=filtered)

    def _leave_shared(self, vhost: Queues, s: Session, queue: str) -> None:
        s.shared.discard(queue)
        c = self._consumers.pop((s.client_id, queue), None)
        if c is not None:
            vhost.cancel(queue, c)
        vhost.release(queue, s)
        members = self.shared_members.get(queue)
        if members is not None and s.client_id in members:
            if len(members) > 1:
                self._unshare(vhost, queue, s.client_id)
                return
            del self.shared_members[queue]
            vhost.close_queue(queue)

    def _unshare(self, vhost: Queues, queue: str, client_id: str) -> None:
        """A member's filter leaves the group: its binding goes if no other member has it."""
        members = self.shared_members[queue]
        filtered = members.pop(client_id)
        if filtered not in members.values():
            vhost.unbind(EXCHANGE, queue, shared_key(queue), filter=filtered)

    # -- messages ----------------------------------------------------------------------------

    def publish(self, message: Message, on_durable: Callable[[Any], object] | None = None) -> bool:
        """Publish to ``amq.topic``; True when a queue took it. ``on_durable(result)``
        fires once the append is durable (the exception if it failed or was refused)."""
        out = self.vhost().publish([message], None if on_durable is None else one_row(on_durable))
        if out.error is not None:
            raise out.error
        return out.routed

    def publish_many(self, rows: list[Message],
                     on_durable: Callable[[int, int, Any], object] | None = None) -> Published:
        """A turn's publishes, together (the broker's pipeline: their envelopes say
        ``amq.topic`` and the routing key); the queues they reach are dispatched once at
        the end of the turn (a fleet: one delivery run per subscriber)."""
        return self.vhost().publish(rows, on_durable, dispatch_later=True)

    def retain(self, message: Message, qos: int) -> None:
        """Keep (or, with an empty payload, clear) the retained message of its topic."""
        env = message.envelope
        record = RetainedRecord(topic=env.mqtt_topic, payload=message.value or b"", qos=qos,
                                envelope=env.SerializeToString(), time_ms=self.clock(), expires_at_ms=env.expires_at_ms)
        for key, value in message.headers:
            h = record.headers.add(key=key)
            if value is not None:
                h.value = value
        self.retained.retain(record)

    def publish_will(self, will: Will, client_id: str) -> None:
        p = Publish(will.topic, will.payload, will.qos, will.retain, properties=will.properties)
        message: Message = message_from_publish(will.topic, p, client_id, self.clock())
        try:
            if will.retain:
                self.retain(message, will.qos)
            self.publish(message)
        except LogbusError as e:
            log.warning("the will of MQTT client %r was not published: %s", client_id, e)

    def _will_due(self, client_id: str, will: Will, user: str) -> None:
        self._timers.pop((client_id, "will"), None)
        self.publish_will(will, client_id)

    def commit(self) -> None:
        """Write the queues' changes to the state store now rather than at the end of the
        turn: a QoS 2 message PUBRECed is settled before the session says so and the
        PUBREL goes out (a kill -9 between them must not bring it back)."""
        self.vhosts.commit()

    def released_gone(self, s: Session) -> list[int]:
        """QoS 2 messages the session still means to send again whose entries are gone
        (settled at a PUBREC whose session record a crash lost): only their PUBREL is
        left; they move to the session's in-flight PUBRELs. Their packet ids."""
        vhost = self.vhosts.queues(self.vhost_name)
        gone = []
        for (queue, seq), (pid, qos) in list(s.restored.items()):
            if qos == 2 and (vhost is None or not vhost.holds(queue, seq)) and pid not in s.outbound.in_flight:
                del s.restored[(queue, seq)]
                s.outbound.in_flight[pid] = released(pid)
                gone.append(pid)
        return gone

    def settle(self, d: Delivery, outcome: Outcome = Outcome.ACK) -> None:
        """Settle a delivery to a session (its queue deleted meanwhile: nothing to do)."""
        vhost = self.vhosts.queues(self.vhost_name)
        if vhost is not None:
            vhost.settle(d, outcome)

    # -- what the CLI and the HTTP API list --------------------------------------------------

    def describe(self) -> list[dict[str, Any]]:
        """Every session; a connected one with its connection's facts too: the keep
        alive its CONNECT got (seconds), and from the broker's connection registry its
        id, when it was accepted and the messages it received and sent."""
        vhost = self.vhosts.queues(self.vhost_name)
        out = []
        for cid in sorted(self.sessions):
            s = self.sessions[cid]
            qs = vhost.queues.get(s.queue) if vhost is not None else None
            c = s.connection
            about: dict[str, Any] = {
                "client_id": cid, "user": s.user, "connected": c is not None,
                "peer": c.peer if c is not None else None,
                "protocol": {3: "3.1", 4: "3.1.1", 5: "5.0"}.get(s.version, str(s.version)),
                "clean": not s.kept, "expiry_interval": s.expiry,
                "subscriptions": [{"filter": sub.topic_filter, "qos": sub.qos} for sub, _ in s.subscriptions.by_filter.values()],
                "queued": qs.queue.message_count if qs is not None else 0,
                "in_flight": len(s.outbound.in_flight),
            }
            if c is not None:
                about["keep_alive"] = self._keep_alive.get(cid)
                record = c.record  # its ConnectionRecord (None only before it was accepted)
                if record is not None:
                    about.update(connection=record.id, connected_at=record.connected_at, received=record.received,
                                 sent=record.sent)
            out.append(about)
        return out

    def retained_messages(self, topic_filter: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The first ``limit`` retained messages whose topic ``topic_filter`` matches
        (None: every one), in topic order. InvalidRequest: not a topic filter."""
        if topic_filter is not None:
            try:
                check_topic_filter(topic_filter, False)
            except MqttError as e:
                raise InvalidRequest(f"{topic_filter!r} is not an MQTT topic filter: {e.text}") from None
        store = self.retained
        return [store.to_json(r) for r in store.browse(topic_filter, limit)]

    def delete_retained(self, topic: str) -> bool:
        """Forget the topic's retained message as a client's empty retained PUBLISH to it
        does (MQTT section 3.3.1.3): new subscribers get none, and the deletion is synced
        to disk before this returns. Unlike that PUBLISH, nothing is sent to the topic's
        subscribers. False: the topic holds none (or it expired)."""
        if self.retained.get(topic) is None:
            return False
        self.retained.clear(topic, sync=True)
        return True
