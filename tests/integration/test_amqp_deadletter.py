"""Dead-lettering with aio-pika, checked field by field against what RabbitMQ 3.10 writes:
reject/nack without requeue, queue TTL and per-message expiration, x-max-length
overflow (drop-head, reject-publish, reject-publish-dlx), x-dead-letter-routing-key or
the original keys, cycles of expiries dropped, and the x-death header: one entry per
(queue, reason), newest first, whose count grows on each death while its exchange and
routing-keys stay those of the first; the x-first-death-* headers."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import aio_pika
import pytest
from aio_pika import ExchangeType
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue
from aio_pika.exceptions import DeliveryError

from tests.integration import amqp_target
from tests.integration.amqp_target import (
    AmqpBroker,
    connect,
    drain_bodies,
    publish_confirmed,
    run,
    unique,
)

amqp_broker = amqp_target.amqp_broker  # the fixture, by the name tests ask for


async def dead_letter_sink(channel: AbstractChannel) -> tuple[str, AbstractQueue]:
    """A topic exchange with one queue bound to "#": where dead letters end up."""
    dlx = await channel.declare_exchange(unique("dlx"), ExchangeType.TOPIC, auto_delete=True)
    sink = await channel.declare_queue(unique("dead"))
    await sink.bind(dlx, "#")
    return dlx.name, sink


async def get_one(queue: AbstractQueue, timeout: float = 10.0, *, no_ack: bool = True) -> AbstractIncomingMessage:
    """basic.get, polling until a message arrives (dead-lettering is asynchronous)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        message = await queue.get(no_ack=no_ack, fail=False, timeout=10)
        if message is not None:
            return message
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"nothing arrived in {queue.name} within {timeout:g} s")
        await asyncio.sleep(0.05)


def death(message: AbstractIncomingMessage) -> list[dict[str, Any]]:
    headers = message.headers or {}
    x_death = headers.get("x-death")
    assert isinstance(x_death, list), headers
    entries: list[dict[str, Any]] = []
    for entry in x_death:
        assert isinstance(entry, dict), entry
        assert isinstance(entry["time"], datetime.datetime), entry  # an AMQP timestamp
        entries.append({k: v for k, v in entry.items() if k != "time"})
    return entries


def first_death(message: AbstractIncomingMessage) -> tuple[Any, Any, Any]:
    headers = message.headers or {}
    return (headers.get("x-first-death-reason"), headers.get("x-first-death-queue"),
            headers.get("x-first-death-exchange"))


