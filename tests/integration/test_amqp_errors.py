"""Errors as aio-pika sees them: soft errors close the channel with the right reply code
(aiormq maps 403/404/405/406 to exception classes; the reply text starts with the code's
name) and leave the connection usable; a wrong password refuses the connection with 403.
After each, the same connection (or a fresh one) still works."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aio_pika
import aiormq
import pytest
from aio_pika.abc import AbstractChannel, AbstractConnection
from aiormq.exceptions import (
    ChannelLockedResource,
    ChannelNotFoundEntity,
    ChannelPreconditionFailed,
    ProbableAuthenticationError,
)

from tests.integration import amqp_target
from tests.integration.amqp_target import AmqpBroker, connect, run, unique

amqp_broker = amqp_target.amqp_broker  # the fixture, by the name tests ask for


async def still_works(connection: AbstractConnection) -> None:
    """A new channel on this connection can declare, publish (confirmed) and get."""
    channel = await connection.channel()
    q = await channel.declare_queue(unique("alive"), auto_delete=True)
    await channel.default_exchange.publish(aio_pika.Message(b"ok"), q.name, timeout=10)
    assert (await q.get(no_ack=True, timeout=10)).body == b"ok"
    await channel.close()


async def noop(_: Any) -> None:
    pass


def test_passive_declare_of_missing_queue_404(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            name = unique("missing")
            with pytest.raises(ChannelNotFoundEntity) as err:
                await channel.declare_queue(name, passive=True)
            assert str(err.value) == f"NOT_FOUND - no queue '{name}' in vhost '/'"
            assert channel.is_closed
            await still_works(connection)

    run(body())


def test_exclusive_queue_from_another_connection_405(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        owner = await connect(amqp_broker)
        other = await connect(amqp_broker)
        try:
            owner_channel = await owner.channel()
            q = await owner_channel.declare_queue(unique("exclusive"), exclusive=True)
            await owner_channel.default_exchange.publish(aio_pika.Message(b"mine"), q.name, timeout=10)

            # declare (even passive), consume, get: all refused to another connection
            async def get(ch: AbstractChannel) -> object:
                return await (await ch.get_underlay_channel()).basic_get(q.name)

            async def consume(ch: AbstractChannel) -> object:
                return await (await ch.get_underlay_channel()).basic_consume(q.name, noop)

            attempts: dict[str, Callable[[AbstractChannel], Awaitable[object]]] = {
                "declare": lambda ch: ch.declare_queue(q.name, exclusive=True),
                "passive": lambda ch: ch.declare_queue(q.name, passive=True),
                "get": get,
                "consume": consume,
            }
            for what, attempt in attempts.items():
                channel = await other.channel()
                with pytest.raises(ChannelLockedResource) as err:
                    await attempt(channel)
                assert str(err.value).startswith(
                    f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q.name}' "
                    "in vhost '/'"), (what, err.value)

            # the owner still uses it
            assert (await q.get(no_ack=True, timeout=10)).body == b"mine"
            await still_works(other)
            # and it goes with its connection
            await owner.close()
            channel = await other.channel()
            with pytest.raises(ChannelNotFoundEntity):
                await channel.declare_queue(q.name, passive=True)
        finally:
            await owner.close()
            await other.close()

    run(body())


def test_redeclare_with_other_properties_406(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            name = unique("inequivalent")
            await channel.declare_queue(name, durable=False, auto_delete=True)
            with pytest.raises(ChannelPreconditionFailed) as err:
                await channel.declare_queue(name, durable=True, auto_delete=True)
            assert str(err.value) == (f"PRECONDITION_FAILED - inequivalent arg 'durable' for queue "
                                      f"'{name}' in vhost '/': received 'true' but current is 'false'")
            channel = await connection.channel()
            with pytest.raises(ChannelPreconditionFailed) as err:
                await channel.declare_queue(name, auto_delete=True, arguments={"x-max-length": 5})
            assert str(err.value).startswith("PRECONDITION_FAILED - inequivalent arg 'x-max-length'"), err.value
            channel = await connection.channel()
            await channel.declare_queue(name, auto_delete=True)  # the same again: fine
            await channel.queue_delete(name)
            await still_works(connection)

    run(body())


def test_publish_to_missing_exchange_404_connection_survives(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel(publisher_confirms=True)
            name = unique("no-such-exchange")
            exchange = aio_pika.Exchange(channel, name, aio_pika.ExchangeType.DIRECT)
            # basic.publish has no reply: the Channel.Close 404 fails the pending confirm
            with pytest.raises(ChannelNotFoundEntity) as err:
                await exchange.publish(aio_pika.Message(b"x"), "k", timeout=10)
            assert str(err.value) == f"NOT_FOUND - no exchange '{name}' in vhost '/'"
            assert channel.is_closed
            await still_works(connection)

    run(body())


def test_ack_unknown_delivery_tag_406(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            q = await channel.declare_queue(unique("acks"), auto_delete=True)
            await channel.default_exchange.publish(aio_pika.Message(b"m"), q.name, timeout=10)
            m = await q.get(timeout=10)
            await m.ack()
            assert m.delivery_tag is not None
            underlay = await channel.get_underlay_channel()
            await underlay.basic_ack(m.delivery_tag)  # twice: unknown by now
            # (basic.ack has no reply: the next call meets the Channel.Close)
            with pytest.raises(ChannelPreconditionFailed) as err:
                await channel.declare_queue(q.name, passive=True)
            assert str(err.value) == f"PRECONDITION_FAILED - unknown delivery tag {m.delivery_tag}"

            channel = await connection.channel()
            underlay = await channel.get_underlay_channel()
            await underlay.basic_ack(12345)
            with pytest.raises(ChannelPreconditionFailed) as err:
                await channel.declare_queue(q.name, passive=True)
            assert str(err.value) == "PRECONDITION_FAILED - unknown delivery tag 12345"
            await still_works(connection)

    run(body())


def test_wrong_credentials_403(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        for user, password in (("guest", "wrong"), ("nobody", "guest")):
            url = f"amqp://{user}:{password}@{amqp_broker.host}:{amqp_broker.port}/"
            with pytest.raises(ProbableAuthenticationError) as err:
                await aio_pika.connect(url, timeout=10)
            assert str(err.value).startswith("ACCESS_REFUSED - "), err.value
        async with await connect(amqp_broker) as connection:
            await still_works(connection)

    run(body())


def test_the_owner_declares_its_exclusive_queue_passively_whatever_the_bit(amqp_broker: AmqpBroker) -> None:
    """RabbitMQ's lax check for a passive declare: the owning connection may declare its
    exclusive queue passively with the exclusive bit 0 or 1 (pika's blocking helpers do);
    another connection gets 405, and a non-passive declare by the owner without the bit
    is still 405 (the strict check)."""
    async def body() -> None:
        owner = await aiormq.connect(amqp_broker.url)
        other = await aiormq.connect(amqp_broker.url)
        try:
            channel = await owner.channel()
            name = unique("mine")
            await channel.queue_declare(name, exclusive=True)
            await channel.basic_publish(b"m", routing_key=name)
            for bit in (False, True):
                ok = await channel.queue_declare(name, passive=True, exclusive=bit)
                assert (ok.queue, ok.message_count) == (name, 1), bit
            with pytest.raises(ChannelLockedResource):
                await (await other.channel()).queue_declare(name, passive=True)
            with pytest.raises(ChannelLockedResource):
                await channel.queue_declare(name, exclusive=False)
        finally:
            await owner.close()
            await other.close()

    run(body())
