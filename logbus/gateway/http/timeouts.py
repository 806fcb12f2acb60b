"""How long an HTTP connection may take over each part of a request, sans I/O.

A connection is always in one phase, and each phase but one has a deadline:

    HEAD      a request head is coming: complete within ``head`` seconds, counted from
              the accept for a connection's first request (the handshake timeout) and
              from its first byte for a later one
    BODY      the head is in, its body is coming: complete within ``body`` seconds of
              the head's end (a total, so a body trickled in forever ends too)
    HANDLING  the request is complete and ours to answer: no deadline (a long poll)
    IDLE      answered, the connection kept alive: the next request's first byte
              within ``idle`` seconds

    clock = RequestClock(Timeouts(head=10, idle=75, body=60), now)
    clock.data(now); clock.head_done(now); clock.body_done(); clock.answered(now)
    clock.deadline            # when the current phase's time is up, or None
    clock.expired(now)        # the phase whose time is up at ``now``, or None

The shell (site.RegisteredChannel) keeps one reactor call at ``deadline`` and moves it
when the deadline changes; what it does when one passes is its own (408, or a close).
The defaults follow nginx (keepalive_timeout 75 s, client_body_timeout 60 s), the head's
RabbitMQ's handshake_timeout (10 s; nginx's client_header_timeout is 60 s).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Timeouts:
    head: float = 10.0  # seconds for a request head (handshake_timeout_ms)
    idle: float = 75.0  # seconds between requests on a kept-alive connection (http_idle_timeout_ms)
    body: float = 60.0  # seconds for a request body after its head (http_body_timeout_ms)


class Phase(enum.Enum):
    HEAD = "head"
    BODY = "body"
    HANDLING = "handling"
    IDLE = "idle"


class RequestClock:
    __slots__ = ("timeouts", "phase", "deadline", "started")

    def __init__(self, timeouts: Timeouts, now: float) -> None:
        self.timeouts = timeouts
        self.phase = Phase.HEAD
        self.deadline: float | None = now + timeouts.head
        self.started = False  # a byte of the current request has arrived

    def data(self, now: float) -> None:
        """Bytes arrived. Only the first byte of a request after IDLE changes anything."""
        if self.phase is Phase.IDLE:
            self.phase = Phase.HEAD
            self.deadline = now + self.timeouts.head
        if self.phase is Phase.HEAD:
            self.started = True

    def head_done(self, now: float) -> None:
        self.phase = Phase.BODY
        self.deadline = now + self.timeouts.body

    def body_done(self) -> None:
        self.phase = Phase.HANDLING
        self.deadline = None
        self.started = False

    def answered(self, now: float) -> None:
        """The answer is written and the connection kept alive."""
        self.phase = Phase.IDLE
        self.deadline = now + self.timeouts.idle
        self.started = False

    def stop(self) -> None:
        """No more deadlines (the connection is being closed)."""
        self.phase = Phase.HANDLING
        self.deadline = None

    def expired(self, now: float) -> Phase | None:
        if self.deadline is not None and now >= self.deadline:
            return self.phase
        return None
