"""The MQTT control packets (3.1.1 and 5.0) as values.

One class per packet type. Fields that exist only in 5.0 (reason codes on acknowledgements
and DISCONNECT, ``properties``, AUTH) default to the value that 3.1.1 implies, so one class
serves both versions: encoding a packet as 3.1.1 refuses a 5.0-only field that is not at
its default (``LocalProtocolError``). Reason codes are ints (named in ``reasons``); in
CONNACK under 3.1.1, ``reason_code`` is the 3.1.1 return code (0-5), and in SUBACK the
granted QoS or 0x80.

The packets of every message (PUBLISH and its acknowledgements) are plain slots classes,
the others frozen: a frozen dataclass's ``__init__`` costs twice a plain one's, and
nothing changes a packet once the decoder (or its sender) made it.

A QoS 0 PUBLISH has ``packet_id`` 0 (it carries none on the wire); every other packet with
a packet identifier has one between 1 and 65535.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .properties import NO_PROPERTIES, Properties
from .wire import MQTT_5


@dataclass(frozen=True, slots=True)
class Will:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Connect:
    client_id: str
    protocol_level: int = MQTT_5  # 3 (MQTT 3.1, "MQIsdp"), 4 (3.1.1) or 5
    clean_start: bool = True  # "Clean Session" in 3.1.1
    keep_alive: int = 0
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class ConnAck:
    session_present: bool = False
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, init=False)
class Publish:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int = 0
    properties: Properties = NO_PROPERTIES

    # Written out, not generated: mypyc compiles this one; a dataclass's generated
    # ``__init__`` runs interpreted (one per message).
    def __init__(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False, dup: bool = False,
                 packet_id: int = 0, properties: Properties = NO_PROPERTIES) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.dup = dup
        self.packet_id = packet_id
        self.properties = properties


@dataclass(slots=True, init=False)
class PubAck:
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES

    def __init__(self, packet_id: int, reason_code: int = 0, properties: Properties = NO_PROPERTIES) -> None:
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = properties


@dataclass(slots=True)
class PubRec:
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class PubRel:
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True)
class PubComp:
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


# retain handling (5.0 section 3.8.3.1)
SEND_RETAINED, SEND_RETAINED_IF_NEW, SEND_NO_RETAINED = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Subscription:
    """One topic filter of a SUBSCRIBE with its options (all but ``qos`` are 5.0 only)."""

    topic_filter: str
    qos: int = 0  # the maximum QoS
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = SEND_RETAINED


@dataclass(frozen=True, slots=True)
class Subscribe:
    packet_id: int
    subscriptions: tuple[Subscription, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class SubAck:
    packet_id: int
    reason_codes: tuple[int, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    packet_id: int
    topic_filters: tuple[str, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class UnsubAck:
    packet_id: int
    reason_codes: tuple[int, ...] = ()  # one per filter in 5.0; none in 3.1.1
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class PingReq:
    pass


@dataclass(frozen=True, slots=True)
class PingResp:
    pass


@dataclass(frozen=True, slots=True)
class Disconnect:
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Auth:
    """MQTT 5.0 only."""

    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


Packet = Union[
    Connect, ConnAck, Publish, PubAck, PubRec, PubRel, PubComp, Subscribe, SubAck,
    Unsubscribe, UnsubAck, PingReq, PingResp, Disconnect, Auth,
]  # fmt: skip
