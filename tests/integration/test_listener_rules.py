"""A listener's own rule for clients without credentials (``anonymous=`` in its endpoint
string): beside a loopback listener that lets them in as ``anonymous_user``, another of the
same gateway refuses them (Mosquitto's per-listener ``allow_anonymous``, Kafka's SASL
listener beside a PLAINTEXT one), for MQTT over TCP and WebSocket (paho) and Kafka (kcat,
the raw wire); a client with credentials is let in on both."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from kafka.protocol.metadata import MetadataRequest, MetadataResponse  # type: ignore[import-untyped]

from tests.integration.mqtt_clients import Paho, unique
from tests.kafka_wire import Wire
from tests.serverproc import LogbusServer, module_server

LOOPBACK = "tcp:0:interface=127.0.0.1"
STRICT = "tcp:0:interface=127.0.0.1:anonymous=off"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "listener-rules", listeners={
        "mqtt": f"{LOOPBACK} {STRICT}", "mqtt_ws": STRICT, "kafka": f"{LOOPBACK} {STRICT}", "amqp": "off"})


def mqtt_reason(server: LogbusServer, listener: str, user: str | None = None) -> int:
    ws = listener == "mqtt_ws"
    c = Paho(server, unique("anon"), version=5, username=user, password=user,
             transport="websockets" if ws else "tcp", port=server.host_port(listener)[1], connect=False)
    try:
        _, reason, _ = c.connect()
        return int(getattr(reason, "value", reason))
    finally:
        c.close()


@pytest.mark.parametrize(("listener", "anonymous"), [("mqtt", 0), ("mqtt.2", 0x87), ("mqtt_ws", 0x87)])
def test_mqtt_anonymous_per_listener(server: LogbusServer, listener: str, anonymous: int) -> None:
    assert mqtt_reason(server, listener) == anonymous  # 0x87: Not authorized
    assert mqtt_reason(server, listener, "guest") == 0  # credentials: in everywhere


def kcat_metadata(server: LogbusServer, listener: str, *sasl: str) -> int:
    return subprocess.run(["kcat", "-L", "-b", server.addresses[listener], "-m", "10", *sasl],
                          capture_output=True, timeout=60).returncode


def test_kafka_anonymous_per_listener(server: LogbusServer) -> None:
    assert kcat_metadata(server, "kafka") == 0  # loopback, no SASL: acts as guest
    with Wire(server, "kafka") as wire:
        assert wire.call(MetadataRequest[1](topics=None), MetadataResponse[1], 1).brokers
    with Wire(server, "kafka.2") as wire, pytest.raises(AssertionError, match="connection closed"):
        wire.call(MetadataRequest[1](topics=None), MetadataResponse[1], 1)  # SASL first, or nothing
    scram = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-256",
             "-X", "sasl.username=guest", "-X", "sasl.password=guest"]
    assert kcat_metadata(server, "kafka.2", *scram) == 0
    assert "asks for SASL authentication first (kafka_anonymous, or its anonymous=)" in server.log_text()
