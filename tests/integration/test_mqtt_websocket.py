"""MQTT over WebSocket (``--mqtt-ws``): paho's ``transport="websockets"`` clients share
sessions and topics with TCP clients; a plain HTTP request is refused."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.integration.mqtt_clients import Paho, unique
from tests.serverproc import LOOPBACK_ANY_PORT, ServerFactory


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    factory = ServerFactory(Path(tmp_path_factory.mktemp("mqtt_ws")))
    try:
        yield factory.start(listeners={"kafka": "off", "amqp": "off", "mqtt_ws": LOOPBACK_ANY_PORT})
    finally:
        factory.cleanup()


@pytest.mark.parametrize("version", [4, 5])
def test_websocket_client_talks_to_tcp_client(server: Any, version: int) -> None:
    base = unique("ws")
    _, ws_port = server.host_port("mqtt_ws")
    ws = Paho(server, unique("ws"), version=version, transport="websockets", port=ws_port, connect=False)
    ws.client.ws_set_options(path="/mqtt")
    ws.connect()
    tcp = Paho(server, unique("tcp"), version=version)
    try:
        ws.subscribe(f"{base}/#", 2)
        tcp.subscribe(f"{base}/#", 1)
        for q in (0, 1, 2):
            tcp.publish(f"{base}/from-tcp", f"t{q}".encode(), q)
            ws.publish(f"{base}/from-ws", f"w{q}".encode(), q)
        big = bytes(range(256)) * 400  # 100 KiB: WebSocket frames with 64-bit lengths
        ws.publish(f"{base}/big", big, 1)
        got_ws = ws.take(7)
        got_tcp = tcp.take(7)
        assert sorted(m.payload for m in got_ws if m.topic.endswith("from-tcp")) == [b"t0", b"t1", b"t2"]
        assert sorted(m.payload for m in got_tcp if m.topic.endswith("from-ws")) == [b"w0", b"w1", b"w2"]
        assert [m.payload for m in got_tcp if m.topic.endswith("big")] == [big]
        assert [m.payload for m in got_ws if m.topic.endswith("big")] == [big]
    finally:
        ws.close()
        tcp.close()


def test_plain_http_is_refused(server: Any) -> None:
    host, port = server.host_port("mqtt_ws")
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400") or reply.startswith(b"HTTP/1.1 426"), reply
