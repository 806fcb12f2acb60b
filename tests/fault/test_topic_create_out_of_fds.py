"""A topic created while the broker is out of file descriptors, at every step of the
creation: a real `logbus serve` is held at 0, 1, 2, ... free descriptors (fdlimit.py)
while a client (AMQP exchange.declare, HTTP, Kafka CreateTopics) creates a
three-partition topic, until the creation succeeds.

What must hold at every step: the client gets its protocol's error (AMQP: a close with a
reply code; HTTP: 503/507 with a JSON error; Kafka: an error code), never a reset; no file and no
topic directory is left in the log; the same name can be created once descriptors are
free; after a restart no temporary of a failed creation is left.
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Iterator

import kafka.errors as Errors
import pika
import pika.exceptions
import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from tests.fault.fdlimit import descriptors_free
from tests.serverproc import ADMIN_AUTH, LogbusServer

PARTITIONS = 3
MOST_FREE = 40  # a creation needs a few descriptors per partition; far fewer than this


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LogbusServer]:
    s = LogbusServer(tmp_path / "srv", args=["--default-flush", "sync", "--default-partitions", str(PARTITIONS)])
    try:
        s.start()
        yield s
    finally:
        s.cleanup()


def log_files(server: LogbusServer) -> tuple[set[str], set[str]]:
    """(every file under log/, every topic directory): what a failed creation must not change."""
    root = server.data_dir / "log"
    files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    topics = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")}
    return files, topics


def no_temporaries(server: LogbusServer) -> None:
    """The log's own directories (dot-names) hold nothing after a start."""
    root = server.data_dir / "log"
    for d in root.iterdir():
        if d.is_dir() and d.name.startswith("."):
            assert list(d.iterdir()) == [], f"left in {d}: {list(d.rglob('*'))}"


def amqp_declare(server: LogbusServer, name: str, free: int) -> bool:
    """exchange.declare with ``free`` descriptors left: True if declared; a refusal must be
    an AMQP close with a reply code and text."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.ports["amqp"]))
    ch = conn.channel()
    try:
        with descriptors_free(server.pid, free):
            ch.exchange_declare(name, "topic", durable=True)
    except (pika.exceptions.ConnectionClosedByBroker, pika.exceptions.ChannelClosedByBroker) as e:
        assert e.reply_code in (506, 541), e
        assert e.reply_text, e
        return False
    finally:
        if conn.is_open:
            conn.close()
    return True


def http_create(server: LogbusServer, name: str, free: int) -> bool:
    """POST /api/topics with ``free`` descriptors left (the connection made before): True
    if created; a refusal must be 503 or 507 with a JSON error."""
    web = http.client.HTTPConnection("127.0.0.1", server.ports["http"], timeout=30)
    web.request("GET", "/healthz")  # accepted, and kept alive: the request below needs no new socket
    assert web.getresponse().read()
    try:
        with descriptors_free(server.pid, free):
            body = json.dumps({"name": name, "partitions": PARTITIONS})
            web.request("POST", "/api/topics", body, {**ADMIN_AUTH, "Content-Type": "application/json"})
            r = web.getresponse()
            answer = json.loads(r.read())
    finally:
        web.close()
    if r.status == 201:
        return True
    assert r.status in (503, 507), (r.status, answer)
    assert answer.get("error") and answer.get("message"), answer
    return False


def kafka_create_topics(server: LogbusServer, name: str, free: int) -> bool:
    """CreateTopics with ``free`` descriptors left (the admin client connected before):
    True if created; a refusal must be a Kafka error code (KAFKA_STORAGE_ERROR)."""
    admin = KafkaAdminClient(bootstrap_servers=server.addresses["kafka"], request_timeout_ms=20_000)
    try:
        admin.describe_cluster()  # connected to the controller: the request below needs no new socket
        with descriptors_free(server.pid, free):
            admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    except Errors.KafkaStorageError as e:
        assert "could not be" in str(e), e
        return False
    finally:
        admin.close()
    return True


CREATORS = {"amqp": amqp_declare, "http": http_create, "kafka": kafka_create_topics}


@pytest.mark.parametrize("protocol", sorted(CREATORS))
def test_a_topic_created_out_of_descriptors_at_every_step_is_whole_or_absent(server: LogbusServer,
                                                                            protocol: str) -> None:
    create = CREATORS[protocol]
    name = f"emfile-{protocol}"
    before = log_files(server)
    refused = 0
    for free in range(MOST_FREE):
        if create(server, name, free):
            break
        refused += 1
        assert log_files(server) == before, f"a creation refused with {free} descriptors free left files"
    else:
        pytest.fail(f"{name} not created with {MOST_FREE} descriptors free")
    assert refused >= 1, "no step ran out of descriptors"
    files, topics = log_files(server)
    assert name in topics

    server.restart()
    no_temporaries(server)
    assert name in log_files(server)[1]
    log = server.log_text()
    assert "Unhandled error in Deferred" not in log and "Unhandled Error" not in log, log[-3000:]
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.ports["amqp"]))
    ch = conn.channel()
    ch.exchange_declare("emfile-after", "topic", durable=True)  # and a new one, with descriptors free
    ch.queue_declare("emfile-q", durable=True)
    ch.queue_bind("emfile-q", "emfile-after", "#")
    ch.confirm_delivery()
    ch.basic_publish("emfile-after", "a", b"hello", pika.BasicProperties(delivery_mode=2))
    assert ch.basic_get("emfile-q", auto_ack=True)[2] == b"hello"
    conn.close()
