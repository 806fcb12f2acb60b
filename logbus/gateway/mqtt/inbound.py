"""The client-to-server half of an MQTT session: topic aliases, the receive maximum and
QoS 2's exactly-once hand-over. Pure: the shell feeds it the PUBLISH and PUBREL packets
the decoder gave and carries out what it answers.

- **Topic aliases** (MQTT 5 section 3.3.2.3.4). A PUBLISH with a topic and an alias sets
  the alias; one with an empty topic uses it. An alias of 0 or above the maximum we
  announced is 0x94 Topic Alias invalid; an unknown alias with an empty topic is 0x82
  Protocol Error. Aliases live as long as the connection.
- **Receive maximum** (section 3.3.4). A QoS 1 PUBLISH is outstanding until we send its
  PUBACK, a QoS 2 one until we send its PUBCOMP; more outstanding than we announced is
  0x93 Receive Maximum exceeded. (3.1.1 has no such limit: 65,535 packet ids.)
- **QoS 2** (section 4.3.3, method B: the message is stored, and passed on, when the
  PUBLISH arrives). A QoS 2 PUBLISH whose packet id already awaits its PUBREL is the
  same message sent again: it is not published twice; the PUBREC is repeated. PUBREL
  frees the id and is answered PUBCOMP (0x92 Packet Identifier not found if the id was
  not waiting, in 5.0).

Errors are raised as ``MqttError`` with the reason code: the session answers with a
DISCONNECT carrying it (5.0) or closes (3.1.1).
"""

from __future__ import annotations

from .packets import Publish
from .properties import NO_PROPERTIES
from .topics import has_wildcard
from .reasons import (
    PACKET_IDENTIFIER_NOT_FOUND,
    PROTOCOL_ERROR,
    RECEIVE_MAXIMUM_EXCEEDED,
    TOPIC_ALIAS_INVALID,
    MqttError,
)


class Inbound:
    def __init__(self, receive_maximum: int = 65535, topic_alias_maximum: int = 0) -> None:
        self.receive_maximum = receive_maximum  # what we announced in CONNACK
        self.topic_alias_maximum = topic_alias_maximum
        self.aliases: dict[int, str] = {}
        self.outstanding: set[int] = set()  # QoS 1/2 packet ids not yet answered (PUBACK / PUBCOMP)
        self.awaiting_rel: set[int] = set()  # QoS 2 packet ids we sent PUBREC for

    def publish(self, p: Publish) -> str | None:
        """A PUBLISH accepted: its topic with the alias resolved (publish it; for QoS > 0
        answer once it is durable), or None for a QoS 2 resend (answer PUBREC again,
        publish nothing)."""
        props = p.properties
        if props is not NO_PROPERTIES:
            if props.subscription_identifiers:  # MQTT 5 section 3.3.4: the server's to send
                raise MqttError(PROTOCOL_ERROR, "a Subscription Identifier in a PUBLISH from a client")
            if props.response_topic is not None and has_wildcard(props.response_topic):
                raise MqttError(PROTOCOL_ERROR, f"response topic {props.response_topic!r} holds a wildcard")
        topic = self._topic(p)
        if p.qos == 2 and p.packet_id in self.awaiting_rel:
            return None
        if p.qos > 0:
            if p.packet_id not in self.outstanding and len(self.outstanding) >= self.receive_maximum:
                raise MqttError(RECEIVE_MAXIMUM_EXCEEDED,
                                f"more than {self.receive_maximum} QoS 1 and 2 publishes unanswered")
            self.outstanding.add(p.packet_id)
        return topic

    def answered(self, qos: int, packet_id: int) -> None:
        """We sent a PUBLISH's PUBACK (QoS 1) or PUBREC (QoS 2)."""
        if qos == 1:
            self.outstanding.discard(packet_id)
        elif qos == 2:
            self.awaiting_rel.add(packet_id)

    def release(self, packet_id: int) -> int:
        """A PUBREL: the reason code of the PUBCOMP to send: 0, and the id is free again;
        or 0x92 if the id was not waiting for a PUBREL (nothing changes)."""
        if packet_id in self.awaiting_rel:
            self.awaiting_rel.discard(packet_id)
            self.outstanding.discard(packet_id)
            return 0
        return PACKET_IDENTIFIER_NOT_FOUND

    def _topic(self, p: Publish) -> str:
        alias = p.properties.topic_alias
        if alias is None:
            return p.topic
        if not 0 < alias <= self.topic_alias_maximum:
            raise MqttError(TOPIC_ALIAS_INVALID,
                            f"topic alias {alias} is not within 1..{self.topic_alias_maximum}")
        if p.topic:
            self.aliases[alias] = p.topic
            return p.topic
        topic = self.aliases.get(alias)
        if topic is None:
            raise MqttError(PROTOCOL_ERROR, f"topic alias {alias} was never set")
        return topic
