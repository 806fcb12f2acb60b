"""The client's PUBLISHes, from packet to answer: the client-to-server half of a session's
QoS flows, owned by the session machine (machine.py). Pure.

A PUBLISH is checked by ``inbound.Inbound`` (topic aliases, receive maximum, QoS 2
duplicates), turned into a message (``mapping``) and put in the read's batch, published
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

from ...core.types import Message
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


class Pending:
    """A PUBLISH from the client on its way: its answer is ``code`` once known."""

    __slots__ = ("packet", "message", "code", "unrouted")

    def __init__(self, packet: Publish, message: Message) -> None:
        self.packet = packet
        self.message = message
        self.code: int | None = None
        self.unrouted = False


class Publishing:
    """One connection's publishes in flight and their answers, written to ``out``."""

    __slots__ = ("inbound", "version", "out", "answers", "batch", "envelopes")

    def __init__(self, inbound: Inbound, version: int, out: list[bytes]) -> None:
        self.inbound = inbound
        self.version = version
        self.out = out
        self.answers: deque[Pending] = deque()  # QoS 1/2 PUBLISHes not answered yet, in order
        self.batch: list[Pending] = []  # PUBLISHes of this read, published together
        self.envelopes: EnvelopeCache = {}  # shared by this connection's PUBLISHes without properties

    def take(self, p: Publish, message: Message) -> None:
        """A PUBLISH accepted: into the batch, and awaiting its answer if QoS 1/2."""
        pending = Pending(p, message)
        if p.qos:
            self.answers.append(pending)
        self.batch.append(pending)

    def take_batch(self) -> list[Pending]:
        batch, self.batch = self.batch, []
        return batch

    def refused(self, p: Publish, code: int) -> None:
        """A PUBLISH refused with ``code`` (5.0: its answer says so, in its turn)."""
        if p.qos:
            pending = Pending(p, Message())
            pending.code = code
            self.answers.append(pending)

    def routed(self, batch: list[Pending], unrouted: list[int], done: int, failed: bool) -> None:
        """The batch was appended: ``unrouted`` reached no queue; items from ``done`` on
        were not published (``failed``)."""
        v5 = self.version == MQTT_5
        for i in unrouted:
            pending = batch[i]
            pending.unrouted = True
            if pending.code == 0 and v5:
                pending.code = NO_MATCHING_SUBSCRIBERS
        if failed:
            for pending in batch[done:]:
                pending.code = UNSPECIFIED_ERROR

    def durable(self, batch: list[Pending], first: int, last: int, failed: bool) -> list[Pending]:
        """Items ``first`` to ``last`` are durable (or ``failed``); those retained with
        QoS 1/2, to keep now."""
        retained = []
        v5 = self.version == MQTT_5
        for pending in batch[first:last + 1]:
            if failed:
                pending.code = UNSPECIFIED_ERROR
            else:
                p = pending.packet
                if p.retain and p.qos:
                    retained.append(pending)
                pending.code = NO_MATCHING_SUBSCRIBERS if pending.unrouted and v5 else 0
        return retained

    def all_failed(self, batch: list[Pending]) -> None:
        for pending in batch:
            pending.code = UNSPECIFIED_ERROR

    def flush(self, connected: bool) -> int:
        """Write the answers that are ready, in the order the PUBLISHes came; SAVE and
        CLOSE bits for the machine."""
        answers = self.answers
        asks = 0
        version = self.version
        while answers and (code := answers[0].code) is not None:
            p = answers.popleft().packet
            if not connected:
                continue
            if code >= 0x80 and version < MQTT_5:
                return asks | CLOSE
            self.inbound.answered(p)
            if p.qos == 1:
                self.out.append(_PUBACK.pack(0x40, 2, p.packet_id) if not code
                                else encode(PubAck(p.packet_id, code), version))
            else:
                if code >= 0x80:  # refused: the id is free again at once
                    self.inbound.release(p.packet_id)
                self.out.append(encode(PubRec(p.packet_id, code), version))
                asks |= SAVE
        return asks

    def pubrel(self, packet_id: int) -> None:
        """The client's PUBREL: PUBCOMP (0x92 in 5.0 if the id was not waiting)."""
        code = self.inbound.release(packet_id)
        self.out.append(encode(PubComp(packet_id, code if self.version == MQTT_5 else 0), self.version))

    def duplicate(self, p: Publish) -> None:
        """A QoS 2 PUBLISH sent again before its PUBREL: PUBREC again, nothing published."""
        self.out.append(encode(PubRec(p.packet_id), self.version))
