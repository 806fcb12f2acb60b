"""MQTT over TLS through an ``ssl:`` endpoint string (Twisted's, with a certificate and key
in PEM files): paho connects with the certificate as its CA, verifying the address, and
publishes and receives as over TCP; a plain-TCP client on the TLS port gets nothing."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.certs import self_signed
from tests.integration.mqtt_clients import Paho, unique
from tests.serverproc import LogbusServer, module_server


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LogbusServer, Path]]:
    cert, key = self_signed(tmp_path_factory.mktemp("certs"))
    endpoint = f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}"
    for server in module_server(tmp_path_factory, "mqtt_tls", listeners={"mqtt": endpoint, "amqp": "off",
                                                                         "kafka": "off", "http": "off"}):
        yield server, cert


def test_paho_over_tls(tls: tuple[LogbusServer, Path]) -> None:
    server, cert = tls
    base = unique("tls")
    clients: list[Paho] = []
    for version in (4, 5):
        c = Paho(server, unique("c"), version=version, connect=False)
        c.client.tls_set(ca_certs=str(cert), cert_reqs=ssl.CERT_REQUIRED)
        c.connect()
        clients.append(c)
    sub, pub = clients
    try:
        sub.subscribe(f"{base}/#", 1)
        pub.publish(f"{base}/x", b"secret", 1)
        m = sub.next_message()
        assert (m.topic, m.payload) == (f"{base}/x", b"secret")
    finally:
        for c in clients:
            c.close()


def test_plain_tcp_on_the_tls_port_gets_no_connack(tls: tuple[LogbusServer, Path]) -> None:
    server, _ = tls
    host, port = server.host_port("mqtt")
    from logbus.gateway.mqtt import Connect, encode

    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(encode(Connect(unique("plain"), 4), 4))
        s.settimeout(5)
        try:
            reply: Any = s.recv(100)
        except (ConnectionResetError, TimeoutError):
            reply = b""
    assert not reply.startswith(b"\x20")  # never a CONNACK in the clear
