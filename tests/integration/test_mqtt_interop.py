"""MQTT with the other protocols (docs/interop.md), real clients against one real
``logbus serve``: paho-mqtt (3.1.1 and 5.0), aio-pika on ``amq.topic``, kafka-python on
the log topic ``amq.topic``.

- an MQTT publish reaches AMQP queues bound to ``amq.topic``, its topic as routing key
  (``/`` and ``.`` swapped), its MQTT 5 user properties as headers, its content type;
- an AMQP publish to ``amq.topic`` reaches MQTT subscribers, its routing key mapped back,
  its text headers as MQTT 5 user properties, QoS 1 if persistent else 0; a routing key
  with ``+`` or ``#`` names no MQTT topic and is not delivered to MQTT, and the session
  goes on;
- a Kafka consumer of ``amq.topic`` sees an MQTT publish keyed by the MQTT topic name
  itself, its user properties as record headers; a Kafka record produced to ``amq.topic``
  reaches MQTT subscribers;
- every row of docs/interop.md's topic table, both ways, and its filters.

Each test names its topics with a unique first level, so the module's tests never see
each other's messages on the shared ``amq.topic``; the few ``#`` subscriptions live only
while their own test runs. Blocking paho calls run in a thread (``asyncio.to_thread``)
so aio-pika's connection keeps being served meanwhile."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aio_pika
import pika  # type: ignore[import-untyped]
import pytest
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage, AbstractQueue
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from paho.mqtt.packettypes import PacketTypes
from pamqp.commands import Basic

from tests.integration.amqp_target import run
from tests.integration.amqp_target import unique as queue_name
from tests.integration.mqtt_clients import Paho, props, unique
from tests.serverproc import LogbusServer, ServerFactory

WAIT = 10.0
EXCHANGE = "amq.topic"
USER_PROPS = [("k", "v"), ("région", "été")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    factory = ServerFactory(Path(tmp_path_factory.mktemp("mqtt_interop")))
    try:
        yield factory.start(listeners={"http": "off"})
    finally:
        factory.cleanup()


# -- aio-pika side ---------------------------------------------------------------------------


async def amqp_connect(server: LogbusServer) -> AbstractConnection:
    host, port = server.host_port("amqp")
    return await aio_pika.connect(f"amqp://guest:guest@{host}:{port}/", timeout=WAIT)


async def bound_queue(channel: AbstractChannel, *binding_keys: str) -> AbstractQueue:
    q = await channel.declare_queue(queue_name("interop"), exclusive=True)
    for key in binding_keys:
        await q.bind(EXCHANGE, key)
    return q


async def take(queue: AbstractQueue, n: int, timeout: float = WAIT) -> list[AbstractIncomingMessage]:
    """``n`` messages by basic.get (auto-ack), waiting at most ``timeout`` for them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    out: list[AbstractIncomingMessage] = []
    while len(out) < n:
        m = await queue.get(no_ack=True, fail=False, timeout=WAIT)
        if m is not None:
            out.append(m)
            continue
        if loop.time() > deadline:
            got = [(x.routing_key, x.body) for x in out]
            raise AssertionError(f"{queue.name}: {len(out)} of {n} messages within {timeout:g} s: {got}")
        await asyncio.sleep(0.05)
    return out


async def assert_empty(queue: AbstractQueue, seconds: float = 0.5) -> None:
    await asyncio.sleep(seconds)
    m = await queue.get(no_ack=True, fail=False, timeout=WAIT)
    assert m is None, f"{queue.name}: unexpected message {m.routing_key!r} {m.body!r}"


async def amqp_publish(channel: AbstractChannel, routing_key: str, body: bytes, **properties: Any) -> None:
    """Publish to amq.topic on a confirming channel, not mandatory (a key no queue is
    bound to is fine); the broker must ack it."""
    exchange = await channel.get_exchange(EXCHANGE)
    confirm = await exchange.publish(aio_pika.Message(body, **properties), routing_key, mandatory=False,
                                     timeout=WAIT)
    assert isinstance(confirm, Basic.Ack), confirm


def user_properties(received: Any) -> list[tuple[str, str]]:
    return list(getattr(received.properties, "UserProperty", None) or [])


