"""The AMQP gateway's ``Forms`` (``core/forms.py``): how the neutral model reads an AMQP
message's headers, and RabbitMQ's dead-lettering rewrite, ``x-death``.

Headers: the field table a publisher sent is kept raw in ``Envelope.amqp_headers``;
``typed_headers`` decodes it with its types (the gateway's own table decoder), for
routing a delayed message when due and for what selectors see.

Dead letters: a message leaving a queue for the dead-letter exchange keeps its body and
properties; its AMQP headers gain or update ``x-death``, an array of tables, newest
first, one per (queue, reason):

    {count, reason, queue, time, exchange, routing-keys}

plus ``x-first-death-reason`` / ``-queue`` / ``-exchange`` on the first death. The
per-message ``expiration`` is removed (kept as the death's ``original-expiration``), so
the dead-lettered copy does not expire again for the same reason, as in RabbitMQ. The
copy's deaths, for the model's cycle check, are read from ``x-death``.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from pamqp import decode, encode

from ....core.types import DeadLetterCopy, Forms
from ....core.types import Envelope, Message
from ..errors import MalformedFrame
from ..fastpath import decode_table
from .translate import x_delay


def typed_headers(message: Message) -> Mapping[str, Any] | None:
    """The message's AMQP headers with their types; None without any."""
    raw = message.envelope.amqp_headers
    if not raw:
        return None
    try:
        typed: Mapping[str, Any] = decode_table(raw, 0, len(raw))[0]
        return typed
    except MalformedFrame:  # checked when published: not expected; the text headers remain
        return None


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


def dead_letter(message: Message, queue: str, reason: str, now_ms: int, exchange: str,
                routing_key: str | None) -> DeadLetterCopy:
    copy = dead_letter_message(message, queue, reason, now_ms, exchange, routing_key)
    headers = amqp_headers(copy.envelope)
    return DeadLetterCopy(copy, headers, deaths_of(headers.get("x-death")))


def deaths_of(x_death: Any) -> tuple[tuple[str, str], ...]:
    """(queue, reason) of each death in an ``x-death`` array, newest first; an entry that
    is not a table ends the history (as a rejection would)."""
    if not isinstance(x_death, list):
        return ()
    out = []
    for d in x_death:
        if not isinstance(d, dict):
            out.append(("", "rejected"))
            break
        out.append((str(d.get("queue")), str(d.get("reason"))))
    return tuple(out)


def delay(message: Message) -> int:
    """The ``x-delay`` a message read back from the log was published with (0: none)."""
    headers = typed_headers(message)
    return x_delay(headers) if headers else 0


AMQP_FORMS = Forms(headers=typed_headers, dead_letter=dead_letter, delay=delay)
