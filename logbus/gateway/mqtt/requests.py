"""What the MQTT session machine (machine.py) asks of its shell (protocol.py).

``Machine.next_request()`` hands these out one at a time; the shell carries each out
against the room and the socket. Three are questions, answered by a method of the
machine before the next call: ``Login`` (``attached`` / ``login_refused``),
``AddSubscriptions`` (``subscribed``), ``RemoveSubscriptions`` (``unsubscribed``) and
``MatchRetained`` (``retained_found``). The bytes to send are not requests: the machine
appends them to its ``out`` list, which the shell writes when the read ends.

The answers of a ``PublishBatch`` come later, from the log: ``routed`` once the batch is
appended, ``durable`` as its parts are flushed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .connect import Accepted
from .packets import Subscription, Will

if TYPE_CHECKING:
    from ...core.types import Message
    from .publishing import Inflight
    from .session import Session
    from .subscriptions import Filtered


class Access(Protocol):
    """The shell's access checks for a logged-in connection (its user's permissions)."""

    def may_publish(self, routing_key: str) -> bool: ...

    def may_subscribe(self, topic_filter: str) -> bool: ...


# -- questions ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Login:
    """Log the CONNECT's user in and attach its session; answer ``attached(session,
    present, user, access)`` or ``login_refused(code, reason)``."""

    accepted: Accepted


@dataclass(frozen=True, slots=True)
class AddSubscriptions:
    """Subscribe the session to each of ``subscriptions`` (the room binds its queue);
    answer ``subscribed`` with, for each, whether its filter was subscribed already."""

    session: Session
    subscriptions: tuple[Subscription, ...]
    subscription_id: int | None
    filtered: Filtered | None


@dataclass(frozen=True, slots=True)
class RemoveSubscriptions:
    """Unsubscribe the session from each filter; answer ``unsubscribed`` with, for each,
    whether there was such a subscription."""

    session: Session
    topic_filters: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MatchRetained:
    """The retained messages each filter matches; answer ``retained_found`` with one list
    of ``RetainedRecord`` per filter."""

    topic_filters: tuple[str, ...]


# -- commands -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PublishBatch:
    """Publish these messages of one read together (the room's ``publish_many``); tell
    the machine ``routed`` with its result, then ``durable`` as they become durable (or
    ``batch_refused`` if it raised)."""

    items: list[Inflight]


@dataclass(frozen=True, slots=True)
class Retain:
    """Keep (an empty payload: clear) the retained message of the message's topic."""

    message: Message
    qos: int


@dataclass(frozen=True, slots=True)
class Settle:
    """Done with a message sent to the client: settle its queue lease (``token``).
    ``durably``: write the queue's change to the state store now (a PUBREC's)."""

    token: Any
    durably: bool = False


@dataclass(frozen=True, slots=True)
class SaveSession:
    """The session's record changed (QoS 2 state, expiry): store it if it is kept."""

    session: Session


@dataclass(frozen=True, slots=True)
class Consume:
    """The session is attached: start handing its queues to this connection."""

    session: Session


@dataclass(frozen=True, slots=True)
class Dispatch:
    """The client may take more: hand out what the session's queues hold."""

    session: Session


@dataclass(frozen=True, slots=True)
class ArmKeepAlive:
    """The CONNECT timeout is over: close after ``seconds`` without a packet (0: never),
    calling ``keep_alive_expired`` then."""

    seconds: float


@dataclass(frozen=True, slots=True)
class SetReading:
    """Read the socket again (``on``) or stop reading it: a resource alarm (alarms.py)."""

    on: bool


@dataclass(frozen=True, slots=True)
class QuickAck:
    """This read's answers wait for the disk: acknowledge its bytes at the TCP level now
    (decision 0017)."""


@dataclass(frozen=True, slots=True)
class Detach:
    """The connection is over for the session: the room detaches it, publishing ``will``
    (after ``will_delay`` seconds if the session is kept)."""

    session: Session
    will: Will | None
    will_delay: int


@dataclass(frozen=True, slots=True)
class Close:
    """Close the socket once ``out`` is written."""

    reason: str


QUICK_ACK = QuickAck()

Request = (Login | AddSubscriptions | RemoveSubscriptions | MatchRetained | PublishBatch | Retain | Settle
           | SaveSession | Consume | Dispatch | ArmKeepAlive | SetReading | QuickAck | Detach | Close)
