"""MQTT over TLS through an ``ssl:`` endpoint string (Twisted's, with a certificate and key
in PEM files): paho connects with the certificate as its CA, verifying the address, and
publishes and receives as over TCP; a plain-TCP client on the TLS port gets nothing. Plain
and TLS listen side by side; TLS below 1.2 and weak cipher suites are refused; SIGHUP
brings a renewed certificate in."""

from __future__ import annotations

import re
import signal
import socket
import ssl
import time
import warnings
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


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LogbusServer, Path]]:
    cert, key = self_signed(tmp_path_factory.mktemp("certs2"))
    endpoints = f"tcp:0:interface=127.0.0.1 ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}"
    for server in module_server(tmp_path_factory, "mqtt_both", listeners={"mqtt": endpoints, "amqp": "off",
                                                                          "kafka": "off", "http": "off"}):
        yield server, cert


def test_plain_and_tls_side_by_side(side_by_side: tuple[LogbusServer, Path]) -> None:
    """One MQTT gateway on two endpoints (Mosquitto's 1883 and 8883): a message published
    over TLS reaches a subscriber on the plain port; the log says which listener is TLS."""
    server, cert = side_by_side
    base = unique("both")
    plain = Paho(server, unique("plain"), version=5)
    secure = Paho(server, unique("tls"), version=5, port=server.host_port("mqtt.2")[1], connect=False)
    secure.client.tls_set(ca_certs=str(cert), cert_reqs=ssl.CERT_REQUIRED)
    secure.connect()
    try:
        plain.subscribe(f"{base}/#", 1)
        secure.publish(f"{base}/x", b"over tls", 1)
        assert plain.next_message().payload == b"over tls"
    finally:
        plain.close()
        secure.close()
    log = server.log_text()
    assert re.search(r"mqtt listening on 127\.0\.0\.1:\d+ \(plain, no TLS\)", log), log
    assert re.search(r"mqtt\.2 listening on 127\.0\.0\.1:\d+ \(TLS 1\.2\+\)", log), log


def _handshake(server: LogbusServer, context: ssl.SSLContext) -> str | None:
    """The TLS version a handshake with the TLS listener gets, or None if it is refused."""
    host, port = server.host_port("mqtt.2")
    with socket.create_connection((host, port), timeout=5) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                return s.version()
        except (ssl.SSLError, ConnectionResetError, OSError):
            return None


def test_tls_below_1_2_and_weak_suites_are_refused(side_by_side: tuple[LogbusServer, Path]) -> None:
    server, _ = side_by_side

    def client(maximum: ssl.TLSVersion, ciphers: str = "DEFAULT:@SECLEVEL=0") -> ssl.SSLContext:
        c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        c.check_hostname, c.verify_mode = False, ssl.CERT_NONE
        with warnings.catch_warnings():  # a client willing to speak what the broker must refuse
            warnings.simplefilter("ignore", DeprecationWarning)
            c.minimum_version, c.maximum_version = ssl.TLSVersion.MINIMUM_SUPPORTED, maximum
        c.set_ciphers(ciphers)
        return c

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1]
    for version in old:
        assert _handshake(server, client(version)) is None
    assert _handshake(server, client(ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES128-SHA:@SECLEVEL=0")) is None  # CBC
    assert _handshake(server, client(ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES128-GCM-SHA256")) == "TLSv1.2"
    assert _handshake(server, client(ssl.TLSVersion.TLSv1_3)) == "TLSv1.3"


def _served_certificate(server: LogbusServer) -> bytes:
    host, port = server.host_port("mqtt.2")
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    c.check_hostname, c.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection((host, port), timeout=5) as raw, c.wrap_socket(raw) as s:
        cert = s.getpeercert(binary_form=True)
    assert cert is not None
    return cert


def _sighup_and_wait(server: LogbusServer, text: str) -> None:
    seen = server.log_text().count(text)
    server.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
    deadline = time.monotonic() + 15
    while server.log_text().count(text) == seen:
        assert time.monotonic() < deadline, f"no {text!r} in the log after SIGHUP"
        time.sleep(0.05)


def test_sighup_reloads_a_renewed_certificate(side_by_side: tuple[LogbusServer, Path]) -> None:
    """As Mosquitto: a certificate renewed on disk is served to new connections after
    SIGHUP, connections already open go on, and a pair that does not load leaves the
    old one in force."""
    server, cert = side_by_side
    before = _served_certificate(server)
    open_one = Paho(server, unique("kept"), version=5, port=server.host_port("mqtt.2")[1], connect=False)
    open_one.client.tls_set(ca_certs=str(cert), cert_reqs=ssl.CERT_REQUIRED)
    open_one.connect()
    try:
        self_signed(cert.parent)  # a new key and certificate, where the endpoint string names them
        _sighup_and_wait(server, "mqtt.2: TLS certificate reloaded")
        renewed = _served_certificate(server)
        assert renewed != before
        topic = unique("kept") + "/x"
        open_one.subscribe(topic, 1)
        open_one.publish(topic, b"still here", 1)
        assert open_one.next_message().payload == b"still here"
        (cert.parent / "key.pem").write_text("not a key")
        _sighup_and_wait(server, "mqtt.2: TLS certificate not reloaded")
        assert _served_certificate(server) == renewed
    finally:
        open_one.close()
