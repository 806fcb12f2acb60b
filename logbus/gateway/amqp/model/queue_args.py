"""Queue arguments (``x-...`` in queue.declare), checked as RabbitMQ checks them.

``parse_queue_arguments`` turns a declare's arguments into ``QueueArgs``, and
``QueueArgs.settings()`` into the queue service's neutral ``QueueSettings``: limits,
retry policy, dead-letter target, auto-expiry, single active consumer. A value of the
wrong type or out of range is PRECONDITION_FAILED with RabbitMQ's wording; unknown
``x-`` arguments are kept and ignored, as RabbitMQ does.

Beside RabbitMQ's arguments, ``x-retry-backoff`` (a string: ``"1s 5s 30s"``, levels;
``"exponential:1s:2:5m"``; ``"immediate"``) makes a nack with requeue, or a lapsed
invisible time, wait before the message is offered again (``logbus.retry``). Without
it a requeue is immediate, as in RabbitMQ. ``x-delivery-limit`` N dead-letters a
message given back after N + 1 deliveries, as RabbitMQ's quorum queues do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ....retry.policy import IMMEDIATE, InvalidRetryPolicy, RetryPolicy, parse_backoff
from ....core.types import OVERFLOW_MODES, QueueLimits
from ....core.types import DeadLetterTarget, QueueSettings, QueueState
from ....core.errors import PreconditionFailed

MAX_PRIORITY = 255
QUEUE_TYPES = ("classic", "quorum")


@dataclass(frozen=True, slots=True)
class QueueArgs:
    limits: QueueLimits = QueueLimits()
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    expires_ms: int | None = None  # x-expires: delete after this long unused
    single_active_consumer: bool = False
    queue_type: str = "classic"
    delivery_limit: int | None = None  # x-delivery-limit
    retry: RetryPolicy = IMMEDIATE  # x-retry-backoff, without the delivery limit

    def settings(self) -> QueueSettings:
        retry = self.retry
        if self.delivery_limit is not None:
            retry = RetryPolicy(retry.levels_ms, retry.initial_ms, retry.multiplier, retry.max_delay_ms,
                                max_deliveries=self.delivery_limit + 1)
        dead_letter = (None if self.dead_letter_exchange is None
                       else DeadLetterTarget(self.dead_letter_exchange, self.dead_letter_routing_key))
        return QueueSettings(self.limits, retry, dead_letter, self.expires_ms, self.single_active_consumer)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def parse_queue_arguments(queue: str, vhost: str, arguments: Mapping[str, Any] | None) -> QueueArgs:
    args = dict(arguments or {})

    def invalid(key: str, why: str) -> PreconditionFailed:
        return PreconditionFailed(f"invalid arg '{key}' for queue '{queue}' in vhost '{vhost}': {why}")

    def integer(key: str, minimum: int, maximum: int | None = None) -> int | None:
        if key not in args:
            return None
        value = args[key]
        if not _is_int(value):
            raise invalid(key, f"{{unacceptable_type,{type(value).__name__}}}")
        if value < minimum:
            raise invalid(key, f"{{value_negative,{value}}}" if minimum == 0 else f"{{value_zero,{value}}}")
        if maximum is not None and value > maximum:
            raise invalid(key, f"{{value_too_large,{value},{maximum}}}")
        return int(value)

    def string(key: str) -> str | None:
        if key not in args:
            return None
        value = _text(args[key])
        if value is None:
            raise invalid(key, f"{{unacceptable_type,{type(args[key]).__name__}}}")
        return value

    overflow = string("x-overflow") or "drop-head"
    if overflow not in OVERFLOW_MODES:
        raise invalid("x-overflow", f"{{unacceptable_value,<<\"{overflow}\">>}}")
    dlx = string("x-dead-letter-exchange")
    dlrk = string("x-dead-letter-routing-key")
    if dlrk is not None and dlx is None:
        raise PreconditionFailed("Key x-dead-letter-routing-key should be specified together with "
                                 "x-dead-letter-exchange")
    queue_type = string("x-queue-type") or "classic"
    if queue_type not in QUEUE_TYPES:
        raise invalid("x-queue-type", f"{{unacceptable_value,<<\"{queue_type}\">>}}")
    sac = args.get("x-single-active-consumer", False)
    if not isinstance(sac, bool):
        raise invalid("x-single-active-consumer", f"{{unacceptable_type,{type(sac).__name__}}}")
    limits = QueueLimits(
        max_length=integer("x-max-length", 0),
        max_length_bytes=integer("x-max-length-bytes", 0),
        overflow=overflow,
        max_priority=integer("x-max-priority", 0, MAX_PRIORITY) or 0,
        message_ttl_ms=integer("x-message-ttl", 0),
    )
    retry = IMMEDIATE
    backoff = string("x-retry-backoff")
    if backoff is not None:
        try:
            retry = parse_backoff(backoff)
        except InvalidRetryPolicy as e:
            raise invalid("x-retry-backoff", str(e)) from None
    return QueueArgs(limits, dlx, dlrk, integer("x-expires", 1), sac, queue_type,
                     integer("x-delivery-limit", 0), retry)


def check_equivalent(vhost: str) -> Callable[[QueueState, dict[str, Any]], None]:
    """A queue.declare's check against the queue as it is (``VHost.declare_queue``'s
    ``equivalent``): every ``x-`` argument must be as declared first, RabbitMQ's wording."""

    def equivalent(qs: QueueState, arguments: dict[str, Any]) -> None:
        where = f"for queue '{qs.name}' in vhost '{vhost}'"
        declared = qs.declared or {}
        for key in sorted(set(arguments) | set(declared)):
            if key.startswith("x-") and arguments.get(key) != declared.get(key):
                raise PreconditionFailed(f"inequivalent arg '{key}' {where}: received {arguments.get(key)!r} "
                                         f"but current is {declared.get(key)!r}")

    return equivalent
