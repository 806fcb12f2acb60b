"""Retry policies: how long a message waits before it is offered again, and how many
deliveries it gets before it is dead-lettered.

A queue consumer that gives a message back (a nack, a pop receipt left to lapse) has
it *scheduled*: invisible until ``delay_ms(deliveries)`` from now, then ready again
(``core/queues``). The delay grows with the number of deliveries so far:

- ``levels``: a fixed list, one delay per retry, the last one repeated. RocketMQ's
  levels are the default for pop groups: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m
  10m 20m 30m 1h 2h.
- ``exponential``: ``initial_ms * multiplier ** (deliveries - 1)``, capped at
  ``max_delay_ms``.
- ``immediate`` (AMQP's default): no delay; the message goes back to its place.

``max_deliveries``: a message given back after that many deliveries goes to the
dead-letter target instead (None: retried for ever). Pop groups default to 16, as
RocketMQ's ``maxReconsumeTimes``.
"""

from __future__ import annotations

from dataclasses import dataclass

ROCKETMQ_LEVELS_MS: tuple[int, ...] = tuple(
    s * 1000 for s in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
)
POP_MAX_DELIVERIES = 16
MAX_DELAY_MS = 40 * 24 * 3600 * 1000  # the longest any message is scheduled for (40 days)


class InvalidRetryPolicy(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    levels_ms: tuple[int, ...] = ()  # fixed delays, one per retry (the last repeats)
    initial_ms: int = 0  # exponential: the first delay ...
    multiplier: float = 2.0  # ... times this per further retry ...
    max_delay_ms: int = 0  # ... at most this (0: MAX_DELAY_MS)
    max_deliveries: int | None = None

    def __post_init__(self) -> None:
        if any(not 0 <= d <= MAX_DELAY_MS for d in self.levels_ms):
            raise InvalidRetryPolicy(f"a retry delay must be within 0..{MAX_DELAY_MS} ms")
        if not 0 <= self.initial_ms <= MAX_DELAY_MS or not 0 <= self.max_delay_ms <= MAX_DELAY_MS:
            raise InvalidRetryPolicy(f"a retry delay must be within 0..{MAX_DELAY_MS} ms")
        if self.levels_ms and self.initial_ms:
            raise InvalidRetryPolicy("a retry policy has levels or an exponential backoff, not both")
        if not 1.0 <= self.multiplier <= 100.0:
            raise InvalidRetryPolicy("a backoff multiplier must be within 1..100")
        if self.max_deliveries is not None and self.max_deliveries < 1:
            raise InvalidRetryPolicy("max deliveries must be at least 1")

    @property
    def immediate(self) -> bool:
        """No backoff at all: a message given back is ready again at once."""
        return not self.levels_ms and not self.initial_ms

    def delay_ms(self, deliveries: int) -> int:
        """The wait before the next delivery of a message delivered ``deliveries`` times."""
        retry = max(deliveries, 1) - 1
        if self.levels_ms:
            return self.levels_ms[min(retry, len(self.levels_ms) - 1)]
        if not self.initial_ms:
            return 0
        cap = self.max_delay_ms or MAX_DELAY_MS
        delay = self.initial_ms
        for _ in range(retry):  # bounded: stops at the cap
            delay = int(delay * self.multiplier)
            if delay >= cap:
                return cap
        return min(delay, cap)

    def exhausted(self, deliveries: int) -> bool:
        """Given back after ``deliveries`` deliveries: dead-letter rather than retry."""
        return self.max_deliveries is not None and deliveries >= self.max_deliveries


IMMEDIATE = RetryPolicy()
POP_DEFAULT = RetryPolicy(levels_ms=ROCKETMQ_LEVELS_MS, max_deliveries=POP_MAX_DELIVERIES)


def parse_backoff(text: str) -> RetryPolicy:
    """A backoff as an operator writes it: ``"1s 5s 10s 1m"`` (levels; units ms, s, m, h),
    ``"exponential:1s:2:10m"`` (initial, multiplier, cap) or ``"immediate"``."""
    text = text.strip()
    if text in ("", "immediate"):
        return IMMEDIATE
    if text.startswith("exponential:"):
        parts = text.split(":")[1:]
        if not 1 <= len(parts) <= 3:
            raise InvalidRetryPolicy(f"exponential backoff is exponential:INITIAL[:MULTIPLIER[:MAX]], not {text!r}")
        initial = parse_duration_ms(parts[0])
        try:
            multiplier = float(parts[1]) if len(parts) > 1 else 2.0
        except ValueError:
            raise InvalidRetryPolicy(f"backoff multiplier {parts[1]!r} is not a number") from None
        cap = parse_duration_ms(parts[2]) if len(parts) > 2 else 0
        if initial == 0:
            raise InvalidRetryPolicy("an exponential backoff starts above 0")
        return RetryPolicy(initial_ms=initial, multiplier=multiplier, max_delay_ms=cap)
    return RetryPolicy(levels_ms=tuple(parse_duration_ms(p) for p in text.replace(",", " ").split()))


_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``"250ms"``, ``"5s"``, ``"2m"``, ``"1h"``, ``"3d"`` or a bare number of ms."""
    t = text.strip()
    for unit in ("ms", "s", "m", "h", "d"):
        if t.endswith(unit) and t[: -len(unit)].isdigit():
            return int(t[: -len(unit)]) * _UNITS[unit]
    if t.isdigit():
        return int(t)
    raise InvalidRetryPolicy(f"{text!r} is not a duration (e.g. 500ms, 5s, 2m, 1h)")


def pop_retry_policy(backoff: str, max_deliveries: int) -> RetryPolicy:
    """A pop group's policy from the broker's settings."""
    p = parse_backoff(backoff)
    return RetryPolicy(p.levels_ms, p.initial_ms, p.multiplier, p.max_delay_ms, max_deliveries)
