"""An MQTT session: what outlives a network connection (MQTT 5 section 4.1). Pure.

The session state the specifications name, and where logbus keeps it:

- the client identifier, and the session expiry interval (when the session ends after
  its connection does: 0 at once; ``NEVER_EXPIRES`` only at a clean connect);
- its subscriptions (``subscriptions.Subscriptions``);
- the messages for it: entries of its queue (``queue``) in the queue service, pointers
  into the log, so an offline session's messages are kept without a copy. The queue is
  made at the session's first subscription (``has_queue``): a client that only publishes
  has none, however long its session lives (docs/decisions/0042); QoS 1 and 2
  messages sent and not yet acknowledged are leases on those entries, held by the
  session: the deliveries themselves (``outbound.Outbound``, by packet id);
- QoS 2 hand-overs in flight both ways: publishes from the client PUBRECed and waiting
  for their PUBREL (``awaiting_rel``), messages to the client whose PUBREC or PUBCOMP
  has not come (``outbound``).

``to_record`` / ``from_record`` convert a session to the ``MqttSessionRecord`` the room
keeps in the state store for a session that may outlive its connection, so all of this
survives a broker restart; the QoS 2 messages to the client are kept as (packet id,
queue, entry seq), so that a restored entry goes out again with the packet id the
client already knows (``restored``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ...core.types import MqttSessionRecord
from .connect import NEVER_EXPIRES
from .outbound import PUBLISHED, RELEASED, Outbound, released
from .packets import Subscription
from ...filters import FilterError
from .subscriptions import FILTER_SQL, FILTER_TAG, Filtered, Subscriptions

log = logging.getLogger(__name__)


SESSION_QUEUE = "mqtt-session:"  # + the client id: the name of a session's queue


@dataclass(eq=False)
class Session:
    client_id: str
    queue: str  # the name of the session's own queue in the queue service
    version: int = 4
    expiry: int = 0  # seconds after the connection ends (NEVER_EXPIRES: never)
    user: str = ""
    subscriptions: Subscriptions = field(default_factory=Subscriptions)
    outbound: Outbound = field(default_factory=Outbound)
    awaiting_rel: set[int] = field(default_factory=set)  # QoS 2 from the client: PUBRECed
    # QoS 1/2 messages sent to an earlier connection (or before a restart: QoS 2 only)
    # and not acknowledged, to go out again with their packet id:
    # (queue, entry seq) -> (packet id, QoS)
    restored: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    connection: Any = None  # the live connection, None while offline
    disconnected_ms: int = 0
    shared: set[str] = field(default_factory=set)  # the shared subscriptions' queues it consumes
    has_queue: bool = False  # whether ``queue`` is made yet (at the first subscription)

    @property
    def kept(self) -> bool:
        """Whether the session outlives its connection, and so is stored."""
        return self.expiry > 0

    def expires_at(self) -> int | None:
        """Epoch ms when an offline session ends; None: never."""
        if self.expiry == NEVER_EXPIRES:
            return None
        return self.disconnected_ms + self.expiry * 1000

    def to_record(self) -> MqttSessionRecord:
        r = MqttSessionRecord(client_id=self.client_id, version=self.version, expiry_interval=self.expiry,
                              disconnected_ms=self.disconnected_ms, queue=self.queue if self.has_queue else "",
                              user=self.user)
        filters = self.subscriptions.filters
        for s, sid in self.subscriptions.by_filter.values():
            fd = filters.get(s.topic_filter)
            r.subscriptions.add(topic_filter=s.topic_filter, qos=s.qos, no_local=s.no_local,
                                retain_as_published=s.retain_as_published,
                                retain_handling=s.retain_handling, subscription_id=sid or 0,
                                filter_tag=fd.tag or "" if fd else "", filter_sql=fd.sql or "" if fd else "")
        r.awaiting_rel.extend(sorted(self.awaiting_rel))
        for d in self.outbound.in_flight.values():
            if d.qos == 2:
                leased = d.state == PUBLISHED and d.queue != ""  # else: settled, or from no queue
                r.out_qos2.add(packet_id=d.tag, released=d.state == RELEASED, queue=d.queue if leased else "",
                               seq=d.entry.seq if leased else 0)
        for (queue, seq), (pid, qos) in self.restored.items():
            if qos == 2:
                r.out_qos2.add(packet_id=pid, queue=queue, seq=seq)
        return r

    @classmethod
    def from_record(cls, r: MqttSessionRecord) -> Session:
        s = cls(r.client_id, SESSION_QUEUE + r.client_id, has_queue=bool(r.queue), version=r.version,
                expiry=r.expiry_interval, user=r.user, disconnected_ms=r.disconnected_ms,
                awaiting_rel=set(r.awaiting_rel))
        for sub in r.subscriptions:
            filtered = None
            if sub.filter_tag or sub.filter_sql:
                try:
                    filtered = Filtered.parse(sub.filter_tag or None, sub.filter_sql or None, FILTER_TAG, FILTER_SQL)
                except FilterError as e:  # was valid when subscribed: a newer grammar refuses it
                    log.warning("MQTT session %r: subscription %r dropped, its filter no longer parses: %s",
                                r.client_id, sub.topic_filter, e)
                    continue
            s.subscriptions.subscribe(Subscription(sub.topic_filter, sub.qos, sub.no_local, sub.retain_as_published,
                                                   sub.retain_handling), sub.subscription_id or None, filtered)
        for q in r.out_qos2:
            if q.released:  # its entry is settled: only the PUBREL is left to send
                s.outbound.in_flight[q.packet_id] = released(q.packet_id)
            else:
                s.restored[(q.queue, q.seq)] = (q.packet_id, 2)
        return s
