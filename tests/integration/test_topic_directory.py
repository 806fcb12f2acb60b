"""A topic's directory that holds files the broker did not write (another process put
them there) is never deleted by creating that topic, through any path a client has:
a Kafka producer's auto-create and CreateTopics, an AMQP exchange.declare, against a real
``logbus serve``. The client that asked gets its protocol's error, never a reset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kafka.errors as Errors
import pika
import pika.exceptions
import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic


def tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def foreign_files(tdir: Path) -> dict[str, bytes]:
    (tdir / "0").mkdir(parents=True)
    (tdir / "0" / "00000000000000000000.log").write_bytes(b"2,000 readings someone else wrote" * 100)
    (tdir / "1").mkdir()
    (tdir / "1" / "notes.txt").write_text("not the broker's\n")
    return tree(tdir)


def test_auto_create_and_create_topics_leave_foreign_files_alone(logbus_server: Any) -> None:
    server = logbus_server(listeners={"amqp": "off", "mqtt": "off", "http": "off"})
    tdir = server.data_dir / "log" / "telemetry"
    before = foreign_files(tdir)

    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"], max_block_ms=3000)
    try:
        with pytest.raises(Errors.KafkaTimeoutError):
            producer.send("telemetry", b"21.5").get(10)  # auto-create refused: no metadata
    finally:
        producer.close(5)
    assert tree(tdir) == before
    assert f"its directory {tdir} already holds files" in server.log_text()

    admin = KafkaAdminClient(bootstrap_servers=server.addresses["kafka"], request_timeout_ms=10_000)
    try:
        with pytest.raises(Errors.TopicAlreadyExistsError, match="already holds files"):
            admin.create_topics([NewTopic("telemetry", 2, 1)])
    finally:
        admin.close()
    assert tree(tdir) == before
    assert server.running()


def test_exchange_declare_on_foreign_files_closes_the_connection_with_541(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "mqtt": "off", "http": "off"})
    tdir = server.data_dir / "log" / "telemetry"
    before = foreign_files(tdir)
    for _ in range(2):  # and again: the refusal leaves nothing that changes the next one
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.ports["amqp"]))
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            conn.channel().exchange_declare("telemetry", "topic", durable=True)
        assert closed.value.reply_code == 541, closed.value
        assert "already holds files" in closed.value.reply_text, closed.value
        assert tree(tdir) == before
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.ports["amqp"]))
    conn.channel().exchange_declare("telemetry-2", "topic", durable=True)  # the broker serves on
    conn.close()
