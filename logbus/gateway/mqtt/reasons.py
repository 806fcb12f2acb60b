"""MQTT reason codes and the codec's exceptions.

MQTT 5.0 (section 2.4) gives every acknowledgement and DISCONNECT a one-byte Reason Code;
values below 0x80 report success, 0x80 and above failure. The same value can have several
names depending on the packet (0x00 is Success, Normal disconnection and Granted QoS 0), so
the codes are plain ints here, named once, with the set each packet may carry.

MQTT 3.1.1 has no reason codes: a peer that breaks the protocol has its connection closed,
and only CONNACK (return codes 0-5) and SUBACK (granted QoS or 0x80) carry a result.

A peer's mistake found in the bytes is an ``MqttError`` carrying the reason code the 5.0
specification asks for (for a 3.1.1 peer the caller closes the connection; an unsupported
protocol level also carries the 3.1.1 CONNACK return code 1). Our own mistake, such as
asking to encode a property in a 3.1.1 packet, is a ``LocalProtocolError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .packets import Packet

# MQTT 5.0 reason codes (section 2.4, table 2-6)
SUCCESS = NORMAL_DISCONNECTION = GRANTED_QOS_0 = 0x00
GRANTED_QOS_1 = 0x01
GRANTED_QOS_2 = 0x02
DISCONNECT_WITH_WILL_MESSAGE = 0x04
NO_MATCHING_SUBSCRIBERS = 0x10
NO_SUBSCRIPTION_EXISTED = 0x11
CONTINUE_AUTHENTICATION = 0x18
RE_AUTHENTICATE = 0x19
UNSPECIFIED_ERROR = 0x80
MALFORMED_PACKET = 0x81
PROTOCOL_ERROR = 0x82
IMPLEMENTATION_SPECIFIC_ERROR = 0x83
UNSUPPORTED_PROTOCOL_VERSION = 0x84
CLIENT_IDENTIFIER_NOT_VALID = 0x85
BAD_USER_NAME_OR_PASSWORD = 0x86
NOT_AUTHORIZED = 0x87
SERVER_UNAVAILABLE = 0x88
SERVER_BUSY = 0x89
BANNED = 0x8A
SERVER_SHUTTING_DOWN = 0x8B
BAD_AUTHENTICATION_METHOD = 0x8C
KEEP_ALIVE_TIMEOUT = 0x8D
SESSION_TAKEN_OVER = 0x8E
TOPIC_FILTER_INVALID = 0x8F
TOPIC_NAME_INVALID = 0x90
PACKET_IDENTIFIER_IN_USE = 0x91
PACKET_IDENTIFIER_NOT_FOUND = 0x92
RECEIVE_MAXIMUM_EXCEEDED = 0x93
TOPIC_ALIAS_INVALID = 0x94
PACKET_TOO_LARGE = 0x95
MESSAGE_RATE_TOO_HIGH = 0x96
QUOTA_EXCEEDED = 0x97
ADMINISTRATIVE_ACTION = 0x98
PAYLOAD_FORMAT_INVALID = 0x99
RETAIN_NOT_SUPPORTED = 0x9A
QOS_NOT_SUPPORTED = 0x9B
USE_ANOTHER_SERVER = 0x9C
SERVER_MOVED = 0x9D
SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
CONNECTION_RATE_EXCEEDED = 0x9F
MAXIMUM_CONNECT_TIME = 0xA0
SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2

REASON_NAMES: dict[int, str] = {
    0x00: "Success", 0x01: "Granted QoS 1", 0x02: "Granted QoS 2",
    0x04: "Disconnect with Will Message", 0x10: "No matching subscribers",
    0x11: "No subscription existed", 0x18: "Continue authentication", 0x19: "Re-authenticate",
    0x80: "Unspecified error", 0x81: "Malformed Packet", 0x82: "Protocol Error",
    0x83: "Implementation specific error", 0x84: "Unsupported Protocol Version",
    0x85: "Client Identifier not valid", 0x86: "Bad User Name or Password",
    0x87: "Not authorized", 0x88: "Server unavailable", 0x89: "Server busy", 0x8A: "Banned",
    0x8B: "Server shutting down", 0x8C: "Bad authentication method",
    0x8D: "Keep Alive timeout", 0x8E: "Session taken over", 0x8F: "Topic Filter invalid",
    0x90: "Topic Name invalid", 0x91: "Packet Identifier in use",
    0x92: "Packet Identifier not found", 0x93: "Receive Maximum exceeded",
    0x94: "Topic Alias invalid", 0x95: "Packet too large", 0x96: "Message rate too high",
    0x97: "Quota exceeded", 0x98: "Administrative action", 0x99: "Payload format invalid",
    0x9A: "Retain not supported", 0x9B: "QoS not supported", 0x9C: "Use another server",
    0x9D: "Server moved", 0x9E: "Shared Subscriptions not supported",
    0x9F: "Connection rate exceeded", 0xA0: "Maximum connect time",
    0xA1: "Subscription Identifiers not supported",
    0xA2: "Wildcard Subscriptions not supported",
}  # fmt: skip

# which reason codes each MQTT 5.0 packet may carry (the tables of sections 3.2.2.2 to 3.15.2.1)
CONNACK_REASONS = frozenset({
    0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C, 0x90, 0x95,
    0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F,
})  # fmt: skip
PUBACK_REASONS = PUBREC_REASONS = frozenset({0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99})
PUBREL_REASONS = PUBCOMP_REASONS = frozenset({0x00, 0x92})
SUBACK_REASONS = frozenset({0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2})
UNSUBACK_REASONS = frozenset({0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91})
DISCONNECT_REASONS = frozenset({
    0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90, 0x93, 0x94,
    0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1, 0xA2,
})  # fmt: skip
AUTH_REASONS = frozenset({0x00, 0x18, 0x19})

# MQTT 3.1.1 CONNACK return codes (section 3.2.2.3) and SUBACK return codes (3.9.3)
CONNECTION_ACCEPTED = 0
REFUSED_UNACCEPTABLE_PROTOCOL_VERSION = 1
REFUSED_IDENTIFIER_REJECTED = 2
REFUSED_SERVER_UNAVAILABLE = 3
REFUSED_BAD_USER_NAME_OR_PASSWORD = 4
REFUSED_NOT_AUTHORIZED = 5
CONNACK_RETURN_CODES = frozenset(range(6))
SUBACK_RETURN_CODES = frozenset({0x00, 0x01, 0x02, 0x80})


def reason_name(code: int) -> str:
    return REASON_NAMES.get(code, f"reason 0x{code:02X}")


class MqttError(Exception):
    """The peer broke the protocol: close the connection, after a DISCONNECT (or, in
    answer to CONNECT, a CONNACK) carrying ``reason_code`` if the peer speaks 5.0.

    ``packets`` holds the packets that ``Decoder.feed`` decoded whole before the bad one,
    in order: a caller acts on them before closing.
    """

    def __init__(self, reason_code: int, text: str) -> None:
        super().__init__(f"{reason_name(reason_code)} (0x{reason_code:02X}): {text}")
        self.reason_code = reason_code
        self.text = text
        self.packets: list[Packet] = []

    @property
    def return_code(self) -> int | None:
        """The MQTT 3.1.1 CONNACK return code to answer with, if there is one (only an
        unsupported protocol level has one; every other error just closes)."""
        return REFUSED_UNACCEPTABLE_PROTOCOL_VERSION if self.reason_code == 0x84 else None


def malformed(text: str) -> MqttError:
    return MqttError(MALFORMED_PACKET, text)


def protocol_error(text: str) -> MqttError:
    return MqttError(PROTOCOL_ERROR, text)


class UnsupportedProtocolVersion(MqttError):
    """A CONNECT whose protocol name and level this codec does not speak; ``level`` says
    which was asked (answer a 5 with a 5.0 CONNACK 0x84, anything else with a 3.1.1
    CONNACK return code 1, then close)."""

    def __init__(self, level: int, name: str) -> None:
        super().__init__(UNSUPPORTED_PROTOCOL_VERSION, f"protocol {name!r} level {level}")
        self.level = level


class LocalProtocolError(ValueError):
    """We asked the codec for something the protocol cannot say (a value out of range, a
    5.0 field in a 3.1.1 packet): a bug on our side, never the peer's."""
