"""AMQP queue semantics with aio-pika: publisher confirms, basic.get (get-ok with
message_count, get-empty), prefetch, reject/nack with requeue and the redelivered flag,
purge and delete counts, per-queue TTL and per-message expiration, priorities,
transactions, mandatory publishes returned with basic.return."""

from __future__ import annotations

import asyncio

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue
from aiormq.abc import DeliveredMessage
from aiormq.exceptions import ChannelPreconditionFailed, PublishError
from pamqp.commands import Basic, Queue

from tests.integration import amqp_target
from tests.integration.amqp_target import (
    AmqpBroker,
    connect,
    drain,
    drain_bodies,
    publish_confirmed,
    run,
    unique,
)

amqp_broker = amqp_target.amqp_broker  # the fixture, by the name tests ask for

PERSISTENT = aio_pika.DeliveryMode.PERSISTENT


async def message_count(channel: AbstractChannel, name: str) -> int:
    """queue.declare passive: the queue's ready messages (not the unacked ones)."""
    declared = await channel.declare_queue(name, passive=True)
    result = declared.declaration_result
    assert isinstance(result, Queue.DeclareOk) and result.message_count is not None
    return result.message_count


async def publish_bodies(channel: AbstractChannel, queue: AbstractQueue, bodies: list[bytes]) -> None:
    await publish_confirmed(channel.default_exchange, queue.name, bodies)


def test_publisher_confirms(amqp_broker: AmqpBroker) -> None:
    count = 300

    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel(publisher_confirms=True)
            q = await channel.declare_queue(unique("confirms"), durable=True)
            bodies = [f"m{i}".encode() for i in range(count)]
            results = await asyncio.gather(*(
                channel.default_exchange.publish(
                    aio_pika.Message(b, delivery_mode=PERSISTENT), q.name, timeout=10
                ) for b in bodies
            ))
            assert all(isinstance(r, Basic.Ack) for r in results), {type(r) for r in results}
            assert await message_count(channel, q.name) == count
            got = await drain(q)
            assert [m.body for m in got] == bodies  # one channel, one queue: in order
            assert all(m.delivery_mode == PERSISTENT for m in got)
            await q.delete(if_unused=False, if_empty=False)

    run(body())


