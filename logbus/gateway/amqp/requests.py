"""What the connection state machine (connection.py) asks of its shell, and the shell's
answers. ``Connection.next_request()`` hands out a request below or a channel's input
(``ChannelInput``: the decoder's own event, or a run of ``Publish`` or ``Ack`` of one
read on one channel); the shell carries it out. ``Authenticate`` and ``OpenVHost`` are
questions: the answer (``Authenticated`` / ``AuthFailed``, ``VHostOpened`` /
``VHostRefused``) is an input of the handshake's table (handshake.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .events import Ack, MethodReceived, Nack, Publish, Reject

# -- requests: what the shell carries out ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendBytes:
    """Write these bytes, in order with everything else this connection sends."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Authenticate:
    """Check the credentials; answer ``authenticated`` or ``auth_failed``."""

    mechanism: str
    user: str
    password: str


@dataclass(frozen=True, slots=True)
class OpenVHost:
    """Open vhost ``name`` for ``user``; answer ``vhost_opened`` or ``vhost_refused``."""

    name: str
    user: str


@dataclass(frozen=True, slots=True)
class OpenChannel:
    """Channel ``number`` was opened: make its Channel."""

    number: int


@dataclass(frozen=True, slots=True)
class CloseChannel:
    """Channel ``number`` ended: cancel its consumers, requeue what it holds."""

    number: int


@dataclass(frozen=True, slots=True)
class ReleaseAll:
    """The connection is ending: close every channel, delete its exclusive queues."""


@dataclass(frozen=True, slots=True)
class ScheduleHeartbeat:
    """Call ``heartbeat_due`` every ``interval / 2`` seconds until the connection is closed."""

    interval: int


@dataclass(frozen=True, slots=True)
class SetReading:
    """Read from the socket again (True), or stop reading (False: a resource alarm)."""

    on: bool


@dataclass(frozen=True, slots=True)
class CloseTransport:
    """Close the socket once what was sent is written: now (``grace`` 0), or after
    ``grace`` seconds unless asked again sooner (waiting for the client's Close-Ok)."""

    reason: str
    grace: float = 0.0


Request = (SendBytes | Authenticate | OpenVHost | OpenChannel | CloseChannel | ReleaseAll | ScheduleHeartbeat
           | SetReading | CloseTransport)
ChannelInput = Publish | Ack | Nack | Reject | MethodReceived | list[Publish] | list[Ack]


# -- answers: the shell's results, inputs of the table -----------------------------------------


class AuthFailure(enum.Enum):
    REFUSED = "refused"  # unknown user, wrong password, or a user without one
    LOOPBACK_ONLY = "loopback_only"  # a loopback_users user connecting from elsewhere


class VHostFailure(enum.Enum):
    NOT_FOUND = "not_found"
    ACCESS_REFUSED = "access_refused"  # the user has no permissions in it


@dataclass(frozen=True, slots=True)
class Authenticated:
    user: str


@dataclass(frozen=True, slots=True)
class AuthFailed:
    reason: AuthFailure


@dataclass(frozen=True, slots=True)
class VHostOpened:
    name: str


@dataclass(frozen=True, slots=True)
class VHostRefused:
    reason: VHostFailure