def close_all(*clients: Paho) -> None:
    for c in clients:
        c.close()  # its socket pair too (Paho._release)


# -- MQTT -> AMQP ----------------------------------------------------------------------------


def test_mqtt_publish_reaches_amqp_queues_bound_to_amq_topic(server: LogbusServer) -> None:
    base = unique("a")
    pub5 = Paho(server, unique("pub5"), version=5)
    pub4 = Paho(server, unique("pub4"), version=4)

    async def body() -> None:
        async with await amqp_connect(server) as connection:
            channel = await connection.channel()
            star = await bound_queue(channel, f"{base}.*")
            everything = await bound_queue(channel, "#")
            p = props(PacketTypes.PUBLISH, ContentType="text/plain", UserProperty=USER_PROPS)
            await asyncio.to_thread(pub5.publish, f"{base}/b", "héllo".encode(), 1, properties=p)
            await asyncio.to_thread(pub5.publish, f"{base}/b/c", b"deeper", 1)  # two words: not a.*
            await asyncio.to_thread(pub4.publish, f"{base}/d", b"from 3.1.1", 0)

            got = await take(star, 2)
            assert [(m.exchange, m.routing_key, m.body) for m in got] == [
                (EXCHANGE, f"{base}.b", "héllo".encode()), (EXCHANGE, f"{base}.d", b"from 3.1.1")]
            first, second = got
            assert first.headers == dict(USER_PROPS)
            assert first.content_type == "text/plain"
            assert not second.headers and second.content_type is None
            await assert_empty(star)

            # '#' matches every routing key: all three, in publish order
            assert [m.routing_key for m in await take(everything, 3)] == [
                f"{base}.b", f"{base}.b.c", f"{base}.d"]
            await assert_empty(everything, 0.1)

    try:
        run(body())
    finally:
        close_all(pub5, pub4)


@pytest.mark.parametrize("version", [4, 5])
def test_mqtt_qos_is_the_amqp_delivery_mode(server: LogbusServer, version: int) -> None:
    """As RabbitMQ's MQTT plugin: QoS 1 and 2 reach an AMQP consumer (pika) persistent
    (delivery mode 2), QoS 0 not (1)."""
    base = unique("dm")
    host, port = server.host_port("amqp")
    connection = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    pub = Paho(server, unique("pub"), version=version)
    try:
        channel = connection.channel()
        queue = channel.queue_declare(queue_name("qos"), exclusive=True).method.queue
        channel.queue_bind(queue, EXCHANGE, f"{base}.#")
        for qos in (0, 1, 2):
            pub.publish(f"{base}/q{qos}", b"qos %d" % qos, qos)
        got: list[tuple[bytes, int | None]] = []
        deadline = time.monotonic() + WAIT
        while len(got) < 3 and time.monotonic() < deadline:
            method, properties, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                connection.sleep(0.05)  # pika's own wait: it keeps serving the connection
                continue
            got.append((body, properties.delivery_mode))
        assert got == [(b"qos 0", 1), (b"qos 1", 2), (b"qos 2", 2)]
    finally:
        pub.close()
        connection.close()


# -- AMQP -> MQTT ----------------------------------------------------------------------------


def test_amqp_publish_reaches_mqtt_subscribers(server: LogbusServer) -> None:
    base = unique("x")
    sub5 = Paho(server, unique("sub5"), version=5)
    sub4 = Paho(server, unique("sub4"), version=4)
    try:
        sub5.subscribe(f"{base}/+", 1)
        sub4.subscribe(f"{base}/+", 1)

        async def body() -> None:
            async with await amqp_connect(server) as connection:
                channel = await connection.channel()
                await amqp_publish(channel, f"{base}.y", b"persistent",
                                   delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                                   content_type="application/json",
                                   headers={"k": "v", "région": "été", "n": 5})
                await amqp_publish(channel, f"{base}.z", b"transient",
                                   delivery_mode=aio_pika.DeliveryMode.NOT_PERSISTENT)

        run(body())
        got = sub5.take(2)
        # QoS: 1 if persistent, 0 if transient (capped by the subscription's 1)
        assert [(m.topic, m.payload, m.qos, m.retain) for m in got] == [
            (f"{base}/y", b"persistent", 1, False), (f"{base}/z", b"transient", 0, False)]
        # text headers are user properties; a header with a number value is not
        assert user_properties(got[0]) == USER_PROPS
        assert got[0].properties.ContentType == "application/json"
        assert user_properties(got[1]) == []
        assert [(m.topic, m.payload, m.qos) for m in sub4.take(2)] == [
            (f"{base}/y", b"persistent", 1), (f"{base}/z", b"transient", 0)]
        sub5.assert_quiet()
        sub4.assert_quiet(0.1)
    finally:
        close_all(sub5, sub4)


