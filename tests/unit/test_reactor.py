"""logbus.reactor: Twisted's epoll reactor without the per-event log context still serves
every ready descriptor, reads and disconnects as Twisted's does, and an error that
escapes one event is logged without stopping the others."""

from __future__ import annotations

import logging
import os
from typing import Any, Iterator

import pytest
from twisted.internet.error import ConnectionDone

from logbus.reactor import Reactor


class Reader:
    def __init__(self, fd: int, got: list[bytes], lost: list[Any], *, fail_lost: bool = False) -> None:
        self.fd, self.got, self.lost, self.fail_lost = fd, got, lost, fail_lost

    def fileno(self) -> int:
        return self.fd

    def logPrefix(self) -> str:
        return "reader"

    def doRead(self) -> Any:
        data = os.read(self.fd, 100)
        self.got.append(data)
        return None if data else ConnectionDone()

    def connectionLost(self, reason: Any) -> None:
        self.lost.append(reason)
        if self.fail_lost:
            raise RuntimeError("connectionLost failed")


@pytest.fixture
def reactor() -> Iterator[Reactor]:
    r = Reactor()
    try:
        yield r
    finally:
        r.removeReader(r.waker)
        r.waker.connectionLost(None)
        if r._fine is not None:
            r._fine.close(r._poller)
        r._poller.close()


def pipe(fds: list[int]) -> tuple[int, int]:
    r, w = os.pipe()
    fds += [r, w]
    return r, w


def test_every_ready_descriptor_is_read_and_an_ended_one_disconnected(reactor: Reactor) -> None:
    fds: list[int] = []
    try:
        (a, a_w), (b, b_w) = pipe(fds), pipe(fds)
        got_a: list[bytes] = []
        got_b: list[bytes] = []
        lost: list[Any] = []
        ra, rb = Reader(a, got_a, lost), Reader(b, got_b, lost)
        reactor.addReader(ra)
        reactor.addReader(rb)
        os.write(a_w, b"one")
        os.write(b_w, b"two")
        reactor.doPoll(0)
        assert (got_a, got_b, lost) == ([b"one"], [b"two"], [])
        os.close(a_w)
        fds.remove(a_w)
        reactor.doPoll(0)
        assert got_a == [b"one"] and len(lost) == 1 and lost[0].check(ConnectionDone)
        assert ra not in reactor.getReaders() and rb in reactor.getReaders()
    finally:
        reactor.removeAll()
        for fd in fds:
            os.close(fd)


def test_an_error_escaping_one_event_is_logged_and_the_others_are_served(
    reactor: Reactor, caplog: pytest.LogCaptureFixture
) -> None:
    fds: list[int] = []
    try:
        (a, a_w), (b, b_w) = pipe(fds), pipe(fds)
        got: list[bytes] = []
        lost: list[Any] = []
        bad = Reader(a, [], lost, fail_lost=True)
        reactor.addReader(bad)
        reactor.addReader(Reader(b, got, lost))
        os.close(a_w)  # end of file: doRead says ConnectionDone, connectionLost raises
        fds.remove(a_w)
        os.write(b_w, b"still served")
        with caplog.at_level(logging.ERROR, logger="logbus.reactor"):
            reactor.doPoll(0)
        assert got == [b"still served"]
        assert len(lost) == 1
        assert "connectionLost failed" in caplog.text
    finally:
        reactor.removeAll()
        for fd in fds:
            os.close(fd)


