"""Filters on AMQP bindings (``x-filter-sql``, ``x-filter-tag``; docs/filters.md) against a
real ``logbus serve``: an aio-pika consumer of a queue bound to ``amq.topic`` with a
filter gets exactly the matching messages, whether they were published over AMQP (typed
headers, ``x-tag``), MQTT 5 (user properties, the ``tag`` property) or Kafka (record
headers); a queue bound without a filter gets them all. A consumer with the same
arguments on a shared queue gets exactly the matching messages, the others staying in
the queue for a consumer without a filter. A bad filter is refused with 406
PRECONDITION_FAILED and the channel's error names the position."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractQueue
from kafka import KafkaProducer
from paho.mqtt.packettypes import PacketTypes

from tests.integration.amqp_target import run
from tests.integration.amqp_target import unique as queue_name
from tests.integration.mqtt_clients import Paho, props, unique
from tests.serverproc import LogbusServer, ServerFactory

WAIT = 10.0
EXCHANGE = "amq.topic"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    factory = ServerFactory(Path(tmp_path_factory.mktemp("filters_amqp")))
    try:
        yield factory.start(listeners={"http": "off"})
    finally:
        factory.cleanup()


async def channel_of(server: LogbusServer) -> tuple[Any, AbstractChannel]:
    host, port = server.host_port("amqp")
    conn = await aio_pika.connect(f"amqp://guest:guest@{host}:{port}/", timeout=WAIT)
    return conn, await conn.channel()


async def drain(queue: AbstractQueue, settle: float = 0.5) -> list[bytes]:
    """Bodies until the queue has been empty for ``settle`` seconds."""
    out: list[bytes] = []
    loop = asyncio.get_running_loop()
    quiet_since = loop.time()
    while loop.time() - quiet_since < settle:
        m = await queue.get(no_ack=True, fail=False, timeout=WAIT)
        if m is None:
            await asyncio.sleep(0.05)
            continue
        out.append(m.body)
        quiet_since = loop.time()
    return out


def publish_mqtt(server: LogbusServer, topic: str, items: list[tuple[bytes, list[tuple[str, str]]]]) -> None:
    c = Paho(server, unique("filter-pub"), version=5)
    try:
        for body, user in items:
            c.publish(topic, body, qos=1, properties=props(PacketTypes.PUBLISH, UserProperty=user) if user else None)
    finally:
        c.close()


def publish_kafka(server: LogbusServer, key: str, items: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
    host, port = server.host_port("kafka")
    p = KafkaProducer(bootstrap_servers=f"{host}:{port}", acks="all")
    try:
        for body, headers in items:
            p.send(EXCHANGE, body, key=key.encode(), headers=headers)
        p.flush(WAIT)
    finally:
        p.close()


def test_sql_filter_gets_exactly_the_matching_messages_from_every_protocol(server: LogbusServer) -> None:
    root = unique("f")

    async def main() -> None:
        conn, ch = await channel_of(server)
        try:
            filtered = await ch.declare_queue(queue_name("sql"), exclusive=True)
            await filtered.bind(EXCHANGE, f"{root}.#",
                                arguments={"x-filter-sql": "region = 'eu' AND temp > 30"})
            everything = await ch.declare_queue(queue_name("all"), exclusive=True)
            await everything.bind(EXCHANGE, f"{root}.#")
            x = await ch.get_exchange(EXCHANGE)

            # AMQP: typed headers
            amqp: list[tuple[bytes, dict[str, Any]]] = [
                (b"amqp-hot-eu", {"region": "eu", "temp": 35}), (b"amqp-cold-eu", {"region": "eu", "temp": 10}),
                (b"amqp-hot-us", {"region": "us", "temp": 40.5}), (b"amqp-none", {})]
            for body, headers in amqp:
                await x.publish(aio_pika.Message(body, headers=headers), f"{root}.amqp")
            # MQTT 5: user properties are text; "31" compares as a number
            await asyncio.to_thread(publish_mqtt, server, f"{root}/mqtt", [
                (b"mqtt-hot-eu", [("region", "eu"), ("temp", "31")]),
                (b"mqtt-warm-eu", [("region", "eu"), ("temp", "30")]),
                (b"mqtt-text-temp", [("region", "eu"), ("temp", "hot")]),
                (b"mqtt-none", []),
            ])
            # Kafka: record headers, keyed by the routing key
            await asyncio.to_thread(publish_kafka, server, f"{root}.kafka", [
                (b"kafka-hot-eu", [("region", b"eu"), ("temp", b"99.5")]),
                (b"kafka-hot-asia", [("region", b"asia"), ("temp", b"99.5")]),
            ])
            got = await drain(filtered)
            assert sorted(got) == [b"amqp-hot-eu", b"kafka-hot-eu", b"mqtt-hot-eu"]
            assert len(await drain(everything)) == 10
        finally:
            await conn.close()

    run(main())


async def consume_until_quiet(queue: AbstractQueue, arguments: dict[str, Any], settle: float = 0.7) -> list[bytes]:
    """Bodies a consumer with ``arguments`` gets (acked) until none came for ``settle`` s."""
    got: list[bytes] = []
    arrived = asyncio.Event()

    async def on_message(m: aio_pika.abc.AbstractIncomingMessage) -> None:
        got.append(m.body)
        await m.ack()
        arrived.set()

    tag = await queue.consume(on_message, arguments=arguments)
    while True:
        arrived.clear()
        try:
            await asyncio.wait_for(arrived.wait(), settle)
        except asyncio.TimeoutError:
            break
    await queue.cancel(tag)
    return got


def test_consumer_sql_filter_gets_exactly_the_matching_messages_from_mqtt_and_kafka(server: LogbusServer) -> None:
    root = unique("c")

    async def main() -> None:
        conn, ch = await channel_of(server)
        try:
            shared = await ch.declare_queue(queue_name("shared"), exclusive=True)
            await shared.bind(EXCHANGE, f"{root}.#")
            await asyncio.to_thread(publish_mqtt, server, f"{root}/mqtt", [
                (b"mqtt-hot-eu", [("region", "eu"), ("temp", "31")]),
                (b"mqtt-warm-eu", [("region", "eu"), ("temp", "30")]),
                (b"mqtt-none", []),
            ])
            await asyncio.to_thread(publish_kafka, server, f"{root}.kafka", [
                (b"kafka-hot-eu", [("region", b"eu"), ("temp", b"99.5")]),
                (b"kafka-hot-asia", [("region", b"asia"), ("temp", b"99.5")]),
            ])
            x = await ch.get_exchange(EXCHANGE)
            await x.publish(aio_pika.Message(b"amqp-hot-eu", headers={"region": "eu", "temp": 35}), f"{root}.amqp")
            got = await consume_until_quiet(shared, {"x-filter-sql": "region = 'eu' AND temp > 30"})
            assert sorted(got) == [b"amqp-hot-eu", b"kafka-hot-eu", b"mqtt-hot-eu"]
            # what the filter left waits, in publish order, for a consumer without one
            again = await ch.declare_queue(shared.name, passive=True)
            assert again.declaration_result.message_count == 3
            assert await drain(shared) == [b"mqtt-warm-eu", b"mqtt-none", b"kafka-hot-asia"]
        finally:
            await conn.close()

    run(main())


def test_consumers_with_different_tag_filters_share_a_queue(server: LogbusServer) -> None:
    root = unique("ct")

    async def main() -> None:
        conn, ch = await channel_of(server)
        try:
            shared = await ch.declare_queue(queue_name("tags"), exclusive=True)
            await shared.bind(EXCHANGE, f"{root}.#")
            x = await ch.get_exchange(EXCHANGE)
            for i, tag in enumerate(["A", "B", "A", "C", "B"]):
                await x.publish(aio_pika.Message(f"{tag}{i}".encode(), headers={"x-tag": tag}), f"{root}.x")
            await asyncio.to_thread(publish_mqtt, server, f"{root}/m", [(b"mqtt-B", [("tag", "B")])])
            ch_b = await conn.channel()
            shared_b = await ch_b.get_queue(shared.name, ensure=False)
            got_a, got_b = await asyncio.gather(consume_until_quiet(shared, {"x-filter-tag": "A"}),
                                                consume_until_quiet(shared_b, {"x-filter-tag": "B"}))
            assert (got_a, got_b) == ([b"A0", b"A2"], [b"B1", b"B4", b"mqtt-B"])
            assert await drain(shared) == [b"C3"]
        finally:
            await conn.close()

    run(main())


def test_tag_filter_from_amqp_mqtt_and_kafka(server: LogbusServer) -> None:
    root = unique("t")

    async def main() -> None:
        conn, ch = await channel_of(server)
        try:
            q = await ch.declare_queue(queue_name("tag"), exclusive=True)
            await q.bind(EXCHANGE, f"{root}.#", arguments={"x-filter-tag": "TagA || TagB"})
            x = await ch.get_exchange(EXCHANGE)
            await x.publish(aio_pika.Message(b"amqp-a", headers={"x-tag": "TagA"}), f"{root}.x")
            await x.publish(aio_pika.Message(b"amqp-c", headers={"x-tag": "TagC"}), f"{root}.x")
            await x.publish(aio_pika.Message(b"amqp-untagged"), f"{root}.x")
            await asyncio.to_thread(publish_mqtt, server, f"{root}/m", [
                (b"mqtt-b", [("tag", "TagB")]), (b"mqtt-c", [("tag", "TagC")])])
            await asyncio.to_thread(publish_kafka, server, f"{root}.k", [
                (b"kafka-a", [("tag", b"TagA")]), (b"kafka-untagged", [])])
            assert sorted(await drain(q)) == [b"amqp-a", b"kafka-a", b"mqtt-b"]
        finally:
            await conn.close()

    run(main())


async def ignore(m: aio_pika.abc.AbstractIncomingMessage) -> None:
    pass


@pytest.mark.parametrize(("arguments", "words"), [
    ({"x-filter-sql": "temp >"}, "x-filter-sql: expected a name, a literal or (, found the end (at position 6)"),
    ({"x-filter-sql": "'a' > 1"}, "compares a string with a number"),
    ({"x-filter-tag": "A || "}, "x-filter-tag: an empty tag"),
    ({"x-filter-sql": 5}, "x-filter-sql: must be text"),
])  # fmt: skip
@pytest.mark.parametrize("where", ["binding", "consumer"])
def test_bad_filter_is_refused_with_precondition_failed(server: LogbusServer, arguments: dict[str, Any],
                                                         words: str, where: str) -> None:
    async def main() -> None:
        conn, ch = await channel_of(server)
        try:
            q = await ch.declare_queue(queue_name("bad"), exclusive=True)
            with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed) as e:
                if where == "binding":
                    await q.bind(EXCHANGE, "bad.#", arguments=arguments)
                else:
                    await q.consume(ignore, arguments=arguments)
            assert words in str(e.value)
            ch2 = await conn.channel()  # the connection goes on
            await ch2.declare_queue(queue_name("after"), exclusive=True)
        finally:
            await conn.close()

    run(main())
