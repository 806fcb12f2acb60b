"""A queue's terms (``queue.py``): its entries, how a lease is named and settled, what
comes of an entry that leaves, the limits and the journal a queue is given."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(slots=True)
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
    """Names one lease: the entry and the delivery it was leased for."""

    seq: int
    delivery: int


def receipt(entry: Entry) -> Receipt:
    """The receipt of the lease ``take`` just made of ``entry``."""
    return Receipt(entry.seq, entry.deliveries)


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


@dataclass(slots=True)
class Lease:
    owner: Any
    delivery: int  # the entry's delivery count when leased: the receipt names it
    deadline_ms: int = 0  # 0: until settled or released


RESTORED = "restored"  # the owner of leases with a deadline brought back by a restart
