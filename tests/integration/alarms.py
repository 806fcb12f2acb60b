"""Helpers for the resource-alarm tests of every protocol: the alarms are set for real,
by changing the limits over ``PUT /api/limits`` (test_amqp_alarms.py)."""

from __future__ import annotations

import select
import socket
from typing import Any

from tests.integration.mgmt import Mgmt
from tests.integration.test_mqtt_limits import metric, wait_for

ABOVE_ANY_DISK = 2**60  # more free bytes than any filesystem here has: the disk alarm
EVERY_BYTE = 2  # a memory watermark of 2 bytes: the memory alarm

__all__ = ["ABOVE_ANY_DISK", "EVERY_BYTE", "bytes_in", "metric", "send_until_stalled", "set_limits", "wait_for"]


def set_limits(server: Any, **limits: Any) -> dict[str, Any]:
    reply = Mgmt(server).call("PUT", "/api/limits", limits)
    assert reply.status == 200, reply
    return reply.json()  # type: ignore[no-any-return]


def bytes_in(server: Any, peer: str) -> int:
    """What the broker read from the connection of ``peer`` (host:port), by its registry."""
    listed = Mgmt(server).call("GET", "/api/connections").json()
    return next(c["bytes_in"] for c in listed if c["peer"] == peer)  # type: ignore[no-any-return]


STALL = 0.5  # seconds a socket stays unwritable before the peer is taken as not reading


def send_until_stalled(sock: socket.socket, data: bytes, stall: float = STALL) -> int:
    """Send ``data`` until done or until the socket stays unwritable for ``stall``
    seconds (the peer reads nothing: its buffers and ours are full); the bytes sent."""
    sock.setblocking(False)
    sent = 0
    try:
        while sent < len(data):
            if not select.select([], [sock], [], stall)[1]:
                break
            try:
                sent += sock.send(data[sent:sent + (1 << 20)])
            except BlockingIOError:
                continue
    finally:
        sock.setblocking(True)
    return sent
