"""Publishes the log refuses, and large messages, with real AMQP clients.

A publish the log refuses (here: over the max.message.bytes of the topic behind its
exchange) is nacked on a confirm channel, logged, and leaves no trace in any queue: the
next publish neither takes its place nor is delivered twice. Bodies up to the AMQP
``max_message_size`` (RabbitMQ's 128 MiB by default, ``--amqp-max-message-size``) are
accepted whatever the log's tick batch is; one byte more closes the channel with 406
PRECONDITION_FAILED naming both sizes, as RabbitMQ does, and the connection stays usable.
"""

from __future__ import annotations

import asyncio
import hashlib

import aio_pika
import aiormq
import pytest
from aiormq.exceptions import ChannelPreconditionFailed
from pamqp.commands import Basic

from tests.integration import amqp_target
from tests.integration.amqp_target import AmqpBroker, connect, drain, run, unique
from tests.integration.mgmt import Mgmt
from tests.serverproc import LogbusServer

amqp_broker = amqp_target.amqp_broker

MiB = 1 << 20


def _topic_with_max(server: LogbusServer, name: str, max_bytes: int) -> None:
    reply = Mgmt(server).call("POST", "/api/topics",
                                    {"name": name, "config": {"max.message.bytes": max_bytes}})
    assert reply.status == 201, reply


def _amqp_url(server: LogbusServer) -> str:
    host, port = server.host_port("amqp")
    return f"amqp://guest:guest@{host}:{port}/"


def test_a_refused_publish_leaves_no_trace_with_confirms(logbus_server) -> None:  # type: ignore[no-untyped-def]
    server = logbus_server()
    _topic_with_max(server, "small-x", 2000)

    async def body() -> None:
        connection = await aio_pika.connect(_amqp_url(server), timeout=10)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            exchange = await channel.declare_exchange("small-x", aio_pika.ExchangeType.DIRECT)
            queue = await channel.declare_queue("refusals", durable=True)
            await queue.bind(exchange, "k")
            with pytest.raises(aio_pika.exceptions.DeliveryError) as refused:
                await exchange.publish(aio_pika.Message(b"x" * 5000), "k", timeout=10)
            assert isinstance(refused.value.frame, Basic.Nack)
            ok = await exchange.publish(aio_pika.Message(b"small"), "k", timeout=10)
            assert isinstance(ok, Basic.Ack)
            declared = await channel.declare_queue("refusals", passive=True)
            assert declared.declaration_result.message_count == 1
            assert [m.body for m in await drain(queue)] == [b"small"]

    run(body())
    assert "refused" in server.log_text() and "small-x" in server.log_text()
    server.restart()

    async def after_restart() -> None:
        connection = await aio_pika.connect(_amqp_url(server), timeout=10)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue("refusals", durable=True)
            assert [m.body for m in await drain(queue)] == []

    run(after_restart())


def test_a_refused_publish_without_confirms_is_logged_and_not_queued(logbus_server) -> None:  # type: ignore[no-untyped-def]
    server = logbus_server()
    _topic_with_max(server, "small-y", 2000)

    async def body() -> None:
        connection = await aio_pika.connect(_amqp_url(server), timeout=10)
        async with connection:
            channel = await connection.channel(publisher_confirms=False)
            exchange = await channel.declare_exchange("small-y", aio_pika.ExchangeType.FANOUT)
            queue = await channel.declare_queue("plain", durable=True)
            await queue.bind(exchange, "")
            for i in range(3):
                await exchange.publish(aio_pika.Message(b"big" * 1000), "")
                await exchange.publish(aio_pika.Message(f"s{i}".encode()), "")
            # a confirm channel behind them: once its publish is acked, the others were handled
            confirming = await connection.channel(publisher_confirms=True)
            await confirming.default_exchange.publish(aio_pika.Message(b"fence"), "plain", timeout=10)
            assert [m.body for m in await drain(queue)] == [b"s0", b"s1", b"s2", b"fence"]

    run(body())
    assert server.log_text().count("refused") >= 3


