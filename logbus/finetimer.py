"""The poll's sub-millisecond timer: a timerfd in the reactor's epoll set (logbus/reactor.py).

epoll_wait counts whole milliseconds and rounds a timeout up; a pass due in 0.2 ms would
wait 1 ms. Apart from the reactor because it calls libc through ctypes, which mypyc does
not compile (the reactor is compiled: logbus/compiled.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import select
import time
from typing import Any

log = logging.getLogger(__name__)


FINE_TIMEOUT = 0.01  # poll timeouts shorter than this are kept to the microsecond (a timerfd)


class FineTimer:
    """A timerfd in the reactor's epoll set: wakes a poll at a sub-millisecond deadline."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.armed_until = 0.0  # time.monotonic() of the armed expiry; 0.0: not armed
        spec = _ITimerSpec()  # it_interval 0: one expiry; it_value.tv_sec stays 0
        self._value = spec.it_value  # a view of the struct's field, made once (not per arm)
        self._ref = ctypes.byref(spec)  # (both keep the struct alive)

    @classmethod
    def open(cls, poller: Any) -> FineTimer | None:
        fd = _libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            log.warning("no timerfd (%s): poll timeouts rounded up to whole milliseconds",
                        os.strerror(ctypes.get_errno()))
            return None
        poller.register(fd, select.EPOLLIN)
        return cls(fd)

    def arm(self, timeout: float) -> None:
        """Expire in ``timeout`` seconds (0 < timeout < FINE_TIMEOUT: under a second, so the
        nanoseconds alone), unless already armed to expire about then. Once per paced pass
        under load: the struct and its reference are made once."""
        until = _monotonic() + timeout
        armed = self.armed_until
        if armed and -50e-6 < until - armed < 50e-6:
            return
        self.armed_until = until
        self._value.tv_nsec = int(timeout * 1e9) or 1
        _timerfd_settime(self.fd, 0, self._ref, None)

    def expired(self) -> None:
        self.armed_until = 0.0
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass

    def close(self, poller: Any) -> None:
        poller.unregister(self.fd)
        os.close(self.fd)


class _TimeSpec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", _TimeSpec), ("it_value", _TimeSpec)]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_timerfd_settime = _libc.timerfd_settime
_monotonic = time.monotonic