def test_amqp_routing_key_with_mqtt_wildcards_is_not_delivered_to_mqtt(server: LogbusServer) -> None:
    base = unique("w")
    sub = Paho(server, unique("sub"), version=5)
    everything = Paho(server, unique("all"), version=5)  # '#': bound with '#', which matches ""
    try:
        sub.subscribe([(f"{base}/+", 1), (f"{base}/#", 1)])
        everything.subscribe("#", 1)
        bad = [f"{base}.a+b", f"{base}.c#d", f"{base}.+"]

        async def body() -> None:
            async with await amqp_connect(server) as connection:
                channel = await connection.channel()
                watch = await bound_queue(channel, f"{base}.*")
                for key in bad:
                    await amqp_publish(channel, key, key.encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
                await amqp_publish(channel, "", b"empty", delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
                await amqp_publish(channel, f"{base}.ok", b"later", delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
                # routed to AMQP as any routing key is: only the MQTT side skips them
                assert [m.routing_key for m in await take(watch, 4)] == [*bad, f"{base}.ok"]

        run(body())
        m = sub.next_message()
        assert (m.topic, m.payload, m.qos) == (f"{base}/ok", b"later", 1)  # the session goes on
        m = everything.next_message()  # neither the wildcard keys nor the empty one
        assert (m.topic, m.payload, m.qos) == (f"{base}/ok", b"later", 1)
        sub.assert_quiet()
        everything.assert_quiet(0.1)
    finally:
        close_all(sub, everything)


def test_amqp_publishes_wait_in_an_offline_mqtt_session(server: LogbusServer) -> None:
    """A persistent session's queue stays bound while its client is away: AMQP publishes
    (mappable or not) wait there and come out mapped when it is back."""
    base = unique("off")
    cid = unique("keep")
    sub = Paho(server, cid, version=4, clean=False)
    sub.subscribe(f"{base}/#", 1)
    close_all(sub)

    async def body() -> None:
        async with await amqp_connect(server) as connection:
            channel = await connection.channel()
            for key, payload in ((f"{base}.v1/2", b"1"), (f"{base}.a#b", b"unmappable"), (f"{base}.x.y", b"2")):
                await amqp_publish(channel, key, payload, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)

    run(body())
    back = Paho(server, cid, version=4, clean=False, connect=False)
    try:
        flags, _, _ = back.connect()
        assert flags.session_present
        assert [(m.topic, m.payload, m.qos) for m in back.take(2)] == [
            (f"{base}/v1.2", b"1", 1), (f"{base}/x/y", b"2", 1)]
        back.assert_quiet()
    finally:
        close_all(back)
    clean = Paho(server, cid, version=4, clean=True)  # end the session
    close_all(clean)


# -- MQTT -> Kafka ---------------------------------------------------------------------------


def kafka_records(server: LogbusServer, topic: str) -> list[Any]:
    """Every record of ``topic``, all partitions, from the beginning."""
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False,
                      consumer_timeout_ms=2000, request_timeout_ms=15_000)
    try:
        partitions = c.partitions_for_topic(topic)
        assert partitions, f"no partitions for {topic!r}"
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        return list(c)
    finally:
        c.close()


def test_mqtt_publish_is_a_kafka_record_keyed_by_the_mqtt_topic(server: LogbusServer) -> None:
    base = unique("sensors")
    topic5, topic4 = f"{base}/v1.2/temp", f"{base}/v1.2/hum"
    pub5 = Paho(server, unique("pub5"), version=5)
    pub4 = Paho(server, unique("pub4"), version=4)
    try:
        # MQTT 5 allows a name twice; record headers keep both, in order
        p = props(PacketTypes.PUBLISH, ContentType="text/plain", UserProperty=[*USER_PROPS, ("k", "w")])
        pub5.publish(topic5, b"21.5", 1, properties=p)
        pub4.publish(topic4, b"40", 1)
    finally:
        close_all(pub5, pub4)
    ours = [r for r in kafka_records(server, EXCHANGE) if r.key is not None and r.key.startswith(base.encode())]
    # the key is the MQTT topic name itself, not the AMQP routing key (sensors-....v1/2.temp)
    assert [(r.key, r.value) for r in ours] == [(topic5.encode(), b"21.5"), (topic4.encode(), b"40")]
    five, four = ours
    user = [(k, v) for k, v in five.headers if k != "logbus.envelope"]
    assert user == [(k, v.encode()) for k, v in USER_PROPS] + [("k", b"w")]
    assert [k for k, _ in four.headers if k != "logbus.envelope"] == []


def test_kafka_record_on_amq_topic_reaches_mqtt_subscribers(server: LogbusServer) -> None:
    """A Kafka topic behind an exchange is routable (docs/interop.md): a record produced to
    ``amq.topic`` reaches MQTT subscribers, its key read as a routing key and mapped back,
    QoS 1, its record headers as MQTT 5 user properties."""
    base = unique("k")
    sub = Paho(server, unique("sub"), version=5)
    try:
        sub.subscribe(f"{base}/#", 2)
        producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks="all",
                                 enable_idempotence=False, linger_ms=5)
        try:
            sent = [producer.send(EXCHANGE, key=f"{base}.v1/2.temp".encode(), value=b"21.5",
                                  headers=[(k, v.encode()) for k, v in USER_PROPS]),
                    producer.send(EXCHANGE, key=f"{base}.a+b".encode(), value=b"no MQTT name"),
                    producer.send(EXCHANGE, key=f"{base}.plain".encode(), value=b"no headers")]
            producer.flush(timeout=WAIT)
            for f in sent:
                f.get(timeout=WAIT)
        finally:
            producer.close(timeout=WAIT)
        got = sub.take(2)
        assert [(m.topic, m.payload, m.qos) for m in got] == [
            (f"{base}/v1.2/temp", b"21.5", 1), (f"{base}/plain", b"no headers", 1)]
        assert user_properties(got[0]) == USER_PROPS
        assert user_properties(got[1]) == []
        sub.assert_quiet()
    finally:
        close_all(sub)


def test_a_kafka_transaction_reaches_mqtt_subscribers_when_it_commits(server: LogbusServer) -> None:
    """Records of a Kafka transaction on ``amq.topic`` reach MQTT subscribers when it
    commits, and those of one that aborts never (docs/interop.md, docs/transactions.md)."""
    base = unique("tx")
    sub = Paho(server, unique("sub"), version=5)
    try:
        sub.subscribe(f"{base}/#", 1)
        producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"], transactional_id=unique("txid"))
        try:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(EXCHANGE, key=f"{base}.dropped".encode(), value=b"aborted")
            producer.flush(timeout=WAIT)
            producer.abort_transaction()
            producer.begin_transaction()
            producer.send(EXCHANGE, key=f"{base}.kept".encode(), value=b"committed")
            producer.flush(timeout=WAIT)
            sub.assert_quiet()  # appended, not yet routed
            producer.commit_transaction()
        finally:
            producer.close(timeout=WAIT)
        assert [(m.topic, m.payload) for m in sub.take(1)] == [(f"{base}/kept", b"committed")]
        sub.assert_quiet()
    finally:
        close_all(sub)


# -- topic names both ways (docs/interop.md's table) -----------------------------------------

# (MQTT topic name, AMQP routing key), {b} a unique first level
TOPIC_TABLE = [
    ("{b}/kitchen/temp", "{b}.kitchen.temp"),
    ("{b}/v1.2/status", "{b}.v1/2.status"),
    ("/{b}//b/", ".{b}..b."),
    ("{b}/café au lait/🙂", "{b}.café au lait.🙂"),
    ("{b}/v1.2/with space/température", "{b}.v1/2.with space.température"),
]


@pytest.mark.parametrize(("mqtt_topic", "routing_key"), TOPIC_TABLE, ids=[t for t, _ in TOPIC_TABLE])
def test_topic_names_round_trip_both_ways(server: LogbusServer, mqtt_topic: str, routing_key: str) -> None:
    base = unique("names")
    mqtt_topic, routing_key = mqtt_topic.format(b=base), routing_key.format(b=base)
    sub = Paho(server, unique("sub"), version=5)
    pub = Paho(server, unique("pub"), version=5)
    try:
        sub.subscribe(mqtt_topic, 1)  # the exact name, no wildcard

        async def body() -> None:
            async with await amqp_connect(server) as connection:
                channel = await connection.channel()
                q = await bound_queue(channel, routing_key)  # the exact key, no wildcard
                # MQTT -> AMQP and MQTT
                await asyncio.to_thread(pub.publish, mqtt_topic, b"from mqtt", 1)
                (m,) = await take(q, 1)
                received_key = m.routing_key
                assert (received_key, m.body) == (routing_key, b"from mqtt")
                got = await asyncio.to_thread(sub.next_message)
                assert (got.topic, got.payload) == (mqtt_topic, b"from mqtt")
                # AMQP (the key just received) -> MQTT and AMQP
                assert received_key is not None
                await amqp_publish(channel, received_key, b"from amqp")
                (back,) = await take(q, 1)
                assert (back.routing_key, back.body) == (routing_key, b"from amqp")
                got = await asyncio.to_thread(sub.next_message)
                assert (got.topic, got.payload) == (mqtt_topic, b"from amqp")
                await assert_empty(q, 0.1)

        run(body())
        sub.assert_quiet(0.2)
    finally:
        close_all(sub, pub)


def test_mqtt_filters_bind_as_documented(server: LogbusServer) -> None:
    """``+`` is AMQP's ``*`` (one whole level), ``#`` is ``#``, levels swapped as names are:
    ``v1.2/#`` matches the AMQP key ``v1/2.x.y`` but not ``v1.2.x`` (MQTT ``v1/2/x``)."""
    base = unique("f")
    plus = Paho(server, unique("plus"), version=5)
    hash_ = Paho(server, unique("hash"), version=5)
    try:
        plus.subscribe(f"{base}/+/temp", 1)
        hash_.subscribe(f"{base}/v1.2/#", 1)

        async def body() -> None:
            async with await amqp_connect(server) as connection:
                channel = await connection.channel()
                for key in (f"{base}.kitchen.temp", f"{base}.kitchen.hum", f"{base}.a.b.temp",
                            f"{base}.v1/2.x.y", f"{base}.v1.2.x", f"{base}.v1/2"):
                    await amqp_publish(channel, key, key.encode())

        run(body())
        assert [m.topic for m in plus.take(1)] == [f"{base}/kitchen/temp"]
        # MQTT's '#' also matches the parent level itself (MQTT 3.1.1 section 4.7.1.2)
        assert sorted(m.topic for m in hash_.take(2)) == [f"{base}/v1.2", f"{base}/v1.2/x/y"]
        plus.assert_quiet()
        hash_.assert_quiet(0.1)
    finally:
        close_all(plus, hash_)


def test_filter_with_a_star_level_matches_no_more_than_asked(server: LogbusServer) -> None:
    """docs/interop.md lists a filter level ``*`` as "refused" (``topic_map.filter_to_amqp``
    refuses it); the gateway (room.py) instead binds it as AMQP's ``*`` and filters each
    message exactly, so the subscription still matches only the topic ``<base>/*``. What
    both promise, and what this checks: no subscription silently matches more than asked."""
    base = unique("star")
    sub = Paho(server, unique("sub"), version=5)
    try:
        codes = sub.subscribe(f"{base}/*", 1)
        assert [getattr(c, "value", c) for c in codes] == [1]

        async def body() -> None:
            async with await amqp_connect(server) as connection:
                channel = await connection.channel()
                await amqp_publish(channel, f"{base}.x", b"any word")
                await amqp_publish(channel, f"{base}.*", b"the star itself")

        run(body())
        m = sub.next_message()
        assert (m.topic, m.payload) == (f"{base}/*", b"the star itself")
        sub.assert_quiet()
    finally:
        close_all(sub)
