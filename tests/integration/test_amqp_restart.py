"""The broker restarts under AMQP clients: confirmed persistent messages in durable queues
survive a clean restart and a kill -9, exactly once; unacked deliveries come back
redelivered and acked ones never do; durable exchanges and bindings stay, transient
queues go; connected clients are told (320 CONNECTION_FORCED); aio-pika's robust
connection reconnects and keeps consuming.

Against RabbitMQ the node is stopped and booted again in place (same node name, port and
mnesia directory, see amqp_target.RabbitNode), which takes 10-20 s a time."""

from __future__ import annotations

import asyncio
import contextlib

import aio_pika
import pytest
from aio_pika import ExchangeType
from aio_pika.abc import AbstractConnection, AbstractIncomingMessage
from aiormq.exceptions import AMQPConnectionError, ChannelNotFoundEntity

from tests.integration import amqp_target
from tests.integration.amqp_target import AmqpBroker, connect, drain, publish_confirmed, run, unique

amqp_broker = amqp_target.amqp_broker  # the fixture, by the name tests ask for

PERSISTENT = aio_pika.DeliveryMode.PERSISTENT
RESTART_BUDGET = 150.0  # the test body, restarts included (RabbitMQ needs 10-20 s each)


async def close_quietly(connection: AbstractConnection) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(connection.close(), 10)


async def consume_exactly(connection: AbstractConnection, queue_name: str, count: int,
                          prefetch: int = 50) -> list[AbstractIncomingMessage]:
    """Consume (and ack) ``count`` messages, then make sure no more arrive."""
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=prefetch)
    q = await channel.declare_queue(queue_name, passive=True)
    got: list[AbstractIncomingMessage] = []
    done = asyncio.Event()

    async def on_message(message: AbstractIncomingMessage) -> None:
        got.append(message)
        await message.ack()
        if len(got) >= count:
            done.set()

    tag = await q.consume(on_message)
    try:
        await asyncio.wait_for(done.wait(), 20)
    except TimeoutError:
        raise AssertionError(f"{len(got)} of {count} messages arrived from {queue_name}") from None
    await asyncio.sleep(0.5)  # anything extra (a duplicate) would arrive by now
    await q.cancel(tag)
    await channel.close()
    return got


def test_confirmed_messages_survive_restart(amqp_broker: AmqpBroker) -> None:
    count = 200
    names = {k: unique(k) for k in ("durable", "transient", "exchange")}

    async def before() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel(publisher_confirms=True)
            ex = await channel.declare_exchange(names["exchange"], ExchangeType.TOPIC, durable=True)
            durable = await channel.declare_queue(names["durable"], durable=True)
            await durable.bind(ex, "keep.#")
            await channel.declare_queue(names["transient"], durable=False)
            await publish_confirmed(ex, "keep.me", [f"m{i}".encode() for i in range(count)],
                                    delivery_mode=PERSISTENT)

    async def after() -> None:
        connection = await connect(amqp_broker)
        try:
            got = await consume_exactly(connection, names["durable"], count)
            assert [m.body for m in got] == [f"m{i}".encode() for i in range(count)]
            # never delivered before the restart: not redelivered
            assert not any(m.redelivered for m in got)
            assert all(m.routing_key == "keep.me" and m.exchange == names["exchange"] for m in got)

            channel = await connection.channel()
            # the durable exchange and its binding came back
            ex = await channel.declare_exchange(names["exchange"], ExchangeType.TOPIC, passive=True)
            await publish_confirmed(ex, "keep.again", [b"routed"])
            assert [m.body for m in await drain(await channel.get_queue(names["durable"]))] == [b"routed"]
            # the transient queue did not
            with pytest.raises(ChannelNotFoundEntity):
                await channel.declare_queue(names["transient"], passive=True)
            channel = await connection.channel()
            await channel.queue_delete(names["durable"])
            await channel.exchange_delete(names["exchange"])
        finally:
            await close_quietly(connection)

    run(before())
    amqp_broker.restart()
    run(after(), RESTART_BUDGET)


