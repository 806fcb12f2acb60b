"""The AMQP read linger (gateway/amqp/protocol.py, decision 0008) against real clients:
a pipelining publisher is read in pauses and loses nothing; a client that waits for
each confirm is never paused; ``--amqp-read-linger-ms 0`` turns it off. The pauses are
counted by ``logbus_amqp_read_lingers_total``; no test asserts a time."""

from __future__ import annotations

import asyncio
import http.client
import re
from collections.abc import Callable

import aio_pika
import pika

from tests.integration.amqp_target import run
from tests.serverproc import LogbusServer

PIPELINED = 1000


def lingers(server: LogbusServer) -> float:
    host, port = server.host_port("http")
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    found = re.search(r"^logbus_amqp_read_lingers_total (\S+)$", text, re.M)
    assert found, "logbus_amqp_read_lingers_total missing from /metrics"
    return float(found.group(1))


async def publish_pipelined(server: LogbusServer, queue_name: str) -> list[bytes]:
    """PIPELINED publishes in flight at once with confirms; then consume them all."""
    host, port = server.host_port("amqp")
    connection = await aio_pika.connect(f"amqp://guest:guest@{host}:{port}/")
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        queue = await channel.declare_queue(queue_name, durable=True)
        bodies = [str(i).encode() for i in range(PIPELINED)]
        await asyncio.gather(*(channel.default_exchange.publish(
            aio_pika.Message(b, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), routing_key=queue_name)
            for b in bodies))
        got: list[bytes] = []
        async with queue.iterator() as it:
            async for message in it:
                async with message.process():
                    got.append(message.body)
                if len(got) == PIPELINED:
                    break
        return got


def test_pipelined_publisher_is_read_in_pauses_and_loses_nothing(
        logbus_server: Callable[..., LogbusServer]) -> None:
    server = logbus_server()
    got = run(publish_pipelined(server, "linger-pipelined"))
    assert got == [str(i).encode() for i in range(PIPELINED)]  # every one, in order
    assert lingers(server) > 0


def test_linger_off(logbus_server: Callable[..., LogbusServer]) -> None:
    server = logbus_server(args=["--amqp-read-linger-ms", "0"])
    got = run(publish_pipelined(server, "linger-off"))
    assert len(got) == PIPELINED
    assert lingers(server) == 0


def test_a_client_waiting_for_each_confirm_is_never_paused(
        logbus_server: Callable[..., LogbusServer]) -> None:
    server = logbus_server()
    host, port = server.host_port("amqp")
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        host=host, port=port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("linger-sync", durable=True)
        for i in range(50):
            channel.basic_publish("", "linger-sync", str(i).encode(),
                                  pika.BasicProperties(delivery_mode=2), mandatory=True)
        bodies = []
        for _ in range(50):
            _method, _props, body = channel.basic_get("linger-sync", auto_ack=True)
            bodies.append(body)
        assert bodies == [str(i).encode() for i in range(50)]
    finally:
        connection.close()
    assert lingers(server) == 0
