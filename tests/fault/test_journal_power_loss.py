"""A confirmed message is in every queue it was routed to after a power loss, although the
state store's write-ahead log is no longer synced for the confirm (docs/decisions/0045).

The power-loss model of the state store is its write-ahead log cut back: what a power
loss drops are the writes never synced. Every RocksDB write after the noted point is
unsynced here (the partitions' first journal marks, which are synced, are made before
it, by the warm-up), so cutting the newest ``state/NNNNNN.log`` back to its size at that
point, after a kill -9, is what a power loss at the kill could leave of it; the log's
records were synced before their confirms, and a kill -9 keeps the rest of the page
cache. At the restart the records past the journal's marks are routed again
(``core/queues/redo.py``): every confirmed message must be in each of its queues exactly
once. Covered: AMQP to a direct and a topic exchange with two queues and through the
default exchange, a delayed publish, a Kafka-produced record on an exchange's topic, an
MQTT QoS 1 publish to a subscribed persistent session. A plain kill -9 (no cut) once the
journal has written its batch (at most ``COMMIT_INTERVAL`` after the turn, decision 0057)
redoes nothing: no acked message comes back.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pika
import pytest
from kafka import KafkaProducer

from tests.integration.mqtt_clients import Paho
from tests.fault.faultkit import drain
from tests.serverproc import LogbusServer, ServerFactory

N = 15  # messages of each kind after the noted point
DELAY_MS = 1500
REDONE = "records past the queue journal's marks routed again"
BATCHES = "logbus_queue_journal_batches_total"


def journal_written(server: LogbusServer) -> None:
    """Wait for a batch of the queue journal written after everything handled so far
    (it carries every change and mark owed: the journal writes at most once per
    ``COMMIT_INTERVAL``)."""
    before = server.metric(BATCHES)
    deadline = time.monotonic() + 30
    while server.metric(BATCHES) <= before:
        assert time.monotonic() < deadline, "no journal batch written"
        time.sleep(0.01)  # polling the broker's own count of its batches, with a deadline


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[ServerFactory]:
    factory = ServerFactory(tmp_path)
    yield factory
    factory.cleanup()


def amqp(server: LogbusServer) -> pika.BlockingConnection:
    host, port = server.host_port("amqp")
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=host, port=port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1))


def declare(ch: Any) -> None:
    ch.exchange_declare("xd", "direct", durable=True)
    ch.exchange_declare("xt", "topic", durable=True)
    ch.exchange_declare("xdelay", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
    ch.exchange_declare("xk", "direct", durable=True)
    for q in ("q1", "q2", "q3"):
        ch.queue_declare(q, durable=True)
    ch.queue_bind("q1", "xd", "k")
    ch.queue_bind("q2", "xd", "k")
    ch.queue_bind("q1", "xt", "a.*")
    ch.queue_bind("q2", "xt", "a.#")
    ch.queue_bind("q1", "xdelay", "k")
    ch.queue_bind("q3", "xk", "kk")


def publish_round(server: LogbusServer, ch: Any, producer: KafkaProducer, mqtt: Paho, tag: str,
                  n: int) -> dict[str, list[bytes]]:
    """``n`` confirmed messages of each kind; what each queue must hold for them."""
    persistent = pika.BasicProperties(delivery_mode=2)
    want: dict[str, list[bytes]] = {"q1": [], "q2": [], "q3": [], "mqtt": []}
    futures = []
    for i in range(n):
        d, t, y, k, m, e = (f"{kind}-{tag}-{i}".encode() for kind in "dtykme")
        ch.basic_publish("xd", "k", d, persistent)  # confirm mode: returns once confirmed
        ch.basic_publish("", "q2", e, persistent)  # the default exchange
        ch.basic_publish("xt", "a.b", t, persistent)
        ch.basic_publish("xdelay", "k", y, pika.BasicProperties(delivery_mode=2, headers={"x-delay": DELAY_MS}))
        futures.append(producer.send("xk", key=b"kk", value=k))
        mqtt.publish("s/x", m, qos=1)  # returns once PUBACKed
        want["q1"] += [d, t, y]
        want["q2"] += [d, t, e]
        want["q3"].append(k)
        want["mqtt"].append(m)
    producer.flush(timeout=20)
    for f in futures:
        f.get(timeout=20)  # acks=all: acknowledged once durable
    return want


def newest_wal(server: LogbusServer) -> Path:
    logs = sorted((server.data_dir / "state").glob("*.log"), key=lambda p: int(p.stem))
    assert logs, "no RocksDB write-ahead log"
    return logs[-1]


def collect(server: LogbusServer, want: dict[str, list[bytes]]) -> dict[str, list[bytes]]:
    """Everything each queue and the MQTT session hold, the delayed messages waited for."""
    got: dict[str, list[bytes]] = {"q1": [], "q2": [], "q3": [], "mqtt": []}
    connection = amqp(server)
    try:
        ch = connection.channel()
        deadline = time.monotonic() + DELAY_MS / 1000 + 15
        while True:
            for q in ("q1", "q2", "q3"):
                got[q] += drain(ch, q)
            if Counter(got["q1"]) >= Counter(want["q1"]) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for q in ("q1", "q2", "q3"):
            got[q] += drain(ch, q)
    finally:
        connection.close()
    session = Paho(server, "sub-1", clean=False)
    try:
        deadline = time.monotonic() + 15
        while Counter(got["mqtt"]) < Counter(want["mqtt"]) and time.monotonic() < deadline:
            try:
                got["mqtt"].append(session.next_message(0.5).payload)
            except AssertionError:
                pass
        session.assert_quiet(0.3)
    finally:
        session.close()
    return got


def setup(server: LogbusServer) -> tuple[Any, Any, KafkaProducer, Paho]:
    connection = amqp(server)
    ch = connection.channel()
    declare(ch)
    ch.confirm_delivery()
    sub = Paho(server, "sub-1", clean=False)
    assert sub.subscribe("s/x", qos=1) == [1]
    sub.close()  # a persistent session, offline: its queue keeps what comes
    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks="all", linger_ms=5)
    return connection, ch, producer, Paho(server, "pub-1")


def test_a_power_loss_of_the_state_stores_unsynced_writes_loses_no_confirmed_message(
        servers: ServerFactory) -> None:
    server = servers.start()
    connection, ch, producer, pub = setup(server)
    want = publish_round(server, ch, producer, pub, "warm", 1)  # every partition's first mark (synced)
    journal_written(server)  # the batch with the first marks, before the point the cut goes back to
    wal = newest_wal(server)
    size = wal.stat().st_size
    more = publish_round(server, ch, producer, pub, "cut", N)
    for k, v in more.items():
        want[k] += v
    assert newest_wal(server) == wal and wal.stat().st_size > size
    pub.close()
    producer.close(timeout=5)
    connection.close()  # (everything confirmed)
    assert server.kill() == -9
    os.truncate(wal, size)  # what a power loss takes: the writes never synced
    server.restart()
    assert REDONE in server.log_text(), "the cut took nothing: the test tests nothing"
    got = collect(server, want)
    for q in want:
        counts = Counter(got[q])
        twice = [m for m, c in counts.items() if c > 1]
        assert not twice, f"{q}: delivered more than once: {twice}"
        assert sorted(got[q]) == sorted(want[q]), f"{q}: missing {sorted(set(want[q]) - set(got[q]))}"


def test_a_kill_9_redoes_nothing_and_brings_no_acked_message_back(servers: ServerFactory) -> None:
    server = servers.start()
    connection, ch, producer, pub = setup(server)
    want = publish_round(server, ch, producer, pub, "w", N)
    for _ in range(N):  # a third of q1 acked
        method, _, body = ch.basic_get("q1")
        ch.basic_ack(method.delivery_tag)
        want["q1"].remove(body)
    ch.queue_declare("q1", passive=True)  # answered after the acks were handled
    journal_written(server)  # and written, with the marks of every partition appended to
    pub.close()
    producer.close(timeout=5)
    connection.close()
    assert server.kill() == -9
    server.restart()
    assert REDONE not in server.log_text()
    got = collect(server, want)
    for q in want:
        assert sorted(got[q]) == sorted(want[q]), q
