"""The Pop service (``broker.pop_service``, the ``ports.Pop`` port): pop groups' data
path for the HTTP gateway: receive (now, or waiting for a first message), ack, nack, and
change how long a received message stays invisible (core/queues/pop.py has the model).

    popped = pop.receive("workers", "jobs", "w1", 10, 30_000)   # [Popped], invisible 30 s
    pop.ack("workers", "jobs", popped[0].handle)

The pop groups exist once the broker has started (``open``); ack, nack and
change_invisible are theirs, bound at ``open`` (no call of this object's in between).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred

if TYPE_CHECKING:
    from .log import LogManager
    from .queues.pop import Popped, PopGroups


def _not_started(*args: object) -> None:
    raise RuntimeError("broker is not started")


class PopService:
    """``ports.Pop``: see the module's docstring."""

    ack: Callable[[str, str, Any], None]
    nack: Callable[[str, str, Any], None]
    change_invisible: Callable[[str, str, Any, int], None]

    def __init__(self, call_later: Callable[..., Any]) -> None:
        self._call_later = call_later  # the reactor's: a waiting receive's deadline
        self._log: LogManager | None = None
        self._pop: PopGroups | None = None
        self.ack = self.nack = self.change_invisible = _not_started

    def open(self, log: LogManager, pop: PopGroups) -> None:
        """The broker has started: its log and pop groups."""
        self._log, self._pop = log, pop
        self.ack, self.nack, self.change_invisible = pop.ack, pop.nack, pop.change_invisible

    def close(self) -> None:
        self._log = self._pop = None
        self.ack = self.nack = self.change_invisible = _not_started

    def _started(self, topic: str) -> PopGroups:
        if self._log is None or self._pop is None:
            raise RuntimeError("broker is not started")
        self._log.topic(topic)  # UnknownTopic
        return self._pop

    def receive(self, group: str, topic: str, member: str, n: int, invisible_ms: int,
                filter_tag: Any = None, filter_sql: Any = None) -> list[Popped]:
        """Up to ``n`` messages of ``topic`` for ``group``, invisible to the group's other
        members for ``invisible_ms`` unless acked or changed. The group is created on
        first use and gets what is appended from then on (what its filter takes:
        ``filter_tag``, ``filter_sql``, docs/filters.md)."""
        return self._started(topic).receive(group, topic, member, n, invisible_ms, filter_tag, filter_sql)

    def receive_wait(self, group: str, topic: str, member: str, n: int, invisible_ms: int, wait_ms: int,
                     filter_tag: Any = None, filter_sql: Any = None) -> Deferred[list[Popped]]:
        """``receive``, waiting up to ``wait_ms`` for a first message (long polling)."""
        return self._started(topic).receive_wait(group, topic, member, n, invisible_ms, wait_ms, self._call_later,
                                                 filter_tag, filter_sql)
