"""Whether to linger after a read, and how long: a rule and a per-connection hill climber
(sans-I/O).

Whether (:func:`lingers`, decision 0012). A read lingers when it held at least
:data:`MIN_MESSAGES` publishes or acks (a client that pipelines: one waiting for each
reply sends one at a time), less than :data:`MAX_BYTES` (a read that filled Twisted's
buffer has more waiting: read on at once), and none of its publishes was handed at once
to a consumer with credit. Such a consumer is waiting for the next message, and the
pause would hold that message in the socket: delivering now beats lingering. A consumer
without credit (its prefetch full, or a backlog ahead of the message) is busy with what it
has, so a throughput publisher behind a slower consumer still lingers.

How long (:class:`LingerTuner`, decision 0010). The read linger (protocol.py, decision
0008) pauses reading a connection after a read that held several publishes or acks, so
the next read takes more at once. The longer the pause, the fewer wake-ups per message,
as long as the client goes on sending during it.
A client bound by its *rate* (its own CPU, a confirm window or a prefetch far larger than
what one pause lets through) sends more the longer we wait. A client bound by its
*window* (2 unconfirmed publishes, prefetch 2) sends its window and then waits for us:
a longer pause only slows it down.

The two look alike in any one read, so :class:`LingerTuner` tells them apart by
experiment, the way TCP's congestion control finds a window. It keeps the linger at
``base * level``, ``level`` a power of two, and measures the mean number of messages per
lingered read over :data:`WINDOW` reads. Then it probes: it doubles the level (or halves
it) for the next window and compares.

- Up: a doubled linger that brought at least :data:`GAIN` times as many messages per
  read is kept, and the next doubling is tried at once. Otherwise the level goes back.
- Down: a halved linger whose reads held more than 1/:data:`GAIN` as many messages is
  kept (the client was not using the longer one), and the next halving is tried.
  Otherwise the level goes back.
- After a probe that went back, the level stays put for :data:`HOLD` windows; then the
  next probe goes the other way from the last one.

A window-bound client's reads hold its window whatever the linger, so every upward
probe fails: it spends one window in :data:`HOLD` + 1 at twice the base linger and the
rest at the base. A rate-bound client climbs to ``top`` in a few windows.
"""

from __future__ import annotations

MIN_MESSAGES = 2  # a read with at least this many publishes or acks is pipelined
MAX_BYTES = 65536  # a read this large filled Twisted's read buffer: read on at once
WINDOW = 8  # lingered reads per measurement
GAIN = 1.3  # a doubled linger must bring this many times as many messages per read
HOLD = 16  # measurements to stay at a level after a probe that went back


def lingers(messages: int, size: int, fed: bool) -> bool:
    """Pause reading after a read of ``size`` bytes that completed ``messages`` publishes
    and settlements, ``fed`` when its publishes were delivered at once to a consumer?"""
    return messages >= MIN_MESSAGES and size < MAX_BYTES and not fed


class LingerTuner:
    __slots__ = ("_before", "_direction", "_hold", "_last", "_msgs", "_reads", "base", "level", "top_level")

    def __init__(self, base: float, top: float) -> None:
        self.base = base  # seconds: the shortest linger
        top_level = 1
        while base * top_level * 2 <= top * (1 + 1e-9):
            top_level *= 2
        self.top_level = top_level  # the longest linger is base * top_level (<= top)
        self.level = 1
        self._reads = 0
        self._msgs = 0
        self._direction = 0  # the probe being measured: +1 doubled, -1 halved, 0 none
        self._before = 0.0  # messages per read at the level before the probe
        self._hold = 0  # windows left before the next probe
        self._last = -1  # the direction of the last probe (the next goes the other way)

    @property
    def linger(self) -> float:
        """Seconds to pause after the next pipelined read."""
        return self.base * self.level

    def lingered(self, messages: int) -> None:
        """A read of ``messages`` publishes or acks, after which we linger."""
        self._reads += 1
        self._msgs += messages
        if self._reads < WINDOW:
            return
        mean = self._msgs / self._reads
        self._reads = self._msgs = 0
        direction, self._direction = self._direction, 0
        if direction > 0:
            if mean >= self._before * GAIN:
                if not self._probe(+1, mean):  # worth it: try longer still
                    self._hold = HOLD
            else:
                self.level //= 2
                self._hold = HOLD
        elif direction < 0:
            if mean * GAIN > self._before:
                if not self._probe(-1, mean):  # the longer linger was not used: try shorter
                    self._hold = HOLD
            else:
                self.level *= 2
                self._hold = HOLD
        elif self._hold:
            self._hold -= 1
        elif not (self._probe(-self._last, mean) or self._probe(self._last, mean)):
            self._hold = HOLD  # a fixed linger: nowhere to go

    def _probe(self, direction: int, mean: float) -> bool:
        level = self.level * 2 if direction > 0 else self.level // 2
        if not 1 <= level <= self.top_level:
            return False
        self.level = level
        self._direction = self._last = direction
        self._before = mean
        return True