def test_reject_without_requeue_dead_letters(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            dlx, sink = await dead_letter_sink(channel)
            source = await channel.declare_exchange(unique("in"), ExchangeType.DIRECT, auto_delete=True)
            q = await channel.declare_queue(unique("src"), arguments={
                "x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "dead.rejected"})
            await q.bind(source, "orig.key")
            await publish_confirmed(source, "orig.key", [b"r1", b"r2"], headers={"app": "kept"},
                                    message_id="id-1", correlation_id="c-1")

            m1 = await q.get(timeout=10)
            await m1.reject(requeue=False)
            m2 = await q.get(timeout=10)
            await m2.nack(requeue=False)
            dead = [await get_one(sink), await get_one(sink)]
            assert [m.body for m in dead] == [b"r1", b"r2"]
            for m in dead:
                assert (m.exchange, m.routing_key) == (dlx, "dead.rejected")
                assert m.redelivered is False
                assert (m.message_id, m.correlation_id) == ("id-1", "c-1")  # properties kept
                assert m.headers is not None and m.headers["app"] == "kept"
                assert death(m) == [{"count": 1, "reason": "rejected", "queue": q.name,
                                     "exchange": source.name, "routing-keys": ["orig.key"]}]
                assert first_death(m) == ("rejected", q.name, source.name)
            assert await q.get(fail=False) is None  # gone from the source queue

            # a requeueing reject is not a death
            await publish_confirmed(source, "orig.key", [b"r3"])
            m3 = await q.get(timeout=10)
            await m3.reject(requeue=True)
            await asyncio.sleep(0.2)
            assert await sink.get(fail=False) is None
            assert (await q.get(no_ack=True, timeout=10)).body == b"r3"
            await q.delete(if_unused=False, if_empty=False)
            await sink.delete(if_unused=False, if_empty=False)

    run(body())


def test_x_death_count_grows_per_queue_and_reason(amqp_broker: AmqpBroker) -> None:
    """A queue whose dead letters come back to itself (through the default exchange):
    each rejection bumps the count of the one (queue, "rejected") entry."""

    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            source = await channel.declare_exchange(unique("in"), ExchangeType.TOPIC, auto_delete=True)
            name = unique("cycle")
            q = await channel.declare_queue(name, arguments={
                "x-dead-letter-exchange": "", "x-dead-letter-routing-key": name})
            await q.bind(source, "orig.#")
            await publish_confirmed(source, "orig.key", [b"again"])
            m = await q.get(timeout=10)
            assert "x-death" not in (m.headers or {})
            for count in range(1, 4):
                await m.reject(requeue=False)
                m = await get_one(q, no_ack=False)
                # dead-lettered is republished: a new message, not a redelivery
                assert (m.exchange, m.routing_key, m.redelivered) == ("", name, False)
                assert death(m) == [{"count": count, "reason": "rejected", "queue": name,
                                     "exchange": source.name, "routing-keys": ["orig.key"]}]
                assert first_death(m) == ("rejected", name, source.name)
            await m.ack()
            await q.delete(if_unused=False, if_empty=False)

    run(body())


def test_queue_ttl_dead_letters_with_original_routing_key(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            dlx, sink = await dead_letter_sink(channel)
            source = await channel.declare_exchange(unique("in"), ExchangeType.TOPIC, auto_delete=True)
            # no x-dead-letter-routing-key: the message keeps its own routing key
            q = await channel.declare_queue(unique("ttl"), arguments={
                "x-dead-letter-exchange": dlx, "x-message-ttl": 100})
            await q.bind(source, "ttl.#")
            await publish_confirmed(source, "ttl.a", [b"t1"])
            await publish_confirmed(source, "ttl.b", [b"t2"])
            dead = [await get_one(sink), await get_one(sink)]
            assert [(m.body, m.exchange, m.routing_key) for m in dead] == [
                (b"t1", dlx, "ttl.a"), (b"t2", dlx, "ttl.b")]
            assert death(dead[0]) == [{"count": 1, "reason": "expired", "queue": q.name,
                                       "exchange": source.name, "routing-keys": ["ttl.a"]}]
            assert first_death(dead[1]) == ("expired", q.name, source.name)
            assert await q.get(fail=False) is None
            await q.delete(if_unused=False, if_empty=False)
            await sink.delete(if_unused=False, if_empty=False)

    run(body())


def test_message_expiration_dead_letters_with_original_expiration(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            dlx, sink = await dead_letter_sink(channel)
            q = await channel.declare_queue(unique("exp"), arguments={
                "x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "expired"})
            await channel.default_exchange.publish(
                aio_pika.Message(b"e1", expiration=0.1), q.name, timeout=10)
            m = await get_one(sink)
            assert (m.body, m.routing_key) == (b"e1", "expired")
            # the expiration property is taken off, and kept in x-death
            assert m.expiration is None
            assert death(m) == [{"count": 1, "reason": "expired", "queue": q.name, "exchange": "",
                                 "routing-keys": [q.name], "original-expiration": "100"}]
            await q.delete(if_unused=False, if_empty=False)
            await sink.delete(if_unused=False, if_empty=False)

    run(body())


def test_max_length_drop_head_dead_letters(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            dlx, sink = await dead_letter_sink(channel)
            q = await channel.declare_queue(unique("maxlen"), arguments={
                "x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "overflow",
                "x-max-length": 2})
            await publish_confirmed(channel.default_exchange, q.name, [b"0", b"1", b"2", b"3"])
            assert await drain_bodies(q) == [b"2", b"3"]  # the newest two
            dead = [await get_one(sink), await get_one(sink)]
            assert [(m.body, m.routing_key) for m in dead] == [(b"0", "overflow"), (b"1", "overflow")]
            for m in dead:
                assert death(m) == [{"count": 1, "reason": "maxlen", "queue": q.name, "exchange": "",
                                     "routing-keys": [q.name]}]
                assert first_death(m) == ("maxlen", q.name, "")
            await q.delete(if_unused=False, if_empty=False)
            await sink.delete(if_unused=False, if_empty=False)

    run(body())


def test_max_length_reject_publish_nacks(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel(publisher_confirms=True)
            dlx, sink = await dead_letter_sink(channel)
            q = await channel.declare_queue(unique("rejectpub"), arguments={
                "x-max-length": 2, "x-overflow": "reject-publish", "x-dead-letter-exchange": dlx})
            await publish_confirmed(channel.default_exchange, q.name, [b"a", b"b"])
            with pytest.raises(DeliveryError):  # basic.nack for the third
                await channel.default_exchange.publish(aio_pika.Message(b"c"), q.name, timeout=10)
            assert await drain_bodies(q) == [b"a", b"b"]
            # reject-publish refuses the newcomer: it never entered the queue, so it is
            # not dead-lettered (that is reject-publish-dlx)
            await asyncio.sleep(0.2)
            assert await sink.get(fail=False) is None
            await q.delete(if_unused=False, if_empty=False)
            await sink.delete(if_unused=False, if_empty=False)

    run(body())


def test_max_length_reject_publish_dlx_nacks_and_dead_letters(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel(publisher_confirms=True)
            dlx, sink = await dead_letter_sink(channel)
            q = await channel.declare_queue(unique("rejectdlx"), arguments={
                "x-max-length": 2, "x-overflow": "reject-publish-dlx", "x-dead-letter-exchange": dlx})
            await publish_confirmed(channel.default_exchange, q.name, [b"a", b"b"])
            with pytest.raises(DeliveryError):  # basic.nack for the third, as for reject-publish
                await channel.default_exchange.publish(aio_pika.Message(b"c"), q.name, timeout=10)
            dead = await get_one(sink)  # and it is dead-lettered
            assert (dead.body, dead.routing_key) == (b"c", q.name)
            assert death(dead) == [{"count": 1, "reason": "maxlen", "queue": q.name, "exchange": "",
                                    "routing-keys": [q.name]}]
            assert await drain_bodies(q) == [b"a", b"b"]
            await q.delete(if_unused=False, if_empty=False)
            await sink.delete(if_unused=False, if_empty=False)

    run(body())


def test_dead_letter_cycle_of_expiries_is_dropped(amqp_broker: AmqpBroker) -> None:
    """A queue whose expired messages go to an exchange that routes back to it, and to a
    sink: the copy that would re-enter the queue is dropped (no rejection in the cycle),
    so the sink gets one copy, not one per TTL period forever."""

    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            back = await channel.declare_exchange(unique("back"), ExchangeType.FANOUT, auto_delete=True)
            q = await channel.declare_queue(unique("cycling"), arguments={
                "x-message-ttl": 30, "x-dead-letter-exchange": back.name})
            sink = await channel.declare_queue(unique("sink"))
            await q.bind(back)
            await sink.bind(back)
            await publish_confirmed(channel.default_exchange, q.name, [b"round"])
            first = await get_one(sink)
            assert death(first) == [{"count": 1, "reason": "expired", "queue": q.name, "exchange": "",
                                     "routing-keys": [q.name]}]
            await asyncio.sleep(0.5)  # ~16 TTL periods: a cycle would have sent more
            assert await sink.get(fail=False) is None
            assert (await channel.declare_queue(q.name, passive=True)).declaration_result.message_count == 0
            await q.delete(if_unused=False, if_empty=False)
            await sink.delete(if_unused=False, if_empty=False)

    run(body())


def test_dead_letter_chain_lists_newest_death_first(amqp_broker: AmqpBroker) -> None:
    """Expired in one queue, rejected in the next: two x-death entries, newest first, and
    x-first-death-* still naming the first."""

    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            dlx, sink = await dead_letter_sink(channel)
            second = await channel.declare_queue(unique("second"), arguments={
                "x-dead-letter-exchange": dlx})
            first = await channel.declare_queue(unique("first"), arguments={
                "x-message-ttl": 50, "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": second.name})
            await publish_confirmed(channel.default_exchange, first.name, [b"chain"])
            m = await get_one(second, no_ack=False)
            await m.reject(requeue=False)
            dead = await get_one(sink)
            assert (dead.body, dead.routing_key) == (b"chain", second.name)
            assert death(dead) == [
                {"count": 1, "reason": "rejected", "queue": second.name, "exchange": "",
                 "routing-keys": [second.name]},
                {"count": 1, "reason": "expired", "queue": first.name, "exchange": "",
                 "routing-keys": [first.name]},
            ]
            assert first_death(dead) == ("expired", first.name, "")
            for q in (first, second, sink):
                await q.delete(if_unused=False, if_empty=False)

    run(body())