def test_basic_get(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            q = await channel.declare_queue(unique("get"))
            assert await q.get(fail=False) is None  # basic.get-empty

            await publish_bodies(channel, q, [b"a", b"b", b"c"])
            first = await q.get(no_ack=False, timeout=10)
            assert (first.body, first.message_count, first.redelivered) == (b"a", 2, False)
            assert first.routing_key == q.name and first.exchange == ""
            second = await q.get(no_ack=True, timeout=10)
            assert (second.body, second.message_count) == (b"b", 1)
            # the unacked "a" is not counted as ready
            assert await message_count(channel, q.name) == 1
            await first.ack()
            third = await q.get(no_ack=False, timeout=10)
            assert (third.body, third.message_count) == (b"c", 0)
            assert await q.get(fail=False) is None
            await third.ack()
            # acks on basic.get deliveries are real: closing the channel requeues nothing
            await channel.close()
            channel = await connection.channel()
            assert await message_count(channel, q.name) == 0
            await channel.queue_delete(q.name)

    run(body())


def test_prefetch_limits_unacked(amqp_broker: AmqpBroker) -> None:
    total, prefetch = 20, 3

    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            pub = await connection.channel()
            q_name = unique("prefetch")
            await pub.declare_queue(q_name)
            await publish_confirmed(pub.default_exchange, q_name, [str(i).encode() for i in range(total)])

            channel = await connection.channel()
            await channel.set_qos(prefetch_count=prefetch)
            q = await channel.declare_queue(q_name, passive=True)
            held: list[AbstractIncomingMessage] = []
            seen: list[bytes] = []
            most = 0
            arrived = asyncio.Event()

            async def on_message(message: AbstractIncomingMessage) -> None:
                nonlocal most
                held.append(message)
                seen.append(message.body)
                most = max(most, len(held))
                arrived.set()

            await q.consume(on_message)
            await asyncio.sleep(0.5)  # time enough for a broker that ignores qos to overshoot
            assert len(held) == prefetch, [m.body for m in held]
            while len(seen) < total:
                arrived.clear()
                await held.pop(0).ack()
                await asyncio.wait_for(arrived.wait(), 10)
                await asyncio.sleep(0.02)
                assert len(held) <= prefetch
            for m in held:
                await m.ack()
            assert most == prefetch
            assert seen == [str(i).encode() for i in range(total)]
            await channel.queue_delete(q_name)

    run(body())


def test_reject_and_nack_requeue_set_redelivered(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            q = await channel.declare_queue(unique("requeue"))
            await publish_bodies(channel, q, [b"m"])

            first = await q.get(timeout=10)
            assert (first.body, first.redelivered) == (b"m", False)
            await first.reject(requeue=True)
            second = await q.get(timeout=10)
            assert (second.body, second.redelivered) == (b"m", True)
            await second.nack(requeue=True)
            third = await q.get(timeout=10)
            assert (third.body, third.redelivered) == (b"m", True)
            await third.reject(requeue=False)  # no dead-letter exchange: dropped
            assert await q.get(fail=False) is None

            # a consumer sees the same flag; nack(multiple) requeues every earlier
            # delivery too, and requeued messages keep their order in the queue
            await publish_bodies(channel, q, [b"a", b"b", b"c"])
            deliveries: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
            tag = await q.consume(deliveries.put)
            got = [await asyncio.wait_for(deliveries.get(), 10) for _ in range(3)]
            assert [(m.body, m.redelivered) for m in got] == [(b"a", False), (b"b", False), (b"c", False)]
            await q.cancel(tag)
            await got[2].nack(multiple=True, requeue=True)
            again = [await q.get(timeout=10) for _ in range(3)]
            assert [(m.body, m.redelivered) for m in again] == [(b"a", True), (b"b", True), (b"c", True)]
            for m in again:
                await m.ack()
            await q.delete(if_unused=False, if_empty=False)

    run(body())


def test_unacked_requeued_when_channel_closes(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            q_name = unique("close-requeue")
            q = await channel.declare_queue(q_name)
            await publish_bodies(channel, q, [b"x", b"y"])
            consumer_channel = await connection.channel()
            cq = await consumer_channel.declare_queue(q_name, passive=True)
            x = await cq.get(timeout=10)
            assert x.body == b"x"
            await consumer_channel.close()  # x never acked: back in the queue, redelivered
            got = await drain(q)
            assert sorted((m.body, m.redelivered) for m in got) == [(b"x", True), (b"y", False)]
            await q.delete(if_unused=False, if_empty=False)

    run(body())


def test_an_ack_for_a_deleted_queue_settles_nothing_in_its_namesake(amqp_broker: AmqpBroker) -> None:
    """A delivery of a queue deleted since is acked: the queue declared again with that
    name, whose first message is leased to another channel as the first delivery of its
    first entry, keeps that lease (the ack named an entry and a delivery count, which the
    new queue's lease has too: it settled the wrong message)."""

    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            admin = await connection.channel()
            name = unique("namesake")
            q = await admin.declare_queue(name)
            await publish_bodies(admin, q, [b"old"])
            a = await connection.channel()
            old = await (await a.declare_queue(name, passive=True)).get(timeout=10)
            assert old.body == b"old"
            await admin.queue_delete(name)
            q = await admin.declare_queue(name)
            await publish_bodies(admin, q, [b"new"])
            b = await connection.channel()
            new = await (await b.declare_queue(name, passive=True)).get(timeout=10)
            assert (new.body, new.redelivered) == (b"new", False)
            await old.ack()  # no reply: the basic.qos after it on the same channel is one
            await a.set_qos(prefetch_count=0)
            await b.close()  # "new" was never acked: back in the queue
            assert await message_count(admin, name) == 1
            await admin.queue_delete(name)

    run(body())


def test_purge_and_delete_counts(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            q = await channel.declare_queue(unique("purge"))
            await publish_bodies(channel, q, [b"1", b"2", b"3", b"4", b"5"])
            held = await q.get(timeout=10)  # unacked: purge leaves it alone
            purged = await q.purge()
            assert isinstance(purged, Queue.PurgeOk) and purged.message_count == 4
            await held.reject(requeue=True)
            assert await message_count(channel, q.name) == 1

            await publish_bodies(channel, q, [b"6", b"7"])
            with pytest.raises(ChannelPreconditionFailed) as not_empty:
                await q.delete(if_unused=False, if_empty=True)
            assert str(not_empty.value).startswith("PRECONDITION_FAILED - "), not_empty.value

            # a consumer that holds what it gets: the queue is in use
            consumer_channel = await connection.channel()
            cq = await consumer_channel.declare_queue(q.name, passive=True)
            held_by_consumer: list[AbstractIncomingMessage] = []

            async def hold(message: AbstractIncomingMessage) -> None:
                held_by_consumer.append(message)

            await cq.consume(hold)
            while len(held_by_consumer) < 3:  # (bounded by run's deadline)
                await asyncio.sleep(0.02)
            channel = await connection.channel()
            with pytest.raises(ChannelPreconditionFailed) as in_use:
                await channel.queue_delete(q.name, if_unused=True, if_empty=False)
            assert str(in_use.value).startswith("PRECONDITION_FAILED - "), in_use.value
            await consumer_channel.close()  # its unacked messages go back to the queue

            channel = await connection.channel()
            deleted = await channel.queue_delete(q.name, if_unused=True, if_empty=False)
            assert isinstance(deleted, Queue.DeleteOk) and deleted.message_count == 3
            # deleting a queue that does not exist is not an error
            gone = await channel.queue_delete(q.name)
            assert isinstance(gone, Queue.DeleteOk) and gone.message_count == 0

    run(body())


def test_queue_message_ttl(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            q = await channel.declare_queue(unique("ttl"), arguments={"x-message-ttl": 300})
            await publish_bodies(channel, q, [b"early"])
            fresh = await q.get(no_ack=True, timeout=10)
            assert fresh.body == b"early"  # well within its TTL
            await publish_bodies(channel, q, [b"a", b"b"])
            assert await message_count(channel, q.name) == 2
            await asyncio.sleep(0.8)
            assert await q.get(fail=False) is None
            assert await message_count(channel, q.name) == 0
            await q.delete(if_unused=False, if_empty=False)

    run(body())


def test_per_message_expiration(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            q = await channel.declare_queue(unique("expiration"))
            for text, seconds in ((b"short", 0.2), (b"long", 60), (b"none", None)):
                msg = aio_pika.Message(text, expiration=seconds)
                await channel.default_exchange.publish(msg, q.name, timeout=10)
            await asyncio.sleep(0.6)
            got = await drain(q)
            assert [m.body for m in got] == [b"long", b"none"]
            assert got[0].expiration == 60  # the property is delivered as sent ("60000")
            assert got[1].expiration is None

            # per-message and per-queue TTL: the lower one wins
            q2 = await channel.declare_queue(unique("expiration2"), arguments={"x-message-ttl": 60_000})
            await channel.default_exchange.publish(aio_pika.Message(b"soon", expiration=0.2), q2.name, timeout=10)
            await channel.default_exchange.publish(aio_pika.Message(b"later"), q2.name, timeout=10)
            await asyncio.sleep(0.6)
            assert await drain_bodies(q2) == [b"later"]
            await q.delete(if_unused=False, if_empty=False)
            await q2.delete(if_unused=False, if_empty=False)

    run(body())


def test_priorities(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            q = await channel.declare_queue(unique("prio"), arguments={"x-max-priority": 10})
            sent: list[tuple[bytes, int | None]] = [
                (b"p0", 0), (b"p5a", 5), (b"none", None), (b"p1", 1), (b"p9", 9), (b"p5b", 5),
                (b"p200", 200),  # above x-max-priority: counts as 10
                (b"p10", 10),
            ]
            for text, priority in sent:
                await channel.default_exchange.publish(
                    aio_pika.Message(text, priority=priority), q.name, timeout=10
                )
            got = await drain(q)
            # highest first; equal priorities (and no priority = 0) in publish order
            assert [m.body for m in got] == [b"p200", b"p10", b"p9", b"p5a", b"p5b", b"p1", b"p0", b"none"]
            assert got[0].priority == 200  # the property itself is not clamped
            await q.delete(if_unused=False, if_empty=False)

    run(body())


def test_transactions(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            watcher = await connection.channel()
            q = await watcher.declare_queue(unique("tx"))

            channel = await connection.channel(publisher_confirms=False)
            tx = channel.transaction()
            await tx.select()
            for text in (b"r1", b"r2", b"r3"):
                await channel.default_exchange.publish(aio_pika.Message(text), q.name)
            assert await message_count(watcher, q.name) == 0  # nothing before commit
            await tx.rollback()
            assert await message_count(watcher, q.name) == 0

            for text in (b"c1", b"c2"):
                await channel.default_exchange.publish(aio_pika.Message(text), q.name)
            await tx.commit()
            assert await message_count(watcher, q.name) == 2

            # acks are transactional too: a rolled-back ack leaves the message unacked,
            # and it comes back (redelivered) when its channel closes
            tq = await channel.declare_queue(q.name, passive=True)
            c1 = await tq.get(timeout=10)
            await c1.ack()
            await tx.rollback()
            c2 = await tq.get(timeout=10)
            await c2.ack()
            await tx.commit()
            await channel.close()
            got = await drain(q)
            assert [(m.body, m.redelivered) for m in got] == [(b"c1", True)]
            await q.delete(if_unused=False, if_empty=False)

    run(body())


def test_mandatory_publish_returned(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            exchange_name = unique("nowhere")
            returned: list[AbstractIncomingMessage] = []

            # with confirms: the publish resolves to the returned message (basic.return
            # comes before the basic.ack for the same publish), the callback sees it too
            channel = await connection.channel(publisher_confirms=True, on_return_raises=False)
            channel.return_callbacks.add(lambda _ch, m: returned.append(m))
            ex = await channel.declare_exchange(exchange_name, aio_pika.ExchangeType.DIRECT, auto_delete=True)
            result = await ex.publish(aio_pika.Message(b"lost", message_id="r1"), "no.route",
                                      mandatory=True, timeout=10)
            assert isinstance(result, DeliveredMessage), result
            ret = result.delivery
            assert isinstance(ret, Basic.Return)
            assert (ret.reply_code, ret.reply_text) == (312, "NO_ROUTE")
            assert (ret.exchange, ret.routing_key) == (exchange_name, "no.route")
            assert result.body == b"lost"
            assert [(m.body, m.routing_key) for m in returned] == [(b"lost", "no.route")]

            # not mandatory: dropped silently, and still confirmed
            ack = await ex.publish(aio_pika.Message(b"dropped"), "no.route", mandatory=False, timeout=10)
            assert isinstance(ack, Basic.Ack)

            # on_return_raises: the publish raises PublishError
            raising = await connection.channel(publisher_confirms=True, on_return_raises=True)
            rex = await raising.get_exchange(exchange_name)
            with pytest.raises(PublishError) as err:
                await rex.publish(aio_pika.Message(b"lost2"), "no.route", mandatory=True, timeout=10)
            assert err.value.message is not None and err.value.message.body == b"lost2"

            # (aiormq maps a basic.return to its publish by message_id and drops returns on
            # channels without confirms: that case is in test_amqp_pika.py)

            # routable: no return
            q = await channel.declare_queue(unique("routable"))
            await q.bind(ex, "route")
            ok = await ex.publish(aio_pika.Message(b"kept"), "route", mandatory=True, timeout=10)
            assert isinstance(ok, Basic.Ack)
            assert await drain_bodies(q) == [b"kept"]
            await q.delete(if_unused=False, if_empty=False)

    run(body())
