"""The client's PUBLISHes, mixed into the connection (``protocol.MqttProtocol``): checked
(topic aliases, receive maximum and QoS 2 duplicates by ``inbound.Inbound``, write and
topic permissions, the payload format), turned into messages (``mapping``) and published
together at the end of the read (``MqttRoom.publish_many``: one route per topic, appends
in runs); each QoS 1/2 one answered (PUBACK, PUBREC) once durable in the log, in the
order they came (MQTT section 4.6). PUBREL from the client ends a QoS 2 hand-over."""

from __future__ import annotations

import logging
import struct
from collections import deque
from typing import TYPE_CHECKING, Any

from ...core.access.topic_permissions import TopicPerm
from ...core.errors import LogbusError
from ...core.message import Message
from .encoder import encode
from .inbound import DUPLICATE, Inbound
from .mapping import EXCHANGE, EnvelopeCache, message_from_publish
from .packets import PubAck, PubComp, Publish, PubRec, PubRel
from .reasons import NO_MATCHING_SUBSCRIBERS, NOT_AUTHORIZED, PAYLOAD_FORMAT_INVALID, UNSPECIFIED_ERROR
from .states import State
from .wire import MQTT_5

if TYPE_CHECKING:
    from .room import MqttRoom
    from .session import Session

log = logging.getLogger(__name__)

_PUBACK = struct.Struct("!BBH")  # a PUBACK without reason code: fixed header, packet id


class Publishing:
    # the connection's own (protocol.MqttProtocol)
    room: MqttRoom
    session: Session | None
    inbound: Inbound
    version: int
    peer: str
    state: State
    _acks: deque[Pending]
    _batch: list[Pending]
    _envelopes: EnvelopeCache
    _may_write: bool

    if TYPE_CHECKING:
        def _write(self, packet: Any, version: int | None = None) -> None: ...
        def _emit(self, data: bytes) -> None: ...
        def _close(self) -> None: ...
        def _topic_allowed(self, perm: TopicPerm, key: str) -> bool: ...

    # -- publishes from the client ---------------------------------------------------------------

    def _publish(self, p: Publish) -> None:
        session = self.session
        assert session is not None
        received = self.inbound.publish(p)
        if received.kind == DUPLICATE:
            self._write(PubRec(p.packet_id))
            return
        topic = received.topic
        message = message_from_publish(topic, p, session.client_id, self.room.clock(), self._envelopes)
        refusal = 0
        if not self._may_write or not self._topic_allowed("write", message.envelope.routing_key):
            refusal = NOT_AUTHORIZED
        elif p.properties.payload_format_indicator == 1:
            try:
                p.payload.decode("utf-8")
            except UnicodeDecodeError:
                refusal = PAYLOAD_FORMAT_INVALID
        if refusal:
            self._refused_publish(p, refusal)
            return
        if p.qos == 0 and p.retain:
            self.room.retain(message, 0)
        pending = Pending(p, message)
        if p.qos:
            self._acks.append(pending)
        self._batch.append(pending)

    def _publish_batch(self) -> None:
        """Publish the PUBLISHes of this read taken so far, together (``publish_many``:
        routed once per topic, appended in runs, each queue dispatched once)."""
        batch, self._batch = self._batch, []

        def durable(first: int, last: int, result: Any) -> None:
            failed = isinstance(result, BaseException)
            if failed:
                log.warning("MQTT %s: %d publishes failed: %s", self.peer, last - first + 1, result)
            for pending in batch[first:last + 1]:
                p = pending.packet
                if failed:
                    pending.code = UNSPECIFIED_ERROR
                else:
                    if p.retain and p.qos:
                        self.room.retain(pending.message, p.qos)
                    pending.code = NO_MATCHING_SUBSCRIBERS if pending.unrouted and self.version == MQTT_5 else 0
            self._flush_acks()

        try:
            out = self.room.publish_many([(EXCHANGE, b.message.envelope.routing_key, b.message, None)
                                          for b in batch], durable)
        except LogbusError as e:
            log.info("MQTT %s: %d publishes refused: %s", self.peer, len(batch), e)
            for pending in batch:
                pending.code = UNSPECIFIED_ERROR
            self._flush_acks()
            return
        for i in out.unrouted:
            pending = batch[i]
            pending.unrouted = True
            if pending.code == 0 and self.version == MQTT_5:
                pending.code = NO_MATCHING_SUBSCRIBERS
        if out.error is not None:
            log.info("MQTT %s: publishes refused: %s", self.peer, out.error)
            for pending in batch[out.done:]:
                pending.code = UNSPECIFIED_ERROR
        self._flush_acks()

    def _refused_publish(self, p: Publish, code: int) -> None:
        log.info("MQTT %s: publish to %r refused (0x%02X)", self.peer, p.topic, code)
        if self.version < MQTT_5:  # no way to say it but closing (as Mosquitto and RabbitMQ do)
            self._close()
            return
        if p.qos == 0:
            return
        pending = Pending(p, Message())
        pending.code = code
        self._acks.append(pending)
        self._flush_acks()

    def _flush_acks(self) -> None:
        """Send the answers of publishes that are ready, in the order they came."""
        acks = self._acks
        while acks and (code := acks[0].code) is not None:
            p = acks.popleft().packet
            if self.state is not State.CONNECTED:
                continue
            if code >= 0x80 and self.version < MQTT_5:
                self._close()
                return
            self.inbound.answered(p)
            if p.qos == 1:
                self._emit(_PUBACK.pack(0x40, 2, p.packet_id) if not code else encode(PubAck(p.packet_id, code),
                                                                                     self.version))
            else:
                if code >= 0x80:  # refused: the id is free again at once
                    self.inbound.release(p.packet_id)
                self._write(PubRec(p.packet_id, code))
                self._save_session()

    def _pubrel(self, p: PubRel) -> None:
        code = self.inbound.release(p.packet_id)
        self._write(PubComp(p.packet_id, code if self.version == MQTT_5 else 0))
        self._save_session()

    def _save_session(self) -> None:
        if self.session is not None and self.session.kept:
            self.room.save(self.session)


class Pending:
    """A PUBLISH from the client on its way: its answer is ``code`` once known."""

    __slots__ = ("packet", "message", "code", "unrouted")

    def __init__(self, packet: Publish, message: Message) -> None:
        self.packet = packet
        self.message = message
        self.code: int | None = None
        self.unrouted = False


