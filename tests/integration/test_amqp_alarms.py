"""Resource alarms against a real `logbus serve`: the disk limit is raised above the
machine's free space over HTTP (PUT /api/limits), which sets the disk alarm for real,
then lowered again. pika and aio-pika see connection.blocked / connection.unblocked; a
publisher stops being read meanwhile, a consumer goes on. Logbus only: the limits are
changed through logbus's HTTP API."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import struct
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import aio_pika
import pika  # type: ignore[import-untyped]
import pytest
from pamqp import commands, frame, header
from pamqp.commands import Basic as AmqpBasic
from pamqp.heartbeat import Heartbeat
from pika.spec import Basic  # type: ignore[import-untyped]

from logbus.gateway.amqp.connection import BLOCKED_PROBE
from tests.integration.alarms import EVERY_BYTE, bytes_in, send_until_stalled, wait_for
from tests.integration.amqp_target import run
from tests.integration.mgmt import Mgmt
from tests.integration.test_amqp_bad_input import RawAmqp
from tests.serverproc import ADMIN_AUTH, LogbusServer

ABOVE_ANY_DISK = 2**60  # more free bytes than any filesystem here has: the disk alarm
BLOCKED_WAIT = 3.0  # how long a blocked publish is shown to wait (heartbeat 1 s: 2 missed)


@pytest.fixture
def server(logbus_server: Callable[..., LogbusServer]) -> LogbusServer:
    return logbus_server(args=["--disk-free-limit", "1"])


def call(server: LogbusServer, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    host, port = server.host_port("http")
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body).encode(), headers=ADMIN_AUTH)
        response = conn.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw.startswith((b"{", b"[")) else raw
    finally:
        conn.close()


def set_limits(server: LogbusServer, **limits: Any) -> dict[str, Any]:
    status, payload = call(server, "PUT", "/api/limits", limits)
    assert status == 200, payload
    return payload  # type: ignore[no-any-return]


def parameters(server: LogbusServer, **kwargs: Any) -> pika.ConnectionParameters:
    host, port = server.host_port("amqp")
    return pika.ConnectionParameters(
        host=host, port=port, credentials=pika.PlainCredentials("guest", "guest"),
        connection_attempts=1, socket_timeout=5, stack_timeout=15, blocked_connection_timeout=30,
        **kwargs,
    )


def pump(connection: pika.BlockingConnection, until: Callable[[], bool], timeout: float = 10) -> None:
    for _ in range(int(timeout / 0.05)):
        if until():
            return
        connection.process_data_events(time_limit=0.05)
    raise AssertionError(f"timed out after {timeout:g} s")


def test_limits_api(server: LogbusServer) -> None:
    status, limits = call(server, "GET", "/api/limits")
    assert status == 200
    assert set(limits) == {"memory_high_watermark", "memory_limit_bytes", "disk_free_limit",
                           "alarms", "memory_used_bytes", "disk_free_bytes"}
    assert (limits["memory_high_watermark"], limits["disk_free_limit"]) == (0.4, 1)  # the flag
    assert limits["alarms"] == [] and limits["memory_used_bytes"] > 0 and limits["disk_free_bytes"] > 0

    raised = set_limits(server, disk_free_limit=ABOVE_ANY_DISK, memory_high_watermark=0.9)
    assert raised["alarms"] == ["disk"] and raised["memory_high_watermark"] == 0.9
    assert raised["memory_limit_bytes"] > limits["memory_limit_bytes"]
    status, metrics = call(server, "GET", "/metrics")
    assert b'logbus_resource_alarm{resource="disk"} 1.0' in metrics
    assert b'logbus_resource_alarm{resource="memory"} 0.0' in metrics

    for body, code in [
        ({"disk_free_limit": -1}, "invalid_config"),
        ({"disk_free_limit": "50MB"}, "invalid_config"),
        ({"disk_free_limit": None}, "invalid_config"),
        ({"memory_high_watermark": 0, "disk_free_limit": 1}, "invalid_config"),
        ({"memory_high_watermark": 1.5}, "invalid_config"),
        ({"vm_memory_high_watermark": 0.5}, "bad_request"),
        ({}, "bad_request"),
        ([1], "bad_request"),
    ]:
        status, error = call(server, "PUT", "/api/limits", body)
        assert (status, error["error"]) == (400, code), body
        assert error["message"]
    _, unchanged = call(server, "GET", "/api/limits")  # a rejected PUT changed nothing
    assert (unchanged["disk_free_limit"], unchanged["alarms"]) == (ABOVE_ANY_DISK, ["disk"])

    assert set_limits(server, disk_free_limit=0)["alarms"] == []
    _, metrics = call(server, "GET", "/metrics")
    assert b'logbus_resource_alarm{resource="disk"} 0.0' in metrics


def test_pika_publisher_is_blocked_until_the_alarm_clears(server: LogbusServer) -> None:
    # heartbeat 1 s: a blocked connection is not read, and must not be dropped for it
    publisher = pika.BlockingConnection(parameters(server, heartbeat=1))
    consumer = pika.BlockingConnection(parameters(server))
    events: list[tuple[str, str]] = []
    publisher.add_on_connection_blocked_callback(
        lambda _conn, frame: events.append(("blocked", frame.method.reason)))
    publisher.add_on_connection_unblocked_callback(
        lambda _conn, _frame: events.append(("unblocked", "")))
    confirmed = threading.Event()
    errors: list[Exception] = []
    worker: threading.Thread | None = None
    try:
        pch = publisher.channel()
        pch.confirm_delivery()
        pch.queue_declare("alarms.pika")
        pch.basic_publish("", "alarms.pika", b"before")  # returns once confirmed

        assert set_limits(server, disk_free_limit=ABOVE_ANY_DISK)["alarms"] == ["disk"]
        pump(publisher, lambda: bool(events))
        assert events == [("blocked", "low on disk")]

        def publish() -> None:  # the publisher's connection is this thread's until it ends
            try:
                pch.basic_publish("", "alarms.pika", b"during")
                confirmed.set()
            except Exception as exc:  # noqa: BLE001  (reported by the test's thread)
                errors.append(exc)

        worker = threading.Thread(target=publish, daemon=True)
        worker.start()
        worker.join(BLOCKED_WAIT)
        assert worker.is_alive() and not errors, errors  # neither confirmed nor dropped

        cch = consumer.channel()  # a connection that never published is not blocked
        cch.queue_declare("alarms.consumer.declared")
        method, _, body = cch.basic_get("alarms.pika", auto_ack=True)
        assert isinstance(method, Basic.GetOk) and body == b"before"
        assert cch.basic_get("alarms.pika", auto_ack=True) == (None, None, None)  # not read

        set_limits(server, disk_free_limit=1)
        worker.join(10)
        assert confirmed.is_set(), errors
        pump(publisher, lambda: len(events) == 2)  # pika hands the event over only here
        assert events == [("blocked", "low on disk"), ("unblocked", "")]
        method, _, body = cch.basic_get("alarms.pika", auto_ack=True)
        assert isinstance(method, Basic.GetOk) and body == b"during"
        pch.basic_publish("", "alarms.pika", b"after")  # reading goes on as before
    finally:
        set_limits(server, disk_free_limit=1)  # a failed test must not leave pika blocked
        if worker is not None:
            worker.join(10)
        publisher.close()
        consumer.close()


def test_pika_first_publish_under_an_alarm_blocks(server: LogbusServer) -> None:
    """A connection that has not published yet is not blocked by the alarm; its first
    publish is handled, and then it is."""
    set_limits(server, disk_free_limit=ABOVE_ANY_DISK)
    connection = pika.BlockingConnection(parameters(server))
    events: list[str] = []
    connection.add_on_connection_blocked_callback(lambda _c, frame: events.append(frame.method.reason))
    connection.add_on_connection_unblocked_callback(lambda _c, _f: events.append("unblocked"))
    try:
        channel = connection.channel()
        channel.queue_declare("alarms.first")  # not a publish: answered under the alarm
        channel.basic_publish("", "alarms.first", b"first")  # no confirms: no wait
        pump(connection, lambda: bool(events))
        assert events == ["low on disk"]
        set_limits(server, disk_free_limit=1)
        pump(connection, lambda: len(events) == 2)
        assert events == ["low on disk", "unblocked"]
        assert channel.queue_declare("alarms.first", passive=True).method.message_count == 1
    finally:
        set_limits(server, disk_free_limit=1)
        connection.close()


def test_aio_pika_publish_waits_while_blocked(
    server: LogbusServer, caplog: pytest.LogCaptureFixture
) -> None:
    """aiormq keeps its blocked state to itself, but logs the reason and makes
    ``ready()`` wait while blocked."""
    host, port = server.host_port("amqp")
    caplog.set_level(logging.WARNING, logger="aiormq.connection")

    async def blocked(amqp: Any) -> bool:
        try:
            await asyncio.wait_for(amqp.ready(), 0.05)
        except TimeoutError:
            return True
        return False

    async def body() -> None:
        connection = await aio_pika.connect(f"amqp://guest:guest@{host}:{port}/", timeout=10)
        try:
            channel = await connection.channel()  # publisher confirms by default
            queue = await channel.declare_queue("alarms.aio")
            await channel.default_exchange.publish(aio_pika.Message(b"before"), "alarms.aio")
            amqp = connection.transport.connection  # type: ignore[union-attr]
            assert not await blocked(amqp)

            await asyncio.to_thread(set_limits, server, disk_free_limit=ABOVE_ANY_DISK)
            while not await blocked(amqp):
                pass  # bounded by run()'s deadline
            assert "low on disk" in caplog.text
            pending = asyncio.ensure_future(
                channel.default_exchange.publish(aio_pika.Message(b"during"), "alarms.aio"))
            done, _ = await asyncio.wait([pending], timeout=1.0)
            assert not done  # not confirmed while blocked

            await asyncio.to_thread(set_limits, server, disk_free_limit=1)
            assert isinstance(await asyncio.wait_for(pending, 10), AmqpBasic.Ack)
            assert not await blocked(amqp)
            got = await queue.get(no_ack=True, timeout=10)
            assert got.body == b"before"
            got = await queue.get(no_ack=True, timeout=10)
            assert got.body == b"during"
        finally:
            await asyncio.to_thread(set_limits, server, disk_free_limit=1)
            await connection.close()

    run(body())



def body_under_memory_alarm(server: LogbusServer, raw: RawAmqp, routing_key: str) -> tuple[str, bytes]:
    """On ``raw``: a channel, then the publish of a 90 MiB message and 2 MiB of its body,
    read by the broker; then the memory alarm set. Returns the client's address as the
    broker lists it, and one body frame to send more of."""
    raw.open()
    raw.open_channel(1)
    peer = "%s:%d" % raw.sock.getsockname()
    payload = raw.frame_max - 8
    piece = struct.pack(">BHI", 3, 1, payload) + b"\0" * payload + b"\xce"  # one body frame
    raw.send_method(1, commands.Basic.Publish(exchange="", routing_key=routing_key))
    raw.send(frame.marshal(header.ContentHeader(0, 90 << 20, commands.Basic.Properties()), 1))
    raw.send(piece * 16)
    wait_for(lambda: bytes_in(server, peer) >= 16 * len(piece))
    assert set_limits(server, memory_high_watermark=EVERY_BYTE)["alarms"] == ["memory"]
    return peer, piece


def test_an_unfinished_body_is_not_read_under_the_memory_alarm(server: LogbusServer) -> None:
    """A raw client in the middle of a 90 MiB body (its first publish): under the memory
    alarm the broker reads no more of it (its bytes_in stops while the client's socket
    buffers fill), and reads on once the alarm clears. Logbus's own counter of the
    connection's bytes is the evidence; the client has no connection.blocked capability."""
    host, port = server.host_port("amqp")
    raw = RawAmqp(SimpleNamespace(host=host, port=port))  # type: ignore[arg-type]
    try:
        peer, piece = body_under_memory_alarm(server, raw, "alarms.raw")
        rest = piece * 600  # 75 MiB more: never the whole body
        sent = send_until_stalled(raw.sock, rest)
        assert sent < len(rest)  # the broker stopped reading: only the socket buffers took some
        before = bytes_in(server, peer)
        set_limits(server, memory_high_watermark=0.9)
        wait_for(lambda: bytes_in(server, peer) > before)  # read again
    finally:
        set_limits(server, memory_high_watermark=0.9)
        raw.close()


