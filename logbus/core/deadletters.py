"""The dead-letter policy of the vhost model, in no protocol's terms: the copy a queue's
dead letter becomes, and the cycle rule.

- ``DeadLetterCopy``: the copy to publish to the queue's dead-letter exchange, the headers
  it is routed by, and its deaths so far, newest first, as (queue, reason). The broker's
  ``Forms`` make it (core/forms.py): ``neutral_dead_letter`` here records where it died in
  ``Envelope.dead_letter``; the AMQP gateway's adds ``x-death``.
- ``dead_letter_cycles``: the queues such a copy must not reach (RabbitMQ's rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .envelope_pb2 import Envelope
from .message import Message
from .queues.queue import REJECTED

Deaths = tuple[tuple[str, str], ...]  # (queue, reason), newest first


@dataclass(frozen=True, slots=True)
class DeadLetterCopy:
    message: Message
    headers: Mapping[str, Any] | None  # what the copy is routed by
    deaths: Deaths


def neutral_dead_letter(message: Message, queue: str, reason: str, now_ms: int, exchange: str,
                        routing_key: str | None) -> DeadLetterCopy:
    env = Envelope()
    env.CopyFrom(message.envelope)
    env.dead_letter.reason = reason
    env.dead_letter.queue = queue
    env.dead_letter.time_ms = now_ms
    env.expiration = ""  # it does not expire again for the same reason
    env.exchange = exchange
    if routing_key is not None:
        env.routing_key = routing_key
    copy = Message(message.key if routing_key is None else routing_key.encode(), message.value, None,
                   list(message.headers), env)
    return DeadLetterCopy(copy, None, ((queue, reason),))


def dead_letter_cycles(queues: frozenset[str], deaths: Deaths) -> frozenset[str]:
    """The queues a dead-lettered message must not reach, as RabbitMQ decides: those it
    died in before with no rejection since (a cycle of expiries or overflows would go
    round forever). ``deaths``: (queue, reason), newest first, this death included."""
    cycles = set()
    for queue in queues:
        for q, reason in deaths:
            if reason == REJECTED:
                break  # a rejection (a consumer's decision) on the way: not a cycle
            if q == queue:
                cycles.add(queue)
                break
    return frozenset(cycles)
