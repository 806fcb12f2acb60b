"""Dead-lettering's message rewrite: RabbitMQ's ``x-death`` header.

A message leaving a queue for the dead-letter exchange keeps its body and properties;
its AMQP headers (kept raw in ``Envelope.amqp_headers``) gain or update ``x-death``, an
array of tables, newest first, one per (queue, reason):

    {count, reason, queue, time, exchange, routing-keys}

plus ``x-first-death-reason`` / ``-queue`` / ``-exchange`` on the first death. The
per-message ``expiration`` is removed (kept as the death's ``original-expiration``), so
the dead-lettered copy does not expire again for the same reason, as in RabbitMQ.
"""

from __future__ import annotations

import datetime
from typing import Any

from pamqp import decode, encode

from ....core.message import Envelope, Message


def amqp_headers(envelope: Envelope) -> dict[str, Any]:
    if not envelope.amqp_headers:
        return {}
    _, table = decode.field_table(envelope.amqp_headers)
    return dict(table)


def dead_letter_message(message: Message, queue: str, reason: str, now_ms: int, exchange: str,
                        routing_key: str | None = None) -> Message:
    """The copy of ``message`` to publish to the dead-letter ``exchange``."""
    env = Envelope()
    env.CopyFrom(message.envelope)
    headers = amqp_headers(env)
    deaths = list(headers.get("x-death") or [])
    when = datetime.datetime.fromtimestamp(now_ms // 1000, datetime.timezone.utc)
    for i, d in enumerate(deaths):
        if isinstance(d, dict) and d.get("queue") == queue and d.get("reason") == reason:
            d = dict(d, count=int(d.get("count", 0)) + 1, time=when)
            del deaths[i]
            deaths.insert(0, d)
            break
    else:
        death: dict[str, Any] = {"count": 1, "reason": reason, "queue": queue, "time": when,
                                 "exchange": env.exchange, "routing-keys": [env.routing_key]}
        if env.expiration:
            death["original-expiration"] = env.expiration
        deaths.insert(0, death)
    if "x-first-death-reason" not in headers:
        headers["x-first-death-reason"] = reason
        headers["x-first-death-queue"] = queue
        headers["x-first-death-exchange"] = env.exchange
    headers["x-death"] = deaths
    env.amqp_headers = encode.field_table(headers)
    env.expiration = ""
    env.exchange = exchange
    if routing_key is not None:
        env.routing_key = routing_key
    return Message(message.key if routing_key is None else routing_key.encode(), message.value,
                   None, list(message.headers), env)
