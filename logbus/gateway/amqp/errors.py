"""AMQP 0-9-1 reply codes and the codec's exceptions.

A peer's mistake is an ``AMQPProtocolError``: ``BadProtocolHeader`` before any frame
(answer with our header and close the socket, as the spec says), then ``AMQPError`` with a
reply code, hard (``AMQPConnectionError``: Connection.Close) or soft
(``AMQPChannelError``: Channel.Close on that channel). Our own mistakes, such as asking
to encode a shortstr of 300 bytes, are ``LocalProtocolError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pamqp import base, commands, frame

from ...core.errors import Refused

if TYPE_CHECKING:
    from .events import Event

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

# reply codes (spec constants); soft ones close the channel, hard ones the connection
CONTENT_TOO_LARGE, NO_ROUTE, NO_CONSUMERS, CONNECTION_FORCED = 311, 312, 313, 320
INVALID_PATH, ACCESS_REFUSED, NOT_FOUND, RESOURCE_LOCKED, PRECONDITION_FAILED = 402, 403, 404, 405, 406
FRAME_ERROR, SYNTAX_ERROR, COMMAND_INVALID, CHANNEL_ERROR, UNEXPECTED_FRAME = 501, 502, 503, 504, 505
RESOURCE_ERROR, NOT_ALLOWED, NOT_IMPLEMENTED, INTERNAL_ERROR = 506, 530, 540, 541
REPLY_NAMES = {
    311: "CONTENT_TOO_LARGE", 312: "NO_ROUTE", 313: "NO_CONSUMERS", 320: "CONNECTION_FORCED",
    402: "INVALID_PATH", 403: "ACCESS_REFUSED", 404: "NOT_FOUND", 405: "RESOURCE_LOCKED",
    406: "PRECONDITION_FAILED", 501: "FRAME_ERROR", 502: "SYNTAX_ERROR", 503: "COMMAND_INVALID",
    504: "CHANNEL_ERROR", 505: "UNEXPECTED_FRAME", 506: "RESOURCE_ERROR", 530: "NOT_ALLOWED",
    540: "NOT_IMPLEMENTED", 541: "INTERNAL_ERROR",
}  # fmt: skip


class AMQPProtocolError(Exception):
    """The peer broke the protocol."""


class BadProtocolHeader(AMQPProtocolError):
    """Not an AMQP 0-9-1 protocol header: write ``reply`` and close the socket."""

    reply = PROTOCOL_HEADER

    def __init__(self, received: bytes) -> None:
        super().__init__(f"bad protocol header {received!r}, expected {PROTOCOL_HEADER!r}")
        self.received = received


class AMQPError(AMQPProtocolError):
    """An error with an AMQP reply code. ``hard``: a connection exception (send
    Connection.Close, close the connection); else a channel exception (Channel.Close
    on ``channel``). ``class_id``/``method_id`` name the method at fault, or 0."""

    hard: ClassVar[bool]

    def __init__(
        self, reply_code: int, explanation: str, *, channel: int = 0, class_id: int = 0, method_id: int = 0
    ) -> None:
        text = f"{REPLY_NAMES.get(reply_code, 'INTERNAL_ERROR')} - {explanation}"
        self.reply_text = text.encode()[:255].decode(errors="ignore")  # a shortstr
        super().__init__(self.reply_text)
        self.reply_code = reply_code
        self.explanation = explanation
        self.channel = channel
        self.class_id = class_id
        self.method_id = method_id

    def close_method(self) -> base.Frame:
        close = commands.Connection.Close if self.hard else commands.Channel.Close
        return close(self.reply_code, self.reply_text, self.class_id, self.method_id)

    def close_frame(self) -> bytes:
        return frame.marshal(self.close_method(), 0 if self.hard else self.channel)


class AMQPConnectionError(AMQPError):
    hard = True

    def __init__(
        self, reply_code: int, explanation: str, *, channel: int = 0, class_id: int = 0, method_id: int = 0
    ) -> None:
        super().__init__(reply_code, explanation, channel=channel, class_id=class_id, method_id=method_id)
        self.events: list[Event] = []  # what the same feed() decoded before the error


class AMQPChannelError(AMQPError):
    hard = False


class MalformedFrame(Exception):
    """Internal to the codec: a payload that does not decode (becomes FRAME_ERROR)."""


class LocalProtocolError(ValueError):
    """The broker asked the codec for something AMQP cannot say (a shortstr over 255
    bytes, a content header larger than frame_max, ...): a bug on our side."""


# the broker's refusals (core/errors.py) as RabbitMQ answers them
REPLY_CODE_FOR: dict[str, int] = {
    "not_found": NOT_FOUND,
    "access_refused": ACCESS_REFUSED,
    "precondition_failed": PRECONDITION_FAILED,
    "resource_locked": RESOURCE_LOCKED,
    "unsupported": COMMAND_INVALID,
}


# reply codes the spec makes connection exceptions, among those a refusal maps to
HARD_REPLY_CODES = frozenset({CONNECTION_FORCED, INVALID_PATH, FRAME_ERROR, SYNTAX_ERROR, COMMAND_INVALID, CHANNEL_ERROR,
                              UNEXPECTED_FRAME, RESOURCE_ERROR, NOT_ALLOWED, NOT_IMPLEMENTED, INTERNAL_ERROR})


def refused(e: Refused, *, channel: int, class_id: int = 0, method_id: int = 0) -> AMQPError:
    """The exception for a refusal of the broker's model: a channel exception (it closes
    the channel), or a connection exception where the spec makes its reply code one
    (503 for an unknown exchange type, as RabbitMQ answers)."""
    code = REPLY_CODE_FOR.get(e.code, INTERNAL_ERROR)
    kind = AMQPConnectionError if code in HARD_REPLY_CODES else AMQPChannelError
    return kind(code, str(e), channel=channel, class_id=class_id, method_id=method_id)
