"""A broker answer that may come now or later: a login is known at once when the login
cache has it, or once the broker's password thread has checked it (core/access/passwords.py).
A gateway that answers its client in the same turn when it can, and from a later turn
otherwise, says both:

    now_or_later(doors.authenticate(user, password, loopback=...), answer, answer_later)

Either is called with the Deferred's result: None, or the Failure (consumed: nothing is
left unhandled in the Deferred).
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import Deferred


def now_or_later(d: Deferred[Any], now: Callable[[Any], object], later: Callable[[Any], object]) -> bool:
    """``now(result)`` if ``d`` has fired, else ``later(result)`` when it does; True: now."""
    box: list[Any] = []
    d.addBoth(box.append)
    if box:
        now(box[0])
        return True
    d.addCallback(lambda _: later(box[0]))
    return False
