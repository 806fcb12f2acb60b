"""The server-to-client half of an MQTT session: packet identifiers, the client's receive
maximum, topic aliases towards the client, its maximum packet size, and the QoS 1/2
hand-over with its acknowledgements. Pure: the session asks it whether and how to send a
message, and tells it what the client acknowledged.

- **Packet identifiers.** Each QoS 1/2 message in flight holds one (1..65535), never two
  at once; they are handed out round-robin, so a late acknowledgement of an old id is not
  mistaken for a new message's.
- **Receive maximum** (MQTT 5 section 3.3.4; the client's, from CONNECT; 65,535 when it
  gave none, and for 3.1.1). At most that many QoS 1/2 messages are unacknowledged;
  ``can_send`` says whether one more may go. QoS 0 is not counted.
- **Maximum packet size** (section 3.1.2.11.4). A message whose PUBLISH would be larger
  is not sent: the session drops it as if delivered (``fits``).
- **Topic aliases** (section 3.3.2.3.4, the client's Topic Alias Maximum). A topic sent
  again reuses its alias with an empty topic name; new topics take free aliases, then
  replace the least recently used one.
- **QoS 2** (section 4.3.3): PUBLISH, then the client's PUBREC, our PUBREL, its PUBCOMP.
  ``pubrec`` returns the PUBREL's reason code; ``pubcomp`` ends the flow. A PUBREC with a
  reason code of 0x80 or above ends the flow there (the client refused the message).
- **Resending.** After a reconnect to a kept session, ``resend`` lists what to send again:
  PUBLISH with DUP set for messages not PUBRECed, PUBREL for those that were (section
  4.4).

What is in flight is the delivery itself (``core/queues/entry.py``: the queue's lease,
which settles the message), its packet id, QoS and state in the delivery's ``tag``,
``qos`` and ``state``; a message no lease stands behind (a retained one, a PUBREL left
from before a restart) is a delivery from outside a queue (``Delivery.outside``).
"""

from __future__ import annotations

from collections import OrderedDict

from ...core.types import Delivery
from .reasons import PACKET_IDENTIFIER_NOT_FOUND

MAX_PACKET_ID = 65535
PUBLISHED, RELEASED = "published", "released"  # a QoS 2 message: PUBLISH sent / PUBREL sent


def released(packet_id: int) -> Delivery:
    """A QoS 2 message whose entry is settled and whose PUBREL is left to send (kept by a
    session record, or its entry gone): no lease stands behind it."""
    d = Delivery.outside()
    d.tag, d.qos, d.state = packet_id, 2, RELEASED
    return d


class Outbound:
    def __init__(self, receive_maximum: int = 65535, maximum_packet_size: int = 0,
                 topic_alias_maximum: int = 0) -> None:
        self.receive_maximum = receive_maximum  # the client's
        self.maximum_packet_size = maximum_packet_size  # the client's (0: none)
        self.topic_alias_maximum = topic_alias_maximum  # the client's
        self.in_flight: dict[int, Delivery] = {}  # packet id -> message, in send order
        self._next_id = 1
        self._aliases: OrderedDict[str, int] = OrderedDict()  # topic -> alias, least recently used first

    # -- sending -------------------------------------------------------------------------

    def can_send(self, qos: int) -> bool:
        """Whether a message of ``qos`` may be sent now (the client's receive maximum)."""
        return qos == 0 or len(self.in_flight) < self.receive_maximum

    def fits(self, packet_size: int) -> bool:
        """Whether a PUBLISH of ``packet_size`` bytes may be sent to the client."""
        return not self.maximum_packet_size or packet_size <= self.maximum_packet_size

    def send(self, qos: int, d: Delivery, packet_id: int = 0) -> int:
        """The delivery ``d`` goes out with ``qos``: its packet id (0 for QoS 0, which is
        not kept), in ``d.tag``. ``packet_id``: the one it had before a restart, if still
        free."""
        if qos == 0:
            return 0
        in_flight = self.in_flight
        if len(in_flight) >= min(self.receive_maximum, MAX_PACKET_ID):
            raise RuntimeError("no room in flight: ask can_send first")
        if not packet_id or packet_id in in_flight:
            packet_id = self._next_id
            while packet_id in in_flight:
                packet_id = packet_id % MAX_PACKET_ID + 1
            self._next_id = packet_id % MAX_PACKET_ID + 1
        d.tag, d.qos, d.state = packet_id, qos, PUBLISHED
        in_flight[packet_id] = d
        return packet_id

    def alias(self, topic: str) -> tuple[str, int | None]:
        """The (topic name, topic alias) to put in the PUBLISH: the alias alone (empty
        name) when the client knows it, else the name with a new alias, else no alias."""
        if not self.topic_alias_maximum:
            return topic, None
        known = self._aliases.get(topic)
        if known is not None:
            self._aliases.move_to_end(topic)
            return "", known
        if len(self._aliases) < self.topic_alias_maximum:
            new = len(self._aliases) + 1
        else:
            _, new = self._aliases.popitem(last=False)  # the least recently used one's
        self._aliases[topic] = new
        return topic, new

    # -- acknowledgements ----------------------------------------------------------------

    def puback(self, packet_id: int) -> Delivery | None:
        """The client's PUBACK: the message it acknowledges (None: no QoS 1 message has
        that id; ignored)."""
        d = self.in_flight.get(packet_id)
        if d is None or d.qos != 1:
            return None
        del self.in_flight[packet_id]
        return d

    def pubrec(self, packet_id: int, reason_code: int = 0) -> tuple[int, Delivery | None]:
        """The client's PUBREC: (the reason code of the PUBREL to send, the message if its
        flow ended: the client refused it with a reason code >= 0x80). Otherwise the
        message is RELEASED: its PUBREL goes out, its PUBCOMP is awaited."""
        d = self.in_flight.get(packet_id)
        if d is None or d.qos != 2:
            return PACKET_IDENTIFIER_NOT_FOUND, None
        if reason_code >= 0x80:
            del self.in_flight[packet_id]
            return 0, d
        d.state = RELEASED
        return 0, None

    def pubcomp(self, packet_id: int) -> Delivery | None:
        """The client's PUBCOMP: the message whose flow it ends (None if no PUBREL was
        waiting for it; ignored)."""
        d = self.in_flight.get(packet_id)
        if d is None or d.state != RELEASED:
            return None
        del self.in_flight[packet_id]
        return d

    # -- reconnecting --------------------------------------------------------------------

    def shrink(self) -> None:
        """The connection is gone: the in-flight table, which a dict keeps at its largest
        size, is made anew at the size of what is left (an offline session holds it)."""
        self.in_flight = {pid: d for pid, d in self.in_flight.items()}  # (dict() would keep a larger table)

    def resend(self) -> list[Delivery]:
        """What to send again on a new connection of the same session, in the order it was
        first sent: PUBLISH (DUP) for state PUBLISHED, PUBREL for RELEASED. Topic aliases
        do not outlive a connection."""
        self._aliases.clear()
        return list(self.in_flight.values())
