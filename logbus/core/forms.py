"""What a protocol adds to the neutral model's messages: its ``Forms``.

The vhost model (``core/vhost.py``) and the queue service handle messages of every
protocol alike. Two things about a message are in a protocol's own terms, and the
broker asks its ``Forms`` for them:

- ``headers(message)``: the typed headers a protocol keeps in the envelope (AMQP's
  field table), as a mapping, for routing a message read back from the log (a delayed
  publish, due) and for what selectors see (``filters.properties``); None: only the
  record's text headers;
- ``delay(message)``: the delay in ms its publisher asked of a delayed exchange (AMQP's
  ``x-delay`` header), read again from a message in the log when start-up routes it
  again (``queues/redo.py``); 0: none;
- ``dead_letter(message, queue, reason, now_ms, exchange, routing_key)``: the copy a
  queue's dead-letter policy publishes to an exchange, with the headers it routes by
  and its deaths so far, newest first, as (queue, reason) (a copy that would come back
  to a queue it died in with no rejection since is not delivered there: a cycle).

``NEUTRAL`` knows no protocol: its copy (``deadletters.neutral_dead_letter``) keeps the
message and records where it died in ``Envelope.dead_letter``. The AMQP gateway's forms (``gateway/amqp/model/forms.py``) add
RabbitMQ's ``x-death`` header; the server hands them to the broker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..filters.properties import record_properties
from .deadletters import DeadLetterCopy, neutral_dead_letter
from .message import Message


def no_headers(message: Message) -> Mapping[str, Any] | None:
    return None


def no_delay(message: Message) -> int:
    return 0


@dataclass(frozen=True, slots=True)
class Forms:
    headers: Callable[[Message], Mapping[str, Any] | None] = no_headers
    dead_letter: Callable[[Message, str, str, int, str, str | None], DeadLetterCopy] = neutral_dead_letter
    delay: Callable[[Message], int] = no_delay
    # what a selector sees of a message in a log topic, built once per message
    properties: Callable[[Message, str], Mapping[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        headers = None if self.headers is no_headers else self.headers

        def properties(message: Message, topic: str) -> Mapping[str, Any]:
            return record_properties(message, topic, headers)

        object.__setattr__(self, "properties", properties)


NEUTRAL = Forms()
