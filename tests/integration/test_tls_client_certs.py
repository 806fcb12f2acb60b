"""Client certificates as logins (``--tls-cert-login common_name``, listeners with
``caCertsDir``) against a real `logbus serve`: pika's EXTERNAL, paho and kafka-python
with a certificate log in as the user its common name names, with no password; a
certificate of another CA fails the handshake; one that names no user is refused in the
protocol's terms; a client without a certificate still logs in with a password."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika  # type: ignore[import-untyped]
import pika.exceptions  # type: ignore[import-untyped]
import pytest
from kafka import KafkaProducer  # type: ignore[import-untyped]

from logbus.gateway.mqtt import Connect, encode
from tests.integration.certs import authority, client_certificate, self_signed
from tests.integration.mgmt import Mgmt
from tests.integration.mqtt_clients import Paho, unique
from tests.serverproc import LogbusServer, module_server

WAIT = 15


@dataclass
class Tls:
    server: LogbusServer
    server_cert: Path
    device: tuple[Path, Path]  # a certificate for user device-7
    stranger: tuple[Path, Path]  # a certificate for a name that is no user
    foreign: tuple[Path, Path]  # signed by another CA


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tls]:
    base = tmp_path_factory.mktemp("client-certs")
    server_cert, server_key = self_signed(base)
    ca = authority(base / "ca")
    other = authority(base / "other-ca", "another CA")
    endpoint = f"ssl:0:interface=127.0.0.1:privateKey={server_key}:certKey={server_cert}:caCertsDir={base / 'ca'}"
    for server in module_server(tmp_path_factory, "client-certs",
                                listeners={"amqp": endpoint, "mqtt": endpoint, "kafka": endpoint,
                                           "mqtt_ws": endpoint},
                                args=["--tls-cert-login", "common_name", "--mqtt-anonymous", "off"]):
        mgmt = Mgmt(server)
        mgmt.add_user("device-7", "")  # no password: the certificate is its only login
        mgmt.grant("/", "device-7")
        yield Tls(server, server_cert, client_certificate(base / "clients", "device-7", ca),
                  client_certificate(base / "clients", "nobody-here", ca),
                  client_certificate(base / "foreign", "device-7", other))


def users_of(server: LogbusServer, protocol: str) -> set[str]:
    deadline = time.monotonic() + WAIT
    while True:
        users = {c["user"] for c in Mgmt(server).ok("GET", f"/api/connections?protocol={protocol}").json()}
        if users or time.monotonic() > deadline:
            return users
        time.sleep(0.05)


def amqp_params(t: Tls, cert: tuple[Path, Path] | None, credentials: Any) -> Any:
    context = ssl.create_default_context(cafile=str(t.server_cert))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    host, port = t.server.host_port("amqp")
    return pika.ConnectionParameters(host, port, ssl_options=pika.SSLOptions(context, "127.0.0.1"),
                                     credentials=credentials, connection_attempts=1)


def test_amqp_external(tls: Tls) -> None:
    conn = pika.BlockingConnection(amqp_params(tls, tls.device, pika.credentials.ExternalCredentials()))
    try:
        assert "device-7" in users_of(tls.server, "amqp")
        conn.channel().queue_declare("cert-q")
    finally:
        conn.close()
    with pytest.raises(pika.exceptions.AMQPConnectionError):  # names no user: 403 ACCESS_REFUSED
        pika.BlockingConnection(amqp_params(tls, tls.stranger, pika.credentials.ExternalCredentials()))
    with pytest.raises(pika.exceptions.AMQPConnectionError):  # no certificate: no EXTERNAL offered
        pika.BlockingConnection(amqp_params(tls, None, pika.credentials.ExternalCredentials()))
    plain = pika.BlockingConnection(amqp_params(tls, None, pika.PlainCredentials("guest", "guest")))
    plain.close()  # without a certificate a password still works


def _paho(t: Tls, cert: tuple[Path, Path] | None, **kw: Any) -> Paho:
    c = Paho(t.server, unique("cert"), version=5, connect=False, **kw)
    c.client.tls_set(ca_certs=str(t.server_cert), certfile=str(cert[0]) if cert else None,
                     keyfile=str(cert[1]) if cert else None, cert_reqs=ssl.CERT_REQUIRED)
    return c


@pytest.mark.parametrize("ws", [False, True], ids=["tls", "wss"])
def test_mqtt_identity_as_user_name(tls: Tls, ws: bool) -> None:
    over = {"transport": "websockets", "port": tls.server.host_port("mqtt_ws")[1]} if ws else {}
    device = _paho(tls, tls.device, **over)
    try:
        _, reason, _ = device.connect()
        assert reason.value == 0  # no user name given, anonymous clients refused: the certificate logged it in
        assert "device-7" in users_of(tls.server, "mqtt")
    finally:
        device.close()
    stranger = _paho(tls, tls.stranger, **over)
    try:
        _, reason, _ = stranger.connect()
        assert reason.value == 0x86  # bad user name or password: no such user
    finally:
        stranger.close()


def test_kafka_ssl_principal(tls: Tls) -> None:
    producer = KafkaProducer(bootstrap_servers=tls.server.addresses["kafka"], security_protocol="SSL",
                             ssl_cafile=str(tls.server_cert), ssl_certfile=str(tls.device[0]),
                             ssl_keyfile=str(tls.device[1]), client_id="cert-producer")
    try:
        assert producer.send("cert-topic", b"signed").get(timeout=WAIT).offset == 0
        assert "device-7" in users_of(tls.server, "kafka")
    finally:
        producer.close()


def test_a_certificate_of_another_authority_fails_the_handshake(tls: Tls) -> None:
    context = ssl.create_default_context(cafile=str(tls.server_cert))
    context.load_cert_chain(str(tls.foreign[0]), str(tls.foreign[1]))

    host, port = tls.server.host_port("mqtt")
    got: bytes | None
    with socket.create_connection((host, port), timeout=5) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                # a CONNECT that logs in with a password: a CONNACK would mean the handshake took
                s.sendall(encode(Connect(unique("foreign"), 4, username="guest", password=b"guest"), 4))
                got = s.recv(10)  # TLS 1.3: the refusal comes with the first read
        except (ssl.SSLError, ConnectionResetError):
            got = None
    assert not got  # an alert, a reset or a close: nothing from an MQTT broker
