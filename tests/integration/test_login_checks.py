"""A password is checked off the reactor (scrypt on the broker's password thread), so a
login's answer may come turns after the client asked. What a client sends meanwhile waits
and is acted on only once the login is: MQTT lets a client send packets before its CONNACK
(and a refused CONNECT's followers must not be processed, MQTT 3.1.4), an AMQP client may
pipeline its whole handshake. Raw sockets against a real `logbus serve`; a watcher with
the real paho client."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pika  # type: ignore[import-untyped]
import pika.exceptions  # type: ignore[import-untyped]
import pytest
from pamqp import body as amqp_body
from pamqp import commands as C
from pamqp import frame, header

from logbus.gateway.mqtt import ConnAck, Connect, PubAck, Publish, SubAck, Subscribe, Subscription
from logbus.gateway.mqtt.encoder import encode
from tests.integration.mgmt import Mgmt
from tests.integration.mqtt_clients import Paho, Raw, unique
from tests.serverproc import LogbusServer, module_server

WAIT = 15


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "login-checks", listeners={"kafka": "off"})


def new_user(server: LogbusServer) -> tuple[str, str]:
    """A user whose password no login has checked yet: its first login runs the KDF."""
    name, password = unique("user"), unique("pw")
    m = Mgmt(server)
    m.add_user(name, password)
    m.grant("/", name)
    return name, password


@pytest.mark.parametrize("version", [4, 5])
def test_mqtt_packets_sent_before_the_connack_are_handled_after_the_login(server: LogbusServer,
                                                                          version: int) -> None:
    name, password = new_user(server)
    topic = f"early/{unique('t')}"
    watcher = Paho(server, unique("watch"), version=5)
    watcher.subscribe(topic, 1)
    raw = Raw(server, version=version)
    try:
        raw.send_bytes(encode(Connect(unique("c"), version, username=name, password=password.encode()), version)
                       + encode(Publish(topic, b"sent before the CONNACK", 1, packet_id=1), version)
                       + encode(Subscribe(2, (Subscription(topic, 1),)), version))
        assert raw.expect(ConnAck).reason_code == 0
        answers = {type(p): p for p in (raw.recv(), raw.recv())}  # the PUBACK waits for the disk
        assert answers[PubAck].packet_id == 1 and answers[SubAck].packet_id == 2
        assert watcher.next_message().payload == b"sent before the CONNACK"
    finally:
        raw.close()
        watcher.close()


@pytest.mark.parametrize("version", [4, 5])
def test_mqtt_packets_after_a_refused_connect_are_not_processed(server: LogbusServer, version: int) -> None:
    name, _ = new_user(server)
    topic = f"early/{unique('t')}"
    watcher = Paho(server, unique("watch"), version=5)
    watcher.subscribe(topic, 1)
    raw = Raw(server, version=version)
    try:
        raw.send_bytes(encode(Connect(unique("c"), version, username=name, password=b"wrong"), version)
                       + encode(Publish(topic, b"must not arrive", 1, packet_id=1), version))
        got = raw.expect_closed()
        assert len(got) == 1 and isinstance(got[0], ConnAck)
        assert got[0].reason_code == (0x86 if version == 5 else 4)  # bad user name or password
        watcher.assert_quiet()
    finally:
        raw.close()
        watcher.close()


def amqp_pipelined(server: LogbusServer, user: str, password: str, queue: str) -> list[Any]:
    """The whole AMQP handshake, a queue.declare and a publish in one write, before the
    server has said anything; the methods the server answers, until it closes or the
    declare is answered."""
    publish = C.Basic.Publish(exchange="", routing_key=queue)
    payload = b"pipelined"
    data = (b"AMQP\x00\x00\x09\x01"
            + frame.marshal(C.Connection.StartOk({}, "PLAIN", f"\0{user}\0{password}"), 0)
            + frame.marshal(C.Connection.TuneOk(2047, 131072, 0), 0)
            + frame.marshal(C.Connection.Open("/"), 0)
            + frame.marshal(C.Channel.Open(), 1)
            + frame.marshal(C.Queue.Declare(queue=queue), 1)
            + frame.marshal(publish, 1)
            + frame.marshal(header.ContentHeader(0, len(payload)), 1)
            + frame.marshal(amqp_body.ContentBody(payload), 1))
    host, port = server.host_port("amqp")
    methods: list[Any] = []
    with socket.create_connection((host, port), timeout=WAIT) as sock:
        sock.sendall(data)
        buffer = b""
        while not any(isinstance(m, (C.Queue.DeclareOk, C.Connection.Close)) for m in methods):
            chunk = sock.recv(65536)
            if not chunk:
                break
            buffer += chunk
            while buffer:
                try:
                    used, _, f = frame.unmarshal(buffer)
                except Exception:  # an unfinished frame: read more
                    break
                buffer = buffer[used:]
                methods.append(f)
    return methods


def queue_depth(server: LogbusServer, queue: str) -> int | None:
    """Messages ready in ``queue``; None when there is no such queue."""
    host, port = server.host_port("amqp")
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
    except pika.exceptions.ChannelClosedByBroker as e:
        assert e.reply_code == 404
        return None
    finally:
        if conn.is_open:
            conn.close()


def test_amqp_a_pipelined_handshake_waits_for_the_password_check(server: LogbusServer) -> None:
    name, password = new_user(server)
    queue = unique("pipelined")
    methods = amqp_pipelined(server, name, password, queue)
    assert [type(m) for m in methods] == [C.Connection.Start, C.Connection.Tune, C.Connection.OpenOk,
                                          C.Channel.OpenOk, C.Queue.DeclareOk]
    assert queue_depth(server, queue) == 1  # the publish that came with the handshake, routed


def test_amqp_nothing_after_a_refused_login_is_acted_on(server: LogbusServer) -> None:
    name, _ = new_user(server)
    queue = unique("refused")
    methods = amqp_pipelined(server, name, "wrong", queue)
    assert [type(m) for m in methods] == [C.Connection.Start, C.Connection.Close]
    assert methods[-1].reply_code == 403
    assert queue_depth(server, queue) is None  # never declared