def connected_peers(server: LogbusServer) -> set[str]:
    return {c["peer"] for c in Mgmt(server).call("GET", "/api/connections").json()}


def test_an_abandoned_unfinished_body_is_dropped_under_the_memory_alarm(server: LogbusServer) -> None:
    """A raw client (heartbeat 0, no connection.blocked capability) in the middle of a
    90 MiB body, blocked by the memory alarm, sends until its socket stalls: our receive
    window is full. Blocked and alive, it is kept, and gets a heartbeat frame (which a
    client without heartbeats must discard). Then it closes, having read all it got: its
    FIN waits in its kernel behind the bytes our window refuses, and our side stays
    ESTABLISHED. The next heartbeat frame is answered with a reset, and the connection
    is dropped, with the body it held."""
    host, port = server.host_port("amqp")
    raw = RawAmqp(SimpleNamespace(host=host, port=port))  # type: ignore[arg-type]
    try:
        peer, piece = body_under_memory_alarm(server, raw, "alarms.abandoned")
        rest = piece * 600
        assert send_until_stalled(raw.sock, rest) < len(rest)  # our window and its buffer are full

        channel, beat = raw.read_frame(timeout=BLOCKED_PROBE + 5)
        assert (channel, type(beat), raw.buf) == (0, Heartbeat, b"")
        assert peer in connected_peers(server)  # alive: kept, however long the alarm lasts
        raw.close()  # nothing unread: a FIN, which our full window holds back
        wait_for(lambda: peer not in connected_peers(server), BLOCKED_PROBE + 10)
        assert "closed by its peer while not read" in server.log_text()
    finally:
        set_limits(server, memory_high_watermark=0.9)
        raw.close()


def test_pika_without_heartbeats_discards_the_probes_of_a_blocked_connection(
    server: LogbusServer, caplog: pytest.LogCaptureFixture
) -> None:
    """pika with heartbeat 0, blocked: the heartbeat frames that look for a client gone
    are discarded (AMQP 0-9-1, 4.2.7; pika logs them), and it publishes on once the
    alarm clears."""
    caplog.set_level(logging.WARNING, logger="pika.connection")
    connection = pika.BlockingConnection(parameters(server, heartbeat=0))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("alarms.probed")
        channel.basic_publish("", "alarms.probed", b"before")
        set_limits(server, disk_free_limit=ABOVE_ANY_DISK)
        pump(connection, lambda: "heartbeat frame without a heartbeat checker" in caplog.text,
             timeout=BLOCKED_PROBE + 5)
        assert connection.is_open
        set_limits(server, disk_free_limit=1)
        channel.basic_publish("", "alarms.probed", b"after")  # returns once confirmed
        assert channel.queue_declare("alarms.probed", passive=True).method.message_count == 2
    finally:
        set_limits(server, disk_free_limit=1)
        connection.close()
