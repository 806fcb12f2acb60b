"""AMQP's words for the neutral model's terms (``core/vhost.py``), RabbitMQ's checks and
wording kept:

- the delayed-message exchange type: ``x-delayed-message`` with ``x-delayed-type`` T is
  an exchange routing as T with ``delayed`` set; a publish's ``x-delay`` header is its
  delay (``x_delay``);
- a binding's filter: ``x-filter-tag`` / ``x-filter-sql`` arguments are the binding's
  ``FilterSpec`` (docs/filters.md), taken out of the arguments it matches headers by;
- a headers exchange's binding: ``x-match`` (``all``, ``any``, ``all-with-x``,
  ``any-with-x``) and the arguments that count (``x-`` ones only with ``-with-x``) are
  its ``HeaderMatch``;
- queue arguments: ``queue_args.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ....core.errors import PreconditionFailed
from ....core.types import Arguments, HeaderMatch, Message
from ....filters import FilterError
from ....filters.message_filter import SQL_ARG, TAG_ARG, FilterSpec

DELAYED_MESSAGE: Final = "x-delayed-message"  # RabbitMQ's delayed-message exchange type
DELAYED_TYPE: Final = "x-delayed-type"  # ... and the type it routes as
ROUTING_TYPES: Final = ("direct", "fanout", "topic", "headers")


def exchange_kind(kind: str, arguments: Mapping[str, Any] | None) -> tuple[str, bool]:
    """(the type it routes as, delayed) for an exchange.declare's type and arguments."""
    if kind != DELAYED_MESSAGE:
        return kind, False
    delayed_type = (arguments or {}).get(DELAYED_TYPE)
    if isinstance(delayed_type, bytes):
        delayed_type = delayed_type.decode("utf-8", "replace")
    if delayed_type not in ROUTING_TYPES:
        raise PreconditionFailed(f"Invalid argument, '{DELAYED_TYPE}' must be an existing exchange type")
    return str(delayed_type), True


def binding_filter(arguments: Mapping[str, Any] | None, to_queue: bool) -> tuple[dict[str, Any], FilterSpec | None]:
    """(the arguments without the filter's, the filter) of a queue.bind / exchange.bind."""
    args = dict(arguments or {})
    if TAG_ARG not in args and SQL_ARG not in args:
        return args, None
    if not to_queue:
        raise PreconditionFailed(f"{TAG_ARG} and {SQL_ARG} apply to bindings to queues, not to exchanges")
    tag, sql = args.pop(TAG_ARG, None), args.pop(SQL_ARG, None)
    try:
        return args, FilterSpec.parse(tag, sql)
    except FilterError as e:
        raise PreconditionFailed(f"invalid binding filter: {e}") from None


def x_delay(headers: Mapping[str, Any]) -> int:
    """RabbitMQ's ``x-delay`` header in ms (0: none; a negative delay is none)."""
    value = headers.get("x-delay")
    if isinstance(value, bool):
        return 0
    if isinstance(value, (bytes, str)):
        text = value.decode() if isinstance(value, bytes) else value
        value = int(text) if text.lstrip("-").isdigit() else 0
    return value if isinstance(value, int) and value > 0 else 0


def message_delay(message: Message) -> int:
    """A publish's ``x-delay`` (``Pipeline.publish``'s ``delay_of``): from the typed
    headers the gateway decoded."""
    headers = message.routing_headers
    return x_delay(headers) if headers else 0


X_MATCH: Final = "x-match"
X_MATCH_MODES: Final = ("all", "any", "all-with-x", "any-with-x")


def header_match(arguments: Arguments) -> HeaderMatch:
    """A headers exchange binding's ``HeaderMatch``, from its (frozen) arguments, with
    RabbitMQ's checks of ``x-match``."""
    mode = next((v for k, v in arguments if k == X_MATCH), None)
    if mode is None:
        mode = "all"
    elif not isinstance(mode, str):
        raise PreconditionFailed(f"Invalid x-match field type {type(mode).__name__} "
                                 f"(value {mode!r}); expected longstr")
    elif mode not in X_MATCH_MODES:
        raise PreconditionFailed(f"Invalid x-match field value '{mode}'; "
                                 "expected all, any, all-with-x, or any-with-x")
    with_x = mode.endswith("-with-x")
    counted = tuple((k, v) for k, v in arguments if k != X_MATCH and (with_x or not k.startswith("x-")))
    return HeaderMatch(mode.startswith("all"), counted)
