"""The client's PUBLISHes, from packet to answer: the client-to-server half of a session's
QoS flows, owned by the session machine (machine.py). Pure.

A PUBLISH is checked by ``inbound.Inbound`` (topic aliases, receive maximum, QoS 2
duplicates), turned into a message (``mapping``): an ``Inflight``, the one object that
carries it from the read to its answer (the message the pipeline publishes, with its
packet id, QoS and answer state on it), put in the read's batch, published
together at the end of the read (or before the next packet that is not a PUBLISH) by the
shell (``requests.PublishBatch``: the room's ``publish_many``, one route per topic,
appends in runs). Each QoS 1/2 one is answered (PUBACK, PUBREC) once durable in the log,
in the order they came (MQTT section 4.6), whatever order their partitions' writes end
in: ``answers`` holds them in arrival order, and ``flush`` writes the answers whose code
is known from the front. PUBREL from the client ends a QoS 2 hand-over.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...core.types import Envelope, Message
from .encoder import encode
from .inbound import Inbound
from .mapping import EnvelopeCache
from .packets import PubAck, PubComp, Publish, PubRec
from .reasons import NO_MATCHING_SUBSCRIBERS, UNSPECIFIED_ERROR
from .wire import MQTT_5

_PUBACK = struct.Struct("!BBH")  # a PUBACK with reason 0: fixed header, length 2, packet id

# what ``Publishing.flush`` asks of the machine, as bits
SAVE = 1  # a PUBREC went out: the session's QoS 2 state changed
CLOSE = 2  # a 3.1.1 client's publish was refused: it cannot be told, the connection ends


@dataclass(slots=True, eq=False, init=False)
class Inflight(Message):
    """A PUBLISH from the client on its way, as the message it publishes (the pipeline's
    row): its answer is ``code`` once known."""

    packet_id: int = 0
    qos: int = 0
    retain: bool = False
    code: int | None = None
    unrouted: bool = False  # reached no queue (5.0: answered 0x10, No matching subscribers)

    # Written out, not generated: compiled by mypyc (one per message).
    def __init__(self, key: bytes | None = None, value: bytes | None = None, timestamp: int | None = None,
                 headers: list[tuple[str, bytes | None]] | None = None, envelope: Envelope | None = None,
                 origin_properties: bytes | None = None, encoded: dict[str, Any] | None = None,
                 record_headers: list[tuple[str, bytes | None]] | None = None,
                 selector_properties: tuple[str, Any] | None = None,
                 routing_headers: Mapping[str, Any] | None = None, packet_id: int = 0, qos: int = 0,
                 retain: bool = False, code: int | None = None, unrouted: bool = False) -> None:
        Message.__init__(self, key, value, timestamp, headers, envelope, origin_properties, encoded,
                         record_headers, selector_properties, routing_headers)
        self.packet_id = packet_id
        self.qos = qos
        self.retain = retain
        self.code = code
        self.unrouted = unrouted


class Publishing:
    """One connection's publishes in flight and their answers, written to ``out``."""

    __slots__ = ("inbound", "version", "out", "answers", "batch", "envelopes")

    def __init__(self, inbound: Inbound, version: int, out: list[bytes]) -> None:
        self.inbound = inbound
        self.version = version
        self.out = out
        self.answers: deque[Inflight] = deque()  # QoS 1/2 PUBLISHes not answered yet, in order
        self.batch: list[Inflight] = []  # PUBLISHes of this read, published together
        self.envelopes: EnvelopeCache = {}  # shared by this connection's PUBLISHes without properties

    def take(self, p: Publish, m: Inflight) -> None:
        """A PUBLISH accepted (its message ``m``): into the batch, and awaiting its answer
        if QoS 1/2."""
        m.packet_id = p.packet_id
        m.retain = p.retain
        if p.qos:
            m.qos = p.qos
            self.answers.append(m)
        self.batch.append(m)

    def take_batch(self) -> list[Inflight]:
        batch, self.batch = self.batch, []
        return batch

    def refused(self, p: Publish, code: int) -> None:
        """A PUBLISH refused with ``code`` (5.0: its answer says so, in its turn)."""
        if p.qos:
            self.answers.append(Inflight(packet_id=p.packet_id, qos=p.qos, code=code))

    def routed(self, batch: list[Inflight], unrouted: list[int], done: int, failed: bool) -> None:
        """The batch was appended: ``unrouted`` reached no queue; items from ``done`` on
        were not published (``failed``)."""
        v5 = self.version == MQTT_5
        for i in unrouted:
            m = batch[i]
            m.unrouted = True
            if m.code == 0 and v5:
                m.code = NO_MATCHING_SUBSCRIBERS
        if failed:
            for m in batch[done:]:
                m.code = UNSPECIFIED_ERROR

    def durable(self, batch: list[Inflight], first: int, last: int, failed: bool) -> list[Inflight]:
        """Items ``first`` to ``last`` are durable (or ``failed``); those retained with
        QoS 1/2, to keep now."""
        retained = []
        v5 = self.version == MQTT_5
        for m in batch[first:last + 1]:
            if failed:
                m.code = UNSPECIFIED_ERROR
            else:
                if m.retain and m.qos:
                    retained.append(m)
                m.code = NO_MATCHING_SUBSCRIBERS if m.unrouted and v5 else 0
        return retained

    def all_failed(self, batch: list[Inflight]) -> None:
        for m in batch:
            m.code = UNSPECIFIED_ERROR

    def flush(self, connected: bool) -> int:
        """Write the answers that are ready, in the order the PUBLISHes came; SAVE and
        CLOSE bits for the machine."""
        answers = self.answers
        asks = 0
        version = self.version
        while answers and (code := answers[0].code) is not None:
            m = answers.popleft()
            if not connected:
                continue
            if code >= 0x80 and version < MQTT_5:
                return asks | CLOSE
            packet_id = m.packet_id
            self.inbound.answered(m.qos, packet_id)
            if m.qos == 1:
                self.out.append(_PUBACK.pack(0x40, 2, packet_id) if not code
                                else encode(PubAck(packet_id, code), version))
            else:
                if code >= 0x80:  # refused: the id is free again at once
                    self.inbound.release(packet_id)
                self.out.append(encode(PubRec(packet_id, code), version))
                asks |= SAVE
        return asks

    def pubrel(self, packet_id: int) -> None:
        """The client's PUBREL: PUBCOMP (0x92 in 5.0 if the id was not waiting)."""
        code = self.inbound.release(packet_id)
        self.out.append(encode(PubComp(packet_id, code if self.version == MQTT_5 else 0), self.version))

    def duplicate(self, p: Publish) -> None:
        """A QoS 2 PUBLISH sent again before its PUBREL: PUBREC again, nothing published."""
        self.out.append(encode(PubRec(p.packet_id), self.version))
