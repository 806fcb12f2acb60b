"""Failed logins from one source, slowed down after a burst: what a password guesser (or a
client reconnecting in a loop with a wrong password: librdkafka retries every 50 ms)
meets. Kafka has the like (``connection.failed.authentication.delay.ms``).

Per source host: the first ``burst`` failures within ``window`` seconds are answered at
once; each one after that waits ``first`` seconds, doubling with every further failure,
up to ``longest``. A success from the host forgets its failures; failures older than the
window no longer count. The table is bounded: past ``max_hosts`` hosts the oldest are
dropped. Sans I/O: ``failed`` says how long to wait, the gateway waits.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Callable

BURST = 5
WINDOW = 60.0  # seconds
FIRST = 0.2  # seconds: the first delay after a burst
LONGEST = 5.0  # seconds
MAX_HOSTS = 10_000


class LoginThrottle:
    def __init__(self, clock: Callable[[], float], *, burst: int = BURST, window: float = WINDOW,
                 first: float = FIRST, longest: float = LONGEST, max_hosts: int = MAX_HOSTS) -> None:
        self.clock = clock
        self.burst, self.window, self.first, self.longest, self.max_hosts = burst, window, first, longest, max_hosts
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def failed(self, host: str) -> float:
        """A failed login from ``host``: how many seconds to wait before answering it."""
        now = self.clock()
        times = self._failures.pop(host, None) or deque()
        while times and now - times[0] > self.window:
            times.popleft()
        times.append(now)
        self._failures[host] = times  # now the most recent
        while len(self._failures) > self.max_hosts:
            self._failures.popitem(last=False)
        over = len(times) - self.burst
        return 0.0 if over <= 0 else min(self.longest, self.first * 2 ** (over - 1))

    def succeeded(self, host: str) -> None:
        self._failures.pop(host, None)
