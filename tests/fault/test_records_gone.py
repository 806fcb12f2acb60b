"""References that point nowhere, under a real `logbus serve` with real clients: a topic
deleted while queues and an MQTT persistent session read it, and a segment damaged
under live queues (cut by recovery after a kill -9).

What must hold (issue 30): deleting a topic that queues read is refused with an error
naming them (HTTP 409, Kafka POLICY_VIOLATION), unless forced; forced, its entries go
and are counted; an entry whose record is gone is dropped and the next one delivered:
no consumer ever sees a connection reset for it; offsets given again after a cut never
deliver an old entry's message twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pika
import pytest
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError

from tests.fault.faultkit import serving, http
from tests.integration.mqtt_clients import Paho
from tests.serverproc import LogbusServer

DEFAULT_TOPIC = "__amqp_default"  # the default exchange's topic: queue q's messages are here


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LogbusServer]:
    with serving(tmp_path) as s:
        yield s


def amqp(server: LogbusServer) -> tuple[pika.BlockingConnection, object]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.ports["amqp"]))
    ch = conn.channel()
    ch.queue_declare("q", durable=True)
    ch.confirm_delivery()
    return conn, ch


def publish(ch: object, bodies: list[bytes]) -> None:
    for b in bodies:
        ch.basic_publish("", "q", b, pika.BasicProperties(delivery_mode=2))  # type: ignore[attr-defined]


def drain(ch: object) -> list[bytes]:
    got = []
    while True:
        method, _, body = ch.basic_get("q", auto_ack=True)  # type: ignore[attr-defined]
        if method is None:
            return got
        got.append(body)


def session(server: LogbusServer) -> Paho:
    c = Paho(server, "td-device", clean=False)
    c.subscribe("td/#", qos=1)
    return c


def test_a_topic_queues_read_is_not_deleted_unless_forced_and_then_nothing_resets(server: LogbusServer) -> None:
    s = server
    conn, ch = amqp(s)
    publish(ch, [b"old-%d" % i for i in range(100)])
    dev = session(s)
    dev.close()  # offline: its session queue keeps what comes
    pub = Paho(s, "td-publisher")
    for i in range(50):
        pub.publish("td/x", b"mqtt-old-%d" % i, qos=1)

    status, body = http(s, "DELETE", f"/api/topics/{DEFAULT_TOPIC}")
    assert status == 409 and body["error"] == "topic_in_use", body
    assert "queue 'q' of vhost '/' (100 messages)" in body["message"], body
    status, body = http(s, "DELETE", "/api/topics/amq.topic")
    assert status == 409 and "(50 messages)" in body["message"], body
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{s.ports['kafka']}")
    with pytest.raises(KafkaError, match="PolicyViolation|POLICY_VIOLATION|44"):
        admin.delete_topics(["amq.topic"])
    admin.close()

    status, _ = http(s, "DELETE", f"/api/topics/{DEFAULT_TOPIC}?force=true")
    assert status == 204
    status, _ = http(s, "DELETE", "/api/topics/amq.topic?force=true")
    assert status == 204
    assert drain(ch) == []  # the same connection: no reset
    publish(ch, [b"new-%d" % i for i in range(10)])
    assert drain(ch) == [b"new-%d" % i for i in range(10)]

    dev = Paho(s, "td-device", clean=False)  # back: the old messages are gone, no error
    pub.publish("td/x", b"mqtt-new", qos=1)
    got = dev.next_message()
    assert got.payload == b"mqtt-new"
    dev.assert_quiet(0.5)
    dev.close()
    pub.close()
    metrics = http_text(s, "/metrics")
    assert "logbus_queue_records_gone_total 150.0" in metrics, metrics[-2000:]

    publish(ch, [b"last"])
    conn.close()
    s.kill()
    s.start()
    conn, ch = amqp(s)
    assert drain(ch) == [b"last"]
    conn.close()


def http_text(server: LogbusServer, path: str) -> str:
    import urllib.request

    from tests.serverproc import ADMIN_AUTH

    with urllib.request.urlopen(urllib.request.Request(server.http_url + path, headers=ADMIN_AUTH), timeout=10) as r:
        return r.read().decode()


def test_a_segment_cut_by_recovery_drops_what_is_past_the_cut_and_gives_the_offsets_again(
        server: LogbusServer) -> None:
    s = server
    conn, ch = amqp(s)
    publish(ch, [b"m-%03d" % i + b"." * 200 for i in range(60)])
    conn.close()
    assert s.kill() == -9
    segment = sorted((s.data_dir / "log" / DEFAULT_TOPIC / "0").glob("*.log"))[-1]
    size = segment.stat().st_size
    with open(segment, "r+b") as f:  # 200 bytes of garbage in the middle
        f.seek(size // 2)
        f.write(b"\xa5" * 200)
    s.start()
    log = s.log_text()
    assert f"{DEFAULT_TOPIC}/0 now ends at offset" in log and "queue entries and 0 timers" in log, log[-3000:]
    conn, ch = amqp(s)
    got = drain(ch)
    assert 0 < len(got) < 60 and got == [b"m-%03d" % i + b"." * 200 for i in range(len(got))]
    publish(ch, [b"after-%d" % i for i in range(5)])  # given the offsets past the cut again
    assert drain(ch) == [b"after-%d" % i for i in range(5)]
    conn.close()
