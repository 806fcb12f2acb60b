"""Handshake and idle timeouts on every listener, on raw sockets against a real
``logbus serve`` started with short ones (docs/operations.md, "Timeouts and connection
limits"), and one Kafka request read at a time while an answer is pending.

A *silent* connection sends nothing; a *slowloris* sends a valid beginning and then one
byte every ``TRICKLE`` seconds, never finishing. Each is timed from the connect to the
EOF (or reset) the broker sends, waited for on the socket with a deadline: it must come
no sooner than the configured timeout (so it was that timer, not another cause); the
deadline is generous (``DEADLINE``: the machine is shared, a loaded reactor fires late),
and which timer closed a Kafka connection its counters say.

A Kafka connection is under the handshake timeout until its first request has been
answered, where the listener lets clients in without credentials, or until SASL completes
where it asks for it (the second Kafka endpoint here, ``anonymous=off``); then under
Kafka's idle timeout.
"""

from __future__ import annotations

import base64
import json
import re
import select
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from tests.serverproc import ADMIN_AUTH, LOOPBACK_ANY_PORT, LogbusServer, ServerFactory

HANDSHAKE = 1.0  # seconds: --handshake-timeout-ms 1000
KAFKA_IDLE = 3.0  # longer than the handshake timeout: which one closed a connection shows
HTTP_IDLE = 1.0
HTTP_BODY = 1.0
TRICKLE = 0.2  # seconds between two bytes of a slowloris
DEADLINE = 30.0  # seconds past a timeout before a test gives up waiting for the close
EARLY = 0.05  # the broker's timer starts at its accept, a little after our connect returns


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    factory = ServerFactory(Path(tmp_path_factory.mktemp("timeouts")))
    try:
        yield factory.start(listeners={"mqtt_ws": LOOPBACK_ANY_PORT,
                                       "kafka": f"{LOOPBACK_ANY_PORT} {LOOPBACK_ANY_PORT}:anonymous=off"}, args=[
            "--handshake-timeout-ms", str(int(HANDSHAKE * 1000)),
            "--kafka-idle-timeout-ms", str(int(KAFKA_IDLE * 1000)),
            "--http-idle-timeout-ms", str(int(HTTP_IDLE * 1000)),
            "--http-body-timeout-ms", str(int(HTTP_BODY * 1000)),
        ])
    finally:
        factory.cleanup()


def connect(server: LogbusServer, listener: str) -> socket.socket:
    return socket.create_connection(server.host_port(listener), timeout=10)


def time_to_close(sock: socket.socket, started: float, trickle: bytes = b"", *,
                  limit: float = KAFKA_IDLE + DEADLINE) -> tuple[float, bytes]:
    """Wait for the broker to close ``sock`` (EOF or reset), sending one byte of ``trickle``
    (cycled) whenever ``TRICKLE`` seconds pass with nothing from it; return the seconds
    from ``started`` to the close and everything it sent."""
    got = b""
    i = 0
    deadline = started + limit
    next_byte = time.monotonic() if trickle else deadline
    try:
        while True:
            now = time.monotonic()
            assert now < deadline, f"not closed within {limit} s; received {got[:200]!r}"
            readable, _, _ = select.select([sock], [], [], max(0.0, min(next_byte, deadline) - now))
            if readable:
                try:
                    data = sock.recv(65536)
                except ConnectionResetError:
                    return time.monotonic() - started, got
                if not data:
                    return time.monotonic() - started, got
                got += data
            elif trickle and time.monotonic() >= next_byte:
                try:
                    sock.sendall(trickle[i % len(trickle):i % len(trickle) + 1])
                except (BrokenPipeError, ConnectionResetError):
                    return time.monotonic() - started, got
                i += 1
                next_byte = time.monotonic() + TRICKLE
    finally:
        sock.close()


def assert_closed_after(elapsed: float, timeout: float) -> None:
    """Not before ``timeout``: that timer, not another cause (time_to_close's deadline
    bounds the wait)."""
    assert timeout - EARLY <= elapsed, f"closed after {elapsed:.2f} s, timeout {timeout} s"


