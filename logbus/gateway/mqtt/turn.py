"""A reactor turn's MQTT publishes, made together (decision 0033).

Theory of operation. A connection's read hands its PUBLISHes (a ``PublishBatch``) to
``TurnPublishes.add`` instead of publishing them, and holds the machine's later requests
(``MqttProtocol._held``). At the end of the turn (the reactor's Tick, core/tick.py),
``publish`` makes every batch of the turn with one ``MqttRoom.publish_many``: one route
cache, one append per partition run, one dispatch of each queue, one durability callback.
A fleet of devices that each send one message now and then is then routed, appended,
synced and delivered once per turn rather than once per read.

Each connection is told of its own items only, in its own order: which of its batch
reached no queue and from which item on it was refused (``published``), a refusal of the
whole call (``publish_failed``), and, when the append is durable, which of its items are
(``durable``, with the range of the run clipped to the batch). The order of one
connection's packets holds: its requests after a batch wait for ``published``, and a
connection read twice before the end of a turn (not in one reactor turn, but in tests)
has its second batch published once the first is answered, in the same pass.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Protocol

from ...core.errors import LogbusError
from ...core.types import Message, Tick
from .publishing import Inflight


class Publisher(Protocol):
    """What a connection (``MqttProtocol``) is told of its batch."""

    def published(self, batch: list[Inflight], unrouted: list[int], done: int, error: str | None) -> None: ...

    def publish_failed(self, batch: list[Inflight], error: str) -> None: ...

    def durable(self, batch: list[Inflight], first: int, last: int, result: Any) -> None: ...




class TurnDurable:
    """Splits a turn's durability callback back per connection and batch. A class, not a
    closure: compiled by mypyc, a nested function and the environment it closes over
    refer to each other, and every turn's batches (their Inflights) would wait for the
    garbage collector (decision 0053)."""

    __slots__ = ("batches", "starts")

    def __init__(self, batches: list[tuple[Publisher, list[Inflight]]], starts: list[int]) -> None:
        self.batches = batches
        self.starts = starts  # each batch's first row in the turn's rows

    def durable(self, first: int, last: int, result: Any) -> None:
        batches, starts = self.batches, self.starts
        i = bisect_right(starts, first) - 1
        while i < len(batches) and starts[i] <= last:
            c, batch = batches[i]
            s = starts[i]
            c.durable(batch, max(first, s) - s, min(last, s + len(batch) - 1) - s, result)
            i += 1


class TurnPublishes:
    def __init__(self, room: Any, tick: Tick) -> None:
        self.room = room  # the MqttRoom: publish_many
        self._tick = tick
        self._batches: list[tuple[Publisher, list[Inflight]]] = []

    def add(self, c: Publisher, batch: list[Inflight]) -> None:
        """A read's publishes, kept for the end of the turn."""
        if not self._batches:
            self._tick.paced(self.publish)
        self._batches.append((c, batch))

    def publish(self) -> None:
        """Publish every batch kept this turn, as one ``publish_many``; each connection is
        told of its own items."""
        batches, self._batches = self._batches, []
        if not batches:
            return
        rows: list[Message] = []
        starts: list[int] = []
        for _, batch in batches:
            starts.append(len(rows))
            rows.extend(batch)
        try:
            out = self.room.publish_many(rows, TurnDurable(batches, starts).durable)
        except LogbusError as e:
            for c, batch in batches:
                c.publish_failed(batch, str(e))
            return
        error = None if out.error is None else str(out.error)
        unrouted = out.unrouted
        u = 0
        for (c, batch), s in zip(batches, starts):
            end = s + len(batch)
            mine = []
            while u < len(unrouted) and unrouted[u] < end:
                mine.append(unrouted[u] - s)
                u += 1
            c.published(batch, mine, min(max(out.done - s, 0), len(batch)), error if out.done < end else None)
