"""AMQP routing with aio-pika: every exchange type routes as RabbitMQ does (direct,
fanout, topic with ``*`` and ``#``, headers with x-match all/any), the default
exchange, exchange-to-exchange bindings. Each test publishes with confirms, then reads
every queue back with basic.get, so a message routed twice, or to the wrong queue,
shows up as a wrong list."""

from __future__ import annotations

from decimal import Decimal

import aio_pika
import pytest
from aio_pika import ExchangeType
from aio_pika.abc import AbstractChannel, AbstractQueue
from aiormq.exceptions import ChannelAccessRefused

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


async def declare_queues(channel: AbstractChannel, count: int) -> list[AbstractQueue]:
    return [await channel.declare_queue(unique(f"route{i}"), auto_delete=False) for i in range(count)]


async def delete_all(queues: list[AbstractQueue]) -> None:
    for q in queues:
        await q.delete(if_unused=False, if_empty=False)


def test_connect_and_server_properties(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        connection = await connect(amqp_broker)
        try:
            props = connection.transport.connection.server_properties  # type: ignore[union-attr]
            capabilities = props["capabilities"]
            assert isinstance(capabilities, dict), props
            # what aio-pika, pika and kombu look at before using an extension
            for cap in ("publisher_confirms", "exchange_exchange_bindings", "basic.nack",
                        "consumer_cancel_notify", "authentication_failure_close"):
                assert capabilities.get(cap) is True, (cap, capabilities)
            channel = await connection.channel()
            assert not channel.is_closed
        finally:
            await connection.close()

    run(body())


def test_direct_exchange(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            ex = await channel.declare_exchange(unique("direct"), ExchangeType.DIRECT, auto_delete=True)
            q1, q2, q3 = queues = await declare_queues(channel, 3)
            await q1.bind(ex, "a")
            await q1.bind(ex, "both")
            await q2.bind(ex, "b")
            await q2.bind(ex, "both")
            await q3.bind(ex, "a")
            await q3.bind(ex, "c")
            await q3.bind(ex, "a")  # the same binding twice is one binding
            for key in ("a", "b", "c", "both", "none", "A"):
                await publish_confirmed(ex, key, [key.encode()])
            assert await drain_bodies(q1) == [b"a", b"both"]
            assert await drain_bodies(q2) == [b"b", b"both"]
            assert await drain_bodies(q3) == [b"a", b"c"]  # routing keys are case-sensitive

            await q3.unbind(ex, "a")
            await publish_confirmed(ex, "a", [b"a2"])
            assert await drain_bodies(q1) == [b"a2"]
            assert await drain_bodies(q3) == []
            await delete_all(queues)

    run(body())


def test_fanout_exchange(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            ex = await channel.declare_exchange(unique("fanout"), ExchangeType.FANOUT, auto_delete=True)
            queues = await declare_queues(channel, 3)
            for q in queues:
                await q.bind(ex, "ignored")
            await publish_confirmed(ex, "", [b"1"])
            await publish_confirmed(ex, "anything.at.all", [b"2"])
            for q in queues:
                assert await drain_bodies(q) == [b"1", b"2"], q.name
            await delete_all(queues)

    run(body())


# binding patterns per queue, and for each routing key the queues that get it
TOPIC_BINDINGS = {
    "q1": ["*.orange.*"],
    "q2": ["*.*.rabbit", "lazy.#"],
    "q3": ["#"],
    "q4": ["a.#.z"],
    "q5": ["*"],
    "q6": ["#.end", "x.*.#"],
}
TOPIC_ROUTES = {
    "quick.orange.rabbit": {"q1", "q2", "q3"},
    "lazy.orange.elephant": {"q1", "q2", "q3"},
    "quick.orange.fox": {"q1", "q3"},
    "lazy.brown.fox": {"q2", "q3"},
    "lazy.pink.rabbit": {"q2", "q3"},  # matches both of q2's bindings: delivered once
    "quick.brown.fox": {"q3"},
    "quick.orange.male.rabbit": {"q3"},
    "orange": {"q3", "q5"},
    "lazy": {"q2", "q3", "q5"},  # "#" matches zero words: lazy.# matches "lazy"
    "a.z": {"q3", "q4"},
    "a.b.c.z": {"q3", "q4"},
    "a.z.b": {"q3"},
    "end": {"q3", "q5", "q6"},
    "the.very.end": {"q3", "q6"},
    "x.y": {"q3", "q6"},
    "x": {"q3", "q5"},  # x.*.# needs at least two words
    "x.y.z.end": {"q3", "q6"},
    "a..z": {"q3", "q4"},  # an empty word is a word
}


def test_topic_exchange(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            ex = await channel.declare_exchange(unique("topic"), ExchangeType.TOPIC, auto_delete=True)
            queues = dict(zip(TOPIC_BINDINGS, await declare_queues(channel, len(TOPIC_BINDINGS))))
            for name, patterns in TOPIC_BINDINGS.items():
                for pattern in patterns:
                    await queues[name].bind(ex, pattern)
            for key in TOPIC_ROUTES:
                await publish_confirmed(ex, key, [key.encode()])
            got = {name: [b.decode() for b in await drain_bodies(q)] for name, q in queues.items()}
            want = {name: [k for k, to in TOPIC_ROUTES.items() if name in to] for name in TOPIC_BINDINGS}
            assert got == want
            await delete_all(list(queues.values()))

    run(body())


def test_topic_empty_routing_key(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            ex = await channel.declare_exchange(unique("topic"), ExchangeType.TOPIC, auto_delete=True)
            hash_q, star_q, empty_q = queues = await declare_queues(channel, 3)
            await hash_q.bind(ex, "#")
            await star_q.bind(ex, "*")
            await empty_q.bind(ex, "")
            await publish_confirmed(ex, "", [b"empty"])
            await publish_confirmed(ex, "w", [b"word"])
            assert await drain_bodies(hash_q) == [b"empty", b"word"]
            assert await drain_bodies(star_q) == [b"word"]  # "" has no word for * to match
            assert await drain_bodies(empty_q) == [b"empty"]
            await delete_all(queues)

    run(body())


HEADER_BINDINGS = {
    "all": {"x-match": "all", "format": "pdf", "type": "report"},
    "any": {"x-match": "any", "format": "pdf", "type": "report"},
    "default": {"format": "pdf", "type": "report"},  # no x-match: all
    "empty_all": {"x-match": "all"},  # nothing to match: everything matches
}
HEADER_ROUTES: list[tuple[dict[str, str] | None, set[str]]] = [
    ({"format": "pdf", "type": "report"}, {"all", "any", "default", "empty_all"}),
    ({"format": "pdf", "type": "report", "extra": "x"}, {"all", "any", "default", "empty_all"}),
    ({"format": "pdf"}, {"any", "empty_all"}),
    ({"type": "report", "format": "zip"}, {"any", "empty_all"}),
    ({"format": "zip"}, {"empty_all"}),
    (None, {"empty_all"}),
]


def test_headers_exchange(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            ex = await channel.declare_exchange(unique("headers"), ExchangeType.HEADERS, auto_delete=True)
            queues = dict(zip(HEADER_BINDINGS, await declare_queues(channel, len(HEADER_BINDINGS))))
            for name, arguments in HEADER_BINDINGS.items():
                await queues[name].bind(ex, "", arguments=dict(arguments))
            for i, (headers, _) in enumerate(HEADER_ROUTES):
                # the routing key plays no part in a headers exchange
                await publish_confirmed(ex, f"key{i}", [str(i).encode()], headers=headers)
            got = {name: [int(b) for b in await drain_bodies(q)] for name, q in queues.items()}
            want = {name: [i for i, (_, to) in enumerate(HEADER_ROUTES) if name in to] for name in HEADER_BINDINGS}
            assert got == want
            await delete_all(list(queues.values()))

    run(body())


def test_default_exchange(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            (q,) = await declare_queues(channel, 1)
            await publish_confirmed(channel.default_exchange, q.name, [b"direct to the queue"])
            await publish_confirmed(channel.default_exchange, q.name + ".nope", [b"nowhere"])
            messages = await q.get(no_ack=True, timeout=10), await q.get(no_ack=True, fail=False)
            assert messages[0].body == b"direct to the queue"
            assert messages[0].exchange == ""
            assert messages[0].routing_key == q.name
            assert messages[1] is None
            # every queue is bound to the default exchange by its name, and only so
            with pytest.raises(ChannelAccessRefused) as refused:
                await q.bind("", "other")
            assert str(refused.value).startswith("ACCESS_REFUSED - "), refused.value
            channel = await connection.channel()  # the 403 closed the first one
            await channel.queue_delete(q.name)

    run(body())


def test_exchange_to_exchange_binding(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            source = await channel.declare_exchange(unique("e2e.src"), ExchangeType.TOPIC, auto_delete=True)
            middle = await channel.declare_exchange(unique("e2e.mid"), ExchangeType.DIRECT, auto_delete=True)
            leaf = await channel.declare_exchange(unique("e2e.leaf"), ExchangeType.FANOUT, auto_delete=True)
            direct_q, via_leaf_q = queues = await declare_queues(channel, 2)
            await middle.bind(source, "logs.#")  # destination.bind(source, key)
            await leaf.bind(middle, "logs.error")
            await direct_q.bind(middle, "logs.info")
            await via_leaf_q.bind(leaf, "")
            await via_leaf_q.bind(source, "logs.error")  # also bound directly: still one copy
            for key in ("logs.info", "logs.error", "logs.debug", "metrics.cpu"):
                await publish_confirmed(source, key, [key.encode()])
            assert await drain_bodies(direct_q) == [b"logs.info"]
            assert await drain_bodies(via_leaf_q) == [b"logs.error"]

            await middle.unbind(source, "logs.#")
            await publish_confirmed(source, "logs.info", [b"after unbind"])
            assert await drain_bodies(direct_q) == []
            await delete_all(queues)

    run(body())


def test_exchange_declare_mismatch_and_delete(amqp_broker: AmqpBroker) -> None:
    """Redeclaring an exchange with another type is 406; a deleted exchange is gone (404)."""

    async def body() -> None:
        from aiormq.exceptions import ChannelNotFoundEntity, ChannelPreconditionFailed

        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            name = unique("mismatch")
            await channel.declare_exchange(name, ExchangeType.DIRECT)
            with pytest.raises(ChannelPreconditionFailed) as failed:
                await channel.declare_exchange(name, ExchangeType.FANOUT)
            assert str(failed.value).startswith("PRECONDITION_FAILED - "), failed.value
            channel = await connection.channel()
            await channel.declare_exchange(name, ExchangeType.DIRECT, passive=True)
            await channel.exchange_delete(name)
            with pytest.raises(ChannelNotFoundEntity) as missing:
                await channel.declare_exchange(name, ExchangeType.DIRECT, passive=True)
            assert str(missing.value).startswith("NOT_FOUND - "), missing.value

    run(body())


def test_message_properties_round_trip(amqp_broker: AmqpBroker) -> None:
    async def body() -> None:
        async with await connect(amqp_broker) as connection:
            channel = await connection.channel()
            (q,) = await declare_queues(channel, 1)
            sent = aio_pika.Message(
                b"\x00\xffbinary body",
                content_type="application/octet-stream", content_encoding="identity",
                headers={"s": "text", "i": 42, "neg": -7, "f": 1.5, "b": True, "l": [1, "two"],
                         "t": {"nested": "yes"}, "x": bytearray(b"raw"), "v": None,
                         "big": 2**40, "d": Decimal("1.25")},
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT, priority=3,
                correlation_id="corr-1", reply_to="reply.q", message_id="m-1",
                timestamp=1_700_000_000, type="kind", user_id="guest", app_id="logbus-tests",
            )
            await channel.default_exchange.publish(sent, q.name, timeout=10)
            got = await q.get(no_ack=True, timeout=10)
            assert got.body == sent.body
            for attr in ("content_type", "content_encoding", "delivery_mode", "priority",
                         "correlation_id", "reply_to", "message_id", "type", "user_id", "app_id"):
                assert getattr(got, attr) == getattr(sent, attr), attr
            assert got.timestamp == sent.timestamp
            assert got.headers == {"s": "text", "i": 42, "neg": -7, "f": 1.5, "b": True,
                                   "l": [1, "two"], "t": {"nested": "yes"}, "x": bytearray(b"raw"),
                                   "v": None, "big": 2**40, "d": Decimal("1.25")}
            await q.delete(if_unused=False, if_empty=False)

    run(body())