def metric(server: LogbusServer, name: str) -> float:
    with urllib.request.urlopen(server.http_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(rf"^{name}_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


# -- what each protocol's slowloris sends: a valid beginning that never ends -----------------

AMQP_HEADER = b"AMQP\x00\x00\x09\x01"
AMQP_TRICKLE = b"\x01\x00\x00\x00\x00\x03\xe8" + b"\x00" * 64  # a method frame of 1000 bytes, forever unfinished
MQTT_TRICKLE = b"\x10\xc8\x01" + b"\x00" * 64  # CONNECT of 200 bytes
KAFKA_TRICKLE = struct.pack(">i", 1000) + b"\x00" * 64  # a request of 1000 bytes
HTTP_TRICKLE = b"GET /api/topics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 64
WS_TRICKLE = b"GET /mqtt HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n" + b"X-Slow: " + b"a" * 64


@pytest.mark.parametrize("listener, counter", [
    ("amqp", "logbus_amqp_handshake_timeouts"),
    ("mqtt", "logbus_mqtt_connect_timeouts"),
    ("mqtt_ws", "logbus_mqtt_ws_handshake_timeouts"),
    ("http", "logbus_http_head_timeouts"),
    ("kafka", "logbus_kafka_handshake_timeouts"),
    ("kafka.2", "logbus_kafka_handshake_timeouts"),
])
def test_a_silent_connection_is_closed_at_the_handshake_timeout(server: LogbusServer, listener: str,
                                                                counter: str) -> None:
    before = metric(server, counter)
    started = time.monotonic()
    sock = connect(server, listener)
    elapsed, got = time_to_close(sock, started)
    assert_closed_after(elapsed, HANDSHAKE)
    assert got == b""  # nothing to answer: no request began
    assert metric(server, counter) == before + 1


def kafka_call(sock: socket.socket, request: object, response_cls: object, version: int) -> object:
    sock.sendall(_frame(request, version, 1))
    size = struct.unpack(">i", _read_exactly(sock, 4))[0]
    return response_cls.decode(_read_exactly(sock, size), version=version, header=True)  # type: ignore[attr-defined]


def kafka_closes(server: LogbusServer) -> tuple[float, float]:
    return metric(server, "logbus_kafka_handshake_timeouts"), metric(server, "logbus_kafka_idle_closes")


def test_a_kafka_connection_answered_once_is_closed_when_idle_not_at_the_handshake_timeout(
        server: LogbusServer) -> None:
    """ApiVersions answered (it needs no login, and this listener lets clients in without
    one): the handshake is over; the connection stays until Kafka's idle timeout."""
    handshakes, idles = kafka_closes(server)
    sock = connect(server, "kafka")
    sock.settimeout(10)
    kafka_call(sock, ApiVersionsRequest(version=2), ApiVersionsResponse, 2)
    elapsed, got = time_to_close(sock, time.monotonic())
    assert_closed_after(elapsed, KAFKA_IDLE)
    assert got == b""
    assert kafka_closes(server) == (handshakes, idles + 1)


def test_where_sasl_is_asked_for_the_handshake_lasts_until_it_completes(server: LogbusServer) -> None:
    """On the listener that asks for SASL, an answered ApiVersions does not end the
    handshake: the connection that goes no further is closed at the handshake timeout;
    one that authenticates is then under the idle timeout."""
    handshakes, idles = kafka_closes(server)
    started = time.monotonic()
    sock = connect(server, "kafka.2")
    sock.settimeout(10)
    kafka_call(sock, ApiVersionsRequest(version=2), ApiVersionsResponse, 2)
    elapsed, _ = time_to_close(sock, started)
    assert_closed_after(elapsed, HANDSHAKE)
    assert kafka_closes(server) == (handshakes + 1, idles)

    sock = connect(server, "kafka.2")
    sock.settimeout(10)
    assert kafka_call(sock, SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse,  # type: ignore[attr-defined]
                      1).error_code == 0
    done = kafka_call(sock, SaslAuthenticateRequest(auth_bytes=b"\0guest\0guest"), SaslAuthenticateResponse, 0)
    assert done.error_code == 0, done  # type: ignore[attr-defined]
    elapsed, got = time_to_close(sock, time.monotonic())
    assert_closed_after(elapsed, KAFKA_IDLE)
    assert got == b""
    assert kafka_closes(server) == (handshakes + 1, idles + 1)


@pytest.mark.parametrize("listener, first, trickle, timeout", [
    ("amqp", AMQP_HEADER, AMQP_TRICKLE, HANDSHAKE),
    ("amqp", b"", AMQP_HEADER, HANDSHAKE),  # the protocol header itself, a byte at a time
    ("mqtt", b"", MQTT_TRICKLE, HANDSHAKE),
    ("mqtt_ws", b"", WS_TRICKLE, HANDSHAKE),
    ("kafka", b"", KAFKA_TRICKLE, HANDSHAKE),  # no request answered yet: the handshake timeout
    ("http", b"", HTTP_TRICKLE, HANDSHAKE),
])
def test_a_slowloris_is_closed_within_the_timeout(server: LogbusServer, listener: str, first: bytes,
                                                   trickle: bytes, timeout: float) -> None:
    kafka_before = kafka_closes(server)
    started = time.monotonic()
    sock = connect(server, listener)
    sock.sendall(first)
    elapsed, got = time_to_close(sock, started, trickle)
    assert_closed_after(elapsed, timeout)
    if listener == "kafka":  # the handshake timer closed it, not the idle one
        assert kafka_closes(server) == (kafka_before[0] + 1, kafka_before[1])
    if listener == "http":  # a request had begun: it is answered 408
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 "), got
        assert json.loads(body)["error"] == "request_timeout"


def test_a_kafka_slowloris_after_an_answered_request_is_closed_when_idle(server: LogbusServer) -> None:
    handshakes, idles = kafka_closes(server)
    sock = connect(server, "kafka")
    sock.settimeout(10)
    kafka_call(sock, ApiVersionsRequest(version=2), ApiVersionsResponse, 2)
    elapsed, _ = time_to_close(sock, time.monotonic(), KAFKA_TRICKLE)
    assert_closed_after(elapsed, KAFKA_IDLE)
    assert kafka_closes(server) == (handshakes, idles + 1)


def test_mqtt_over_websocket_connect_timeout_runs_after_the_upgrade(server: LogbusServer) -> None:
    """The upgrade done at once, then no CONNECT: closed by the MQTT CONNECT timeout."""
    key = base64.b64encode(b"0123456789abcdef").decode()
    started = time.monotonic()
    sock = connect(server, "mqtt_ws")
    sock.sendall((f"GET /mqtt HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                  f"Sec-WebSocket-Protocol: mqtt\r\n\r\n").encode())
    elapsed, got = time_to_close(sock, started)
    assert got.startswith(b"HTTP/1.1 101 ")
    assert_closed_after(elapsed, HANDSHAKE)


def test_http_body_trickled_is_answered_408(server: LogbusServer) -> None:
    before = metric(server, "logbus_http_body_timeouts")
    sock = connect(server, "http")
    sock.sendall(b"POST /api/topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000\r\n\r\n")
    started = time.monotonic()  # the body's time runs from the end of the head
    elapsed, got = time_to_close(sock, started, b"{" + b" " * 64)
    assert_closed_after(elapsed, HTTP_BODY)
    assert got.startswith(b"HTTP/1.1 408 "), got
    assert metric(server, "logbus_http_body_timeouts") == before + 1


def test_http_keep_alive_connection_is_closed_when_idle(server: LogbusServer) -> None:
    before = metric(server, "logbus_http_idle_timeouts")
    sock = connect(server, "http")
    sock.sendall(b"GET /api/topics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\r\n")
    sock.settimeout(10)
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.endswith(b"]\n"):
        chunk = sock.recv(65536)
        assert chunk, answer
        answer += chunk
    started = time.monotonic()
    assert answer.startswith(b"HTTP/1.1 200 ")
    elapsed, got = time_to_close(sock, started)
    assert_closed_after(elapsed, HTTP_IDLE)
    assert got == b""
    assert metric(server, "logbus_http_idle_timeouts") == before + 1


def test_http_requests_in_time_keep_the_connection(server: LogbusServer) -> None:
    """Several requests on one connection, each well within the timeouts, the whole
    longer than any of them: the connection stays open (the deadlines move)."""
    sock = connect(server, "http")
    sock.settimeout(10)
    end = time.monotonic() + HANDSHAKE + HTTP_IDLE + 0.5
    n = 0
    while time.monotonic() < end or n < 3:
        sock.sendall(b"GET /api/topics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\r\n")
        answer = b""
        while not answer.endswith(b"]\n"):
            chunk = sock.recv(65536)
            assert chunk, f"closed after {n} requests"
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 ")
        n += 1
        select.select([sock], [], [], HTTP_IDLE / 3)  # idle, but less than the idle timeout
    sock.close()


def test_clients_that_complete_the_handshake_stay(server: LogbusServer) -> None:
    """pika and paho connect, then stay past the handshake timeout and still work."""
    import paho.mqtt.client as mqtt
    import pika

    params = pika.ConnectionParameters(*server.host_port("amqp"), heartbeat=0)
    amqp = pika.BlockingConnection(params)
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="stays")
    client.connect(*server.host_port("mqtt"), keepalive=60)
    client.loop_start()
    try:
        amqp.process_data_events(time_limit=HANDSHAKE + 0.5)  # waits on the socket
        assert amqp.is_open
        ch = amqp.channel()
        ch.queue_declare("stays")
        assert client.is_connected()
        assert client.publish("stays/t", b"x", qos=1).wait_for_publish(10) is None or True
        assert client.is_connected()
    finally:
        client.loop_stop()
        client.disconnect()
        amqp.close()


# -- Kafka: one request at a time ------------------------------------------------------------


def _frame(request: object, version: int, correlation: int) -> bytes:
    request.API_VERSION = version  # type: ignore[attr-defined]
    request.with_header(correlation_id=correlation, client_id="pipeline")  # type: ignore[attr-defined]
    return bytes(request.encode(header=True, framed=True))  # type: ignore[attr-defined]


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


def test_kafka_pipelined_requests_are_all_answered_in_order(server: LogbusServer) -> None:
    """A Fetch that waits (a long poll on an empty topic) and thirty-nine requests behind
    it, all in one write: every answer comes, in request order, none before the Fetch's,
    and the broker paused reading meanwhile (they arrived while an answer was pending)."""
    from kafka.protocol.consumer import FetchRequest, FetchResponse

    wait_ms = 300
    req = urllib.request.Request(server.http_url + "/api/topics", data=b'{"name": "long-poll"}', method="POST",
                                 headers={"Content-Type": "application/json", **ADMIN_AUTH})
    assert urllib.request.urlopen(req, timeout=10).status == 201
    before = metric(server, "logbus_kafka_muted_reads")
    T = FetchRequest.FetchTopic
    requests: list[tuple[object, object, int]] = [(FetchRequest(
        replica_id=-1, max_wait_ms=wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        topics=[T(topic="long-poll", partitions=[T.FetchPartition(partition=0, fetch_offset=0,
                                                                   partition_max_bytes=1 << 20)])]),
        FetchResponse, 4)]
    for i in range(1, 40):
        if i % 2:
            requests.append((MetadataRequest(version=1, topics=None), MetadataResponse, 1))
        else:
            requests.append((ApiVersionsRequest(version=2), ApiVersionsResponse, 2))
    sock = connect(server, "kafka")
    sock.settimeout(10)
    sent = time.monotonic()
    sock.sendall(b"".join(_frame(r, v, 100 + i) for i, (r, _, v) in enumerate(requests)))
    for i, (_, response_cls, version) in enumerate(requests):
        size = struct.unpack(">i", _read_exactly(sock, 4))[0]
        body = _read_exactly(sock, size)
        if i == 0:
            assert time.monotonic() - sent >= wait_ms / 1000 - EARLY  # the Fetch waited, the rest behind it
        assert struct.unpack_from(">i", body)[0] == 100 + i
        response_cls.decode(body, version=version, header=True)  # type: ignore[attr-defined]
    sock.close()
    assert metric(server, "logbus_kafka_muted_reads") == before + 1


def test_kafka_clients_pipelining_produce_and_consume(server: LogbusServer) -> None:
    """kafka-python with five requests in flight, and confluent-kafka: every record
    produced is acknowledged and read back in order."""
    from confluent_kafka import Consumer, Producer
    from kafka import KafkaProducer

    boot = server.addresses["kafka"]
    p = KafkaProducer(bootstrap_servers=boot, max_in_flight_requests_per_connection=5, linger_ms=0,
                      batch_size=512, acks="all")
    futures = [p.send("pipelined", str(i).encode()) for i in range(2000)]
    p.flush(30)
    assert [f.get(30).offset for f in futures] == list(range(2000))
    p.close()
    cp = Producer({"bootstrap.servers": boot, "linger.ms": 0, "batch.size": 1024})
    errors: list[object] = []
    for i in range(2000, 4000):
        cp.produce("pipelined", str(i).encode(), on_delivery=lambda e, m: e and errors.append(e))
    assert cp.flush(30) == 0 and not errors
    c = Consumer({"bootstrap.servers": boot, "group.id": "pipelined", "auto.offset.reset": "earliest",
                  "max.partition.fetch.bytes": 1024})
    c.subscribe(["pipelined"])
    got: list[int] = []
    deadline = time.monotonic() + 60
    while len(got) < 4000 and time.monotonic() < deadline:
        for m in c.consume(1000, 1.0):
            assert m.error() is None, m.error()
            got.append(int(m.value()))
    c.close()
    assert got == list(range(4000))


def test_kafka_client_reconnects_after_an_idle_close(server: LogbusServer) -> None:
    """What a client sees when idle: its connection closed; kafka-python connects again
    for its next request."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks="all")
    assert p.send("idle-then-busy", b"1").get(30).offset == 0
    before = metric(server, "logbus_kafka_idle_closes")
    deadline = time.monotonic() + KAFKA_IDLE + DEADLINE
    while metric(server, "logbus_kafka_idle_closes") == before:
        assert time.monotonic() < deadline, "the idle producer's connection was not closed"
        select.select([], [], [], 0.2)
    assert p.send("idle-then-busy", b"2").get(30).offset == 1
    p.close()
