"""Out of file descriptors, a new connection waits in the listen backlog (as with RabbitMQ
and Mosquitto) and completes once a descriptor is free: a real `logbus serve` held at no
free descriptor (fdlimit.py), a raw client that sends its protocol's first bytes, then
an idle HTTP connection closed to free one. docs/operations.md says so."""

from __future__ import annotations

import http.client
import socket
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.fault.fdlimit import descriptors_free
from tests.serverproc import LogbusServer

DEADLINE = 30.0
MQTT_CONNECT = b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x3c\x00\x02bk"  # 3.1.1, clean session, client id "bk"
HELLOS = {
    "mqtt": (MQTT_CONNECT, b"\x20\x02\x00\x00"),  # CONNACK, accepted
    "amqp": (b"AMQP\x00\x00\x09\x01", b"\x01\x00\x00"),  # a method frame on channel 0: connection.start
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LogbusServer]:
    s = LogbusServer(tmp_path / "srv")
    try:
        s.start()
        yield s
    finally:
        s.cleanup()


def closed_by_peer(s: socket.socket) -> bool:
    """Whether the server closed or reset ``s`` (without waiting)."""
    timeout = s.gettimeout()
    s.setblocking(False)  # with a timeout, recv would wait for data first
    try:
        return s.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True
    finally:
        s.settimeout(timeout)


@pytest.mark.parametrize("listener", sorted(HELLOS))
def test_out_of_descriptors_a_new_connection_waits_in_the_backlog(server: LogbusServer, listener: str) -> None:
    hello, answer = HELLOS[listener]
    idle = http.client.HTTPConnection("127.0.0.1", server.ports["http"], timeout=DEADLINE)
    idle.request("GET", "/healthz")  # accepted, and kept alive: its close frees a descriptor
    assert idle.getresponse().read()
    port = server.ports[listener]
    with descriptors_free(server.pid, 0), socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as client:
        client.sendall(hello)  # connected in the kernel's backlog
        deadline = time.monotonic() + DEADLINE
        while f":{port}: out of file descriptors" not in server.log_text():  # the broker tried to accept it
            assert not closed_by_peer(client), "the connection was closed instead of left in the backlog"
            assert time.monotonic() < deadline, server.log_tail()
            time.sleep(0.02)
        assert not closed_by_peer(client), "the connection was closed instead of left in the backlog"
        idle.close()  # one descriptor free
        got = b""
        while len(got) < len(answer):
            chunk = client.recv(len(answer) - len(got))
            assert chunk, f"closed after {got!r}"
            got += chunk
        assert got == answer
    log = server.log_text()
    assert f":{port}: accepting connections again" in log
    assert "releasing reserved file descriptor" not in log, log[-3000:]