def test_the_end_of_turn_pass_runs_once_after_the_turns_reads_without_a_timer(reactor: Reactor) -> None:
    """logbus's reactor drives the end-of-turn pass itself (core/tick.py): work asked for
    by each read of a turn runs once, after every read of the turn, and asking for it
    schedules no timed call (no DelayedCall in the reactor's heap)."""
    from logbus.core.tick import tick_of

    tick = tick_of(reactor)
    fds: list[int] = []
    order: list[str] = []
    timers_when_asked: list[int] = []

    def end_of_turn() -> None:
        order.append("pass")
        reactor.stop()

    class Asking(Reader):
        def doRead(self) -> Any:
            order.append("read")
            os.read(self.fd, 100)
            tick.later(end_of_turn) if order.count("read") == 1 else None
            timers_when_asked.append(len(reactor.getDelayedCalls()))
            return None

    try:
        (a, a_w), (b, b_w) = pipe(fds), pipe(fds)
        readers = [Asking(a, [], []), Asking(b, [], [])]
        for r in readers:
            reactor.addReader(r)
        os.write(a_w, b"x")
        os.write(b_w, b"y")
        reactor.run(installSignalHandlers=False)
        assert order == ["read", "read", "pass"]
        assert timers_when_asked == [0, 0]
        for r in readers:
            reactor.removeReader(r)
    finally:
        for fd in fds:
            os.close(fd)


def test_under_a_steady_load_paced_work_waits_for_the_pace_and_later_work_does_not(reactor: Reactor) -> None:
    """Work asked for ``paced`` (decision 0055) within ``pace`` of the last pass that ran
    such work waits for the next one (here the pace is an hour, so it waits until the
    reactor stops, which runs it), while work asked for ``later`` runs at the end of its
    own turn; paced work asked for after a quiet spell runs at the end of its turn, first."""
    from logbus.core.tick import tick_of

    tick = tick_of(reactor)
    tick.pace = 3600.0
    fds: list[int] = []
    order: list[str] = []

    class Asking(Reader):
        def doRead(self) -> Any:
            data = os.read(self.fd, 100).decode()
            order.append(f"read {data}")
            tick.later(lambda: order.append(f"later {data}"))
            tick.paced(lambda: order.append(f"paced {data}"))
            if data == "2":
                tick.later(reactor.stop)
            else:
                reactor.callLater(0, os.write, w, b"2")  # the next turn: within the pace
            return None

    try:
        r, w = pipe(fds)
        reader = Asking(r, [], [])
        reactor.addReader(reader)
        os.write(w, b"1")
        reactor.run(installSignalHandlers=False)
        reactor.removeReader(reader)
    finally:
        for fd in fds:
            os.close(fd)
    assert order == ["read 1", "paced 1", "later 1", "read 2", "later 2", "paced 2"]
    assert tick.paced_passes == 2


def test_a_poll_timeout_under_a_millisecond_is_woken_by_the_fine_timer(reactor: Reactor) -> None:
    """epoll_wait rounds a timeout up to whole milliseconds; a shorter one is armed on the
    reactor's timerfd, whose expiry ends the poll (and is read, so it does not end the next)."""
    reactor.doPoll(0.0002)
    fine = reactor._fine
    assert fine is not None and fine.armed_until == 0.0  # armed, expired and read
    with pytest.raises(BlockingIOError):
        os.read(fine.fd, 8)


HELD_AT_ONE_FREE = """
import os, resource
from logbus.reactor import Reactor
from tests.fault.fdlimit import limit_leaving, open_descriptors

reactor = Reactor()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
held = set()
for fd in open_descriptors(os.getpid()):  # less the one listing /proc/self/fd, closed again
    try:
        os.fstat(fd)
        held.add(fd)
    except OSError:
        pass
resource.setrlimit(resource.RLIMIT_NOFILE, (limit_leaving(held, 1), hard))
reactor.callLater(0.0005, lambda: None)
reactor.runUntilCurrent()
reactor.doPoll(reactor.timeout())  # a sub-10 ms timeout: the fine timer is armed
try:
    os.close(os.dup(0))
except OSError as e:
    print("taken", e)
else:
    print("free")
"""


def test_the_fine_timer_takes_no_descriptor_once_the_reactor_runs() -> None:
    """Out of descriptors, the one a closed connection frees is for the listener paused in
    accepting.py to take: a timerfd opened on the first short poll took it (CI at a5fd912:
    a client left in the backlog for good). The reactor opens its timer when it is made."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", HELD_AT_ONE_FREE], capture_output=True, text=True,
                          timeout=60, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "free", done.stdout
