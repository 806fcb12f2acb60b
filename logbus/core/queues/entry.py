"""A queue's terms (``queue.py``): its entries, the delivery (a lease) and how it is
named from outside, what comes of an entry that leaves, the limits and the journal a
queue is given."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..message import Message


@dataclass(slots=True, init=False)
class Entry:
    seq: int
    topic: str
    partition: int
    offset: int
    size: int
    priority: int = 0
    expires_ms: int = 0  # epoch ms after which it is dead; 0: never
    deliveries: int = 0  # times handed to a consumer; > 0 means "redelivered" next time
    visible_ms: int = 0  # staged until this epoch ms (0: not staged)

    # Written out, not generated: mypyc compiles this one, a dataclass's generated
    # ``__init__`` runs interpreted (one per queue entry; decision 0055).
    def __init__(self, seq: int, topic: str, partition: int, offset: int, size: int, priority: int = 0,
                 expires_ms: int = 0, deliveries: int = 0, visible_ms: int = 0) -> None:
        self.seq = seq
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.size = size
        self.priority = priority
        self.expires_ms = expires_ms
        self.deliveries = deliveries
        self.visible_ms = visible_ms

    @property
    def redelivered(self) -> bool:
        return self.deliveries > 0


# why an entry left without an ack (the dead-letter reason)
EXPIRED = "expired"
MAXLEN = "maxlen"
REJECTED = "rejected"
DELIVERY_LIMIT = "delivery_limit"

GONE = -1  # the offset of an entry whose record is gone (``orphan``): no record is there

DROP_HEAD = "drop-head"
REJECT_PUBLISH = "reject-publish"
REJECT_PUBLISH_DLX = "reject-publish-dlx"
OVERFLOW_MODES = (DROP_HEAD, REJECT_PUBLISH, REJECT_PUBLISH_DLX)
# the new message is dropped and its publisher not told (Mosquitto's max_queued_messages);
# a session queue's mode, not one a client declares
DROP_NEW = "drop-new"


class Outcome(enum.Enum):
    """How a consumer settles a leased message."""

    ACK = "ack"  # done: settled
    REQUEUE = "requeue"  # back to ready at once, in its old place
    RETRY = "retry"  # again later, after the queue's backoff
    DEAD_LETTER = "dead-letter"  # removed, to the dead-letter target (reason "rejected")


@dataclass(frozen=True, slots=True)
class Receipt:
    """Names one lease from outside the process (a pop receipt handle): the entry's seq
    and the delivery count it was leased for. ``Queue.lease`` finds the ``Delivery``."""

    seq: int
    delivery: int


@dataclass(frozen=True, slots=True)
class Removed:
    """An entry that left the queue: acked (``reason`` "") or to be dead-lettered."""

    entry: Entry
    reason: str


@dataclass(frozen=True, slots=True)
class Scheduled:
    """An entry given back with a backoff: out of the queue until ``due_ms``."""

    entry: Entry
    due_ms: int


@dataclass(slots=True)
class Returned:
    """What giving leases back did: entries ready again, scheduled, or removed."""

    requeued: int = 0
    scheduled: list[Scheduled] = field(default_factory=list)
    removed: list[Removed] = field(default_factory=list)

    def add(self, result: Removed | Scheduled | None) -> None:
        if result is None:
            self.requeued += 1
        elif isinstance(result, Scheduled):
            self.scheduled.append(result)
        else:
            self.removed.append(result)


@dataclass(frozen=True, slots=True)
class QueueLimits:
    max_length: int | None = None  # ready messages
    max_length_bytes: int | None = None  # ready bytes
    overflow: str = DROP_HEAD
    max_priority: int = 0  # 0: priorities ignored
    message_ttl_ms: int | None = None


class QueueJournal(Protocol):
    """Told of every change that must survive a restart."""

    def added(self, entry: Entry) -> None: ...
    def delivered(self, entry: Entry, deadline_ms: int, in_order: bool = True) -> None: ...
    def unleased(self, entry: Entry) -> None: ...
    def settled(self, seq: int) -> None: ...


class NullJournal:
    def added(self, entry: Entry) -> None:
        pass

    def delivered(self, entry: Entry, deadline_ms: int, in_order: bool = True) -> None:
        pass

    def unleased(self, entry: Entry) -> None:
        pass

    def settled(self, seq: int) -> None:
        pass


class Delivery:
    """One message handed to a consumer, from its lease to its settlement: the lease
    itself. ``Queue.take`` makes it and keeps it in ``Queue.leases[seq]``; the queue
    service fills in the message and hands it to the consumer, who keeps it and gives it
    back to settle it. A queue settles only the delivery its ``leases`` holds (by
    identity): one whose lease lapsed, was released or dropped is stale, so it never
    settles the entry once that is leased again.

    ``tag``, ``qos`` and ``state`` are the gateway's (an AMQP delivery tag; an MQTT
    packet id, QoS and QoS 2 state): a gateway keeps what it delivered as these objects,
    no wrapper of its own. A delivery not from a queue (an MQTT retained message in
    flight) has ``queue`` "" and the entry ``NO_ENTRY``."""

    __slots__ = ("queue", "entry", "delivery", "owner", "deadline_ms", "message", "remaining", "consumer",
                 "tag", "qos", "state")

    def __init__(self, queue: str, entry: Entry, delivery: int, owner: Any, deadline_ms: int = 0,
                 message: Message | None = None) -> None:
        self.queue = queue  # the queue's name
        self.entry = entry
        self.delivery = delivery  # the entry's delivery count when leased (``entry.deliveries`` moves on)
        self.owner = owner  # the lease's owner: a channel, a session, a pop group member
        self.deadline_ms = deadline_ms  # 0: until settled or released
        self.message = message  # set by the queue service as it hands it out; a gateway drops it once sent
        self.remaining = 0  # ready messages left after it (AMQP basic.get-ok message_count)
        self.consumer: Any = None  # the push consumer it was handed to (None: taken, as basic.get)
        self.tag = 0  # the gateway's
        self.qos = 0  # the gateway's
        self.state = ""  # the gateway's

    @classmethod
    def outside(cls, owner: Any = None) -> Delivery:
        """A delivery not from a queue (queue "", entry ``NO_ENTRY``): what a gateway sends
        that no lease stands behind (an MQTT retained message), kept as the others are."""
        return cls("", NO_ENTRY, 0, owner)

    def __repr__(self) -> str:
        return f"Delivery({self.queue!r}, seq={self.entry.seq}, delivery={self.delivery}, tag={self.tag})"


NO_ENTRY = Entry(-1, "", 0, -1, 0)  # the entry of a delivery not from a queue (never in one)


RESTORED = "restored"  # the owner of leases with a deadline brought back by a restart