def test_unacked_come_back_redelivered_after_restart(amqp_broker: AmqpBroker) -> None:
    """Ten delivered (prefetch 10), the first five acked, the broker restarted with the
    consumer still connected: exactly the other five come back, redelivered."""
    name = unique("redeliver")

    async def body() -> None:
        connection = await connect(amqp_broker)
        closed: list[BaseException | None] = []
        connection.close_callbacks.add(lambda _conn, exc=None: closed.append(exc))
        try:
            channel = await connection.channel(publisher_confirms=True)
            q = await channel.declare_queue(name, durable=True)
            await publish_confirmed(channel.default_exchange, name,
                                    [f"m{i}".encode() for i in range(10)], delivery_mode=PERSISTENT)
            await channel.set_qos(prefetch_count=10)
            deliveries: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
            await q.consume(deliveries.put)
            got = [await asyncio.wait_for(deliveries.get(), 10) for _ in range(10)]
            assert [(m.body, m.redelivered) for m in got] == [(f"m{i}".encode(), False) for i in range(10)]
            for m in got[:5]:
                await m.ack()
            # a synchronous method on the same channel: the broker has taken the acks
            await channel.declare_queue(name, passive=True)

            await asyncio.to_thread(amqp_broker.restart)
            for _ in range(100):  # the broker told us it was going (or just went)
                if closed:
                    break
                await asyncio.sleep(0.05)
            assert closed, "the connection did not notice the restart"
            exc = closed[0]
            # RabbitMQ: Connection.Close 320 "CONNECTION_FORCED - broker forced connection
            # closure with reason 'shutdown'"; a socket that just drops would be a plain
            # connection error without a reply code
            assert isinstance(exc, AMQPConnectionError) and exc.args[0] == 320, repr(exc)
        finally:
            await close_quietly(connection)

        connection = await connect(amqp_broker)
        try:
            again = await consume_exactly(connection, name, 5)
            assert [(m.body, m.redelivered) for m in again] == [(f"m{i}".encode(), True) for i in range(5, 10)]
            channel = await connection.channel()
            await channel.queue_delete(name)
        finally:
            await close_quietly(connection)

    run(body(), RESTART_BUDGET)


def test_confirmed_messages_survive_kill(amqp_broker: AmqpBroker) -> None:
    """A confirm means on disk: SIGKILL right after the last confirm loses nothing."""
    count = 300
    name = unique("killed")

    async def before() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.declare_queue(name, durable=True)
            await publish_confirmed(channel.default_exchange, name,
                                    [f"k{i}".encode() for i in range(count)], delivery_mode=PERSISTENT)
            # consume and ack the first ten: acked before the kill, though an ack is not
            # confirmed, so they may come back (at-least-once); the rest must
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=10)
            q = await channel.declare_queue(name, passive=True)
            for _ in range(10):
                m = await q.get(timeout=10)
                await m.ack()

    async def after() -> None:
        connection = await connect(amqp_broker)
        try:
            channel = await connection.channel()
            got = [m.body for m in await drain(await channel.declare_queue(name, passive=True))]
            expected = [f"k{i}".encode() for i in range(count)]
            assert got == expected[len(expected) - len(got):], "lost, duplicated or reordered"
            assert len(got) >= count - 10, f"only {len(got)} of the {count - 10} unacked survived"
            await channel.queue_delete(name)
        finally:
            await close_quietly(connection)

    run(before())
    amqp_broker.kill()
    run(after(), RESTART_BUDGET)


def test_robust_connection_keeps_consuming_across_restart(amqp_broker: AmqpBroker) -> None:
    name = unique("robust")

    async def body() -> None:
        connection = await aio_pika.connect_robust(amqp_broker.url, timeout=10, reconnect_interval=0.5)
        reconnected = asyncio.Event()
        connection.reconnect_callbacks.add(lambda *_: reconnected.set())
        try:
            channel = await connection.channel(publisher_confirms=True)
            q = await channel.declare_queue(name, durable=True)
            received: list[bytes] = []
            arrived = asyncio.Event()

            async def on_message(message: AbstractIncomingMessage) -> None:
                received.append(message.body)
                await message.ack()
                arrived.set()

            await q.consume(on_message)

            async def publish_and_wait(bodies: list[bytes]) -> None:
                await publish_confirmed(channel.default_exchange, name, bodies, delivery_mode=PERSISTENT)
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 20
                while not set(bodies) <= set(received):
                    arrived.clear()
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise AssertionError(f"consumer got {received}, waiting for {bodies}")
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(arrived.wait(), remaining)

            await publish_and_wait([b"before1", b"before2"])
            await asyncio.to_thread(amqp_broker.restart)
            await asyncio.wait_for(reconnected.wait(), 60)
            await publish_and_wait([b"after1", b"after2", b"after3"])
            assert received == [b"before1", b"before2", b"after1", b"after2", b"after3"]
            await channel.queue_delete(name)
        finally:
            await close_quietly(connection)

    run(body(), RESTART_BUDGET)
