"""Interop (docs/architecture.md section 4): a Kafka topic behind an AMQP exchange is
routable. Records a Kafka producer appends reach the AMQP queues bound to that
exchange, with the record key as routing key and the record headers as headers; the
AMQP consumer sees them as published to the exchange, before and after a restart.
Real clients on both sides: kafka-python produces, pika consumes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pika
import pytest
from kafka import KafkaProducer

from tests.serverproc import LogbusServer


@pytest.fixture
def server(logbus_server: Callable[..., LogbusServer]) -> LogbusServer:
    return logbus_server()


def amqp(server: LogbusServer) -> pika.BlockingConnection:
    host, port = server.host_port("amqp")
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=host, port=port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1))


def produce(server: LogbusServer, topic: str, records: list[tuple[bytes, bytes, list[tuple[str, bytes]]]],
            *, idempotent: bool = False) -> None:
    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks="all",
                             enable_idempotence=idempotent, linger_ms=20)
    try:
        futures = [producer.send(topic, key=k, value=v, headers=h) for k, v, h in records]
        producer.flush(timeout=20)
        for f in futures:
            f.get(timeout=20)
    finally:
        producer.close(timeout=10)


def drain(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> Iterator[tuple[str, str, bytes, dict[str, object], bool]]:
    while True:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return
        yield method.exchange, method.routing_key, body, dict(props.headers or {}), method.redelivered


def declare(server: LogbusServer) -> None:
    connection = amqp(server)
    try:
        ch = connection.channel()
        ch.exchange_declare("orders", "topic", durable=True)
        ch.queue_declare("eu-orders", durable=True)
        ch.queue_bind("eu-orders", "orders", "eu.#")
        ch.queue_declare("all-orders", durable=True)
        ch.queue_bind("all-orders", "orders", "#")
    finally:
        connection.close()


def test_kafka_records_reach_the_queues_bound_to_their_topics_exchange(server: LogbusServer) -> None:
    declare(server)
    produce(server, "orders", [
        (b"eu.de", b"order 1", [("region", b"eu")]),
        (b"us.ny", b"order 2", []),
        (b"eu.fr", b"order 3", []),
    ])
    connection = amqp(server)
    try:
        ch = connection.channel()
        eu = list(drain(ch, "eu-orders"))
        assert [(x, rk, body) for x, rk, body, _, _ in eu] == [
            ("orders", "eu.de", b"order 1"), ("orders", "eu.fr", b"order 3")]
        assert eu[0][3]["region"] in ("eu", b"eu")  # the record header, as an AMQP header
        assert [rk for _, rk, _, _, _ in drain(ch, "all-orders")] == ["eu.de", "us.ny", "eu.fr"]
    finally:
        connection.close()


def test_routed_kafka_records_survive_a_restart(server: LogbusServer) -> None:
    declare(server)
    produce(server, "orders", [(b"eu.it", b"order 4", []), (b"asia.jp", b"order 5", [])], idempotent=True)
    server.restart(same_ports=True)
    connection = amqp(server)
    try:
        ch = connection.channel()
        assert [(x, rk, body) for x, rk, body, _, _ in drain(ch, "eu-orders")] == [("orders", "eu.it", b"order 4")]
        assert [body for _, _, body, _, _ in drain(ch, "all-orders")] == [b"order 4", b"order 5"]
    finally:
        connection.close()


def test_a_topic_behind_no_exchange_is_only_appended(server: LogbusServer) -> None:
    declare(server)
    produce(server, "plain-topic", [(b"eu.de", b"x", [])])
    connection = amqp(server)
    try:
        ch = connection.channel()
        assert list(drain(ch, "eu-orders")) == [] and list(drain(ch, "all-orders")) == []
    finally:
        connection.close()
