"""Per-object rates from counters the broker keeps anyway (a queue's routed, delivered and
acked, a connection's messages and bytes, a topic's appends), at no cost per message:

- ``ReadRates``, for the JSON API (RabbitMQ's ``message_stats.<counter>_details.rate``):
  differenced between reads. Each read of an object keeps its counters (at most one
  snapshot a second, those of the last ``WINDOW`` seconds); its rates are the difference
  to the oldest kept over the time between. Nothing runs when nobody reads; the first read
  of an object answers 0.0.
- ``ObjectRates``, for the console's object pages: while a page is open (each view calls
  ``watch``), its object's counters are sampled once a second into a ring of the last
  ``KEEP`` seconds for its chart; sampling stops ``IDLE`` seconds after the last view.

    reads = ReadRates(reactor.seconds)
    reads.rates(("queue", "/", "orders"), {"routed": 120, "acked": 100})   # {"routed": 40.0, ...}
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from twisted.internet.task import LoopingCall

WINDOW = 10.0  # seconds a read-differenced rate spans at most
FORGET = 600.0  # an object not read for this long is forgotten (the next read starts again)
KEEP = 300  # seconds of a watched object's history
IDLE = 120.0  # seconds after the last view before a watched object is no longer sampled


class ReadRates:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.seen: dict[Hashable, deque[tuple[float, dict[str, int]]]] = {}
        self._swept = 0.0

    def rates(self, key: Hashable, counters: Mapping[str, int]) -> dict[str, float]:
        """Each counter's rate per second over up to the last WINDOW seconds of reads."""
        now = self.clock()
        if now - self._swept > FORGET:
            self._sweep(now)
        ring = self.seen.get(key)
        if ring is None:
            ring = self.seen[key] = deque()
        if not ring or now - ring[-1][0] >= 1.0:
            ring.append((now, dict(counters)))
        while len(ring) > 2 and now - ring[1][0] >= WINDOW:
            ring.popleft()
        t0, first = ring[0]
        span = now - t0
        if span <= 0:
            return {k: 0.0 for k in counters}
        return {k: round(max(0, v - first.get(k, v)) / span, 2) for k, v in counters.items()}

    def _sweep(self, now: float) -> None:
        self._swept = now
        for key in [k for k, ring in self.seen.items() if now - ring[-1][0] > FORGET]:
            del self.seen[key]


def with_details(stats: Mapping[str, Any], rates: Mapping[str, float]) -> dict[str, Any]:
    """RabbitMQ's shape: each counter beside ``<counter>_details: {"rate": r}``."""
    out = dict(stats)
    for k, r in rates.items():
        out[f"{k}_details"] = {"rate": r}
    return out


class Watched:
    """One object's samples: (time, counters), oldest first."""

    def __init__(self, read: Callable[[], Mapping[str, int] | None]) -> None:
        self.read = read  # its counters now; None when it is gone
        self.samples: deque[tuple[float, dict[str, int]]] = deque(maxlen=KEEP + 1)
        self.last_view = 0.0

    def series(self) -> dict[str, list[float]]:
        """Per-second rates: {"t": [epoch s], counter: [...], ...}."""
        pairs = list(self.samples)
        out: dict[str, list[float]] = {"t": []}
        for (t0, a), (t1, b) in zip(pairs, pairs[1:]):
            span = max(t1 - t0, 1e-3)
            out["t"].append(round(t1, 3))
            for k, v in b.items():
                out.setdefault(k, []).append(round(max(0, v - a.get(k, v)) / span, 1))
        return out

    def average(self, seconds: float) -> dict[str, float] | None:
        """Each counter's rate over the last ``seconds`` (fewer when sampled for less;
        None before two samples)."""
        if len(self.samples) < 2:
            return None
        t1, last = self.samples[-1]
        t0, first = self.samples[0]
        for t, counters in self.samples:
            if t1 - t <= seconds:
                t0, first = t, counters
                break
        span = max(t1 - t0, 1e-3)
        return {k: round(max(0, v - first.get(k, v)) / span, 1) for k, v in last.items()}


class ObjectRates:
    """The objects whose pages are open, sampled once a second (one timer for all)."""

    def __init__(self) -> None:
        self.watched: dict[Hashable, Watched] = {}
        self._loop: LoopingCall | None = None
        self._clock: Callable[[], float] | None = None

    def watch(self, reactor: Any, key: Hashable, read: Callable[[], Mapping[str, int] | None]) -> Watched:
        """``key``'s page is open: sample it (from now, if it was not), and return it."""
        self._clock = reactor.seconds
        now = reactor.seconds()
        w = self.watched.get(key)
        if w is None:
            w = self.watched[key] = Watched(read)
            self._take(w, now)
        w.read = read
        w.last_view = now
        if self._loop is None or not self._loop.running:
            self._loop = LoopingCall(self._sample)
            self._loop.clock = reactor
            self._loop.start(1.0, now=False)
        return w

    def _take(self, w: Watched, now: float) -> bool:
        counters = w.read()
        if counters is None:
            return False
        w.samples.append((now, dict(counters)))
        return True

    def _sample(self) -> None:
        assert self._clock is not None and self._loop is not None
        now = self._clock()
        for key, w in list(self.watched.items()):
            if now - w.last_view > IDLE or not self._take(w, now):
                del self.watched[key]
        if not self.watched:
            self._loop.stop()

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