def test_bodies_past_the_log_tick_batch_publish_and_consume(amqp_broker: AmqpBroker) -> None:
    """Large bodies alone and among small ones on a confirm channel; consumed after a
    restart too (read back from the log, not from memory)."""
    sizes = [300_000, 256 * 1024 + 1, 5 * MiB, 20 * MiB]
    bodies = [hashlib.sha256(str(n).encode()).digest() * (n // 32) + b"!" * (n % 32) for n in sizes]
    mixed = [b"a", bodies[0], b"b", bodies[2], b"c"]
    name = unique("large")

    async def publish() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel(publisher_confirms=True)
            q = await channel.declare_queue(name, durable=True)
            for b in bodies:  # one at a time, and then together with small ones around them
                assert isinstance(await channel.default_exchange.publish(
                    aio_pika.Message(b, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), q.name, timeout=60),
                    Basic.Ack)
            results = await asyncio.gather(*(
                channel.default_exchange.publish(
                    aio_pika.Message(b, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), q.name, timeout=60)
                for b in mixed))
            assert all(isinstance(r, Basic.Ack) for r in results), results

    async def consume(delete: bool) -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=2 if delete else 0)  # 0: all of them, unacked
            q = await channel.declare_queue(name, durable=True)
            got: list[bytes] = []
            async with q.iterator() as it:
                async for m in it:
                    got.append(m.body)
                    if delete:
                        await m.ack()
                    if len(got) == len(bodies) + len(mixed):
                        break
            assert [len(b) for b in got] == [len(b) for b in bodies + mixed]
            assert got == bodies + mixed
            if delete:
                await q.delete(if_unused=False, if_empty=False)

    run(publish(), timeout=120)
    run(consume(delete=False), timeout=120)  # not acked: requeued at close
    amqp_broker.restart()
    run(consume(delete=True), timeout=120)


def test_one_byte_over_max_message_size_closes_the_channel_with_406(logbus_server) -> None:  # type: ignore[no-untyped-def]
    limit = 128 * MiB
    server = logbus_server()

    async def body() -> None:
        connection = await aiormq.connect(_amqp_url(server))
        try:
            channel = await connection.channel()
            await channel.queue_declare("big", durable=True)
            with pytest.raises(ChannelPreconditionFailed) as closed:
                await channel.basic_publish(b"\0" * (limit + 1), routing_key="big")
                await channel.queue_declare("big", passive=True)  # the close arrives by now
            assert str(closed.value) == (
                f"PRECONDITION_FAILED - message size {limit + 1} is larger than configured max size {limit}")
            again = await connection.channel()  # the connection is still usable
            ok = await again.queue_declare("big", passive=True)
            assert ok.message_count == 0
        finally:
            await connection.close()

    run(body(), timeout=120)
    assert "larger than configured max size" in server.log_text()


def test_max_message_size_is_a_setting(logbus_server) -> None:  # type: ignore[no-untyped-def]
    server = logbus_server(args=["--amqp-max-message-size", "1000"])

    async def body() -> None:
        connection = await aiormq.connect(_amqp_url(server))
        try:
            channel = await connection.channel(publisher_confirms=True)
            await channel.queue_declare("q")
            await channel.basic_publish(b"x" * 1000, routing_key="q")
            with pytest.raises(ChannelPreconditionFailed, match="message size 1001 is larger than configured"
                                                                " max size 1000"):
                await channel.basic_publish(b"x" * 1001, routing_key="q")
        finally:
            await connection.close()

    run(body())


def test_accepted_and_refused_publishes_held_by_an_alarm(logbus_server) -> None:  # type: ignore[no-untyped-def]
    """Publishes made while a disk alarm blocks the connection arrive together once it
    clears (one read, one publish run): the refused ones are nacked, the accepted ones
    acked and queued in order, with nothing else, before and after a restart."""
    server = logbus_server(args=["--disk-free-limit", "1"])
    _topic_with_max(server, "small-z", 2000)
    mgmt = Mgmt(server)
    bodies = [b"a", b"B" * 5000, b"b", b"C" * 5000, b"c"]

    async def body() -> None:
        connection = await aio_pika.connect(_amqp_url(server), timeout=10)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            exchange = await channel.declare_exchange("small-z", aio_pika.ExchangeType.FANOUT)
            queue = await channel.declare_queue("held", durable=True)
            await queue.bind(exchange, "")
            await exchange.publish(aio_pika.Message(b"first"), "", timeout=10)  # blocks need a publisher
            reply = await asyncio.to_thread(mgmt.call, "PUT", "/api/limits", {"disk_free_limit": 2**60})
            assert reply.status == 200, reply
            amqp = connection.transport.connection  # type: ignore[union-attr]
            while True:  # bounded by run()'s deadline
                try:
                    await asyncio.wait_for(amqp.ready(), 0.05)
                except TimeoutError:
                    break
            pending = [asyncio.ensure_future(exchange.publish(aio_pika.Message(b), "", timeout=30))
                       for b in bodies]
            done, _ = await asyncio.wait(pending, timeout=0.5)
            assert not done
            reply = await asyncio.to_thread(mgmt.call, "PUT", "/api/limits", {"disk_free_limit": 1})
            assert reply.status == 200, reply
            results = await asyncio.gather(*pending, return_exceptions=True)
            assert [type(r).__name__ for r in results] == ["Ack", "DeliveryError", "Ack", "DeliveryError", "Ack"]
            assert [m.body for m in await drain(queue)] == [b"first", b"a", b"b", b"c"]
            await exchange.publish(aio_pika.Message(b"last"), "", timeout=10)

    run(body())
    server.restart()

    async def after() -> None:
        connection = await aio_pika.connect(_amqp_url(server), timeout=10)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue("held", durable=True)
            assert [m.body for m in await drain(queue)] == [b"last"]

    run(after())
