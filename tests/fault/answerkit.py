"""Publishers that each send one message and report the broker's answer in their
protocol's terms, or that none came: MQTT 3.1.1 and 5.0 at QoS 1 and 2 (paho), AMQP with
publisher confirms (pika), Kafka with acks=all (confluent-kafka).

    pubs = [MqttPublisher(server, 4, 1, "t/answer/a"), AmqpPublisher(server, "q"), ...]
    answers = publish_together(pubs, deadline=10)   # all at once, each in its own thread
    answers["mqtt3-qos1"]  -> Answer(confirmed=False, what="closed", seconds=0.004)

Each publisher keeps ``confirmed``: the bodies the broker confirmed, to be read back.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import pika
from confluent_kafka import Producer

from tests.integration.mqtt_clients import Paho


@dataclass(frozen=True)
class Answer:
    confirmed: bool  # the broker took it (PUBACK/PUBREC below 0x80, basic.ack, no Kafka error)
    what: str  # the answer as the protocol says it
    seconds: float  # from the publish to the answer


class Publisher(Protocol):
    name: str
    confirmed: list[bytes]

    def publish(self, deadline: float) -> Answer | None: ...

    def close(self) -> None: ...


def body(name: str) -> bytes:
    return f"{name}-{uuid.uuid4().hex}".encode()


class MqttPublisher:
    """A paho client; a refusal is a PUBACK/PUBREC of 0x80 or more (5.0), a DISCONNECT or
    the connection closed (3.1.1 has no other way to say no). A new connection is made
    for a publish after one was closed."""

    def __init__(self, server: Any, version: int, qos: int, topic: str, *, client_id: str = "") -> None:
        self.server = server
        self.version = version
        self.qos = qos
        self.topic = topic
        self.client_id = client_id
        self.name = f"mqtt{3 if version == 4 else 5}-qos{qos}"
        self.confirmed: list[bytes] = []
        self.client: Paho | None = None

    def _connected(self) -> Paho:
        if self.client is None:
            self.client = Paho(self.server, self.client_id, version=self.version)
            self.client.client.reconnect_delay_set(60, 60)  # a closed connection stays closed
        return self.client

    def publish(self, deadline: float) -> Answer | None:
        c = self._connected()
        events: queue.Queue[tuple[str, Any]] = queue.Queue()
        c.client.on_publish = lambda cl, u, mid, rc, props: events.put(("answer", (mid, rc)))
        c.client.on_disconnect = lambda cl, u, flags, rc, props: events.put(("closed", rc))
        b = body(self.name)
        t0 = time.monotonic()
        info = c.client.publish(self.topic, b, self.qos)
        while (left := t0 + deadline - time.monotonic()) > 0:
            try:
                kind, detail = events.get(timeout=left)
            except queue.Empty:
                break
            took = time.monotonic() - t0
            if kind == "closed":
                self.drop()
                return Answer(False, f"closed ({detail})", took)
            mid, rc = detail
            if mid == info.mid:
                if rc.is_failure:
                    return Answer(False, f"{'PUBACK' if self.qos == 1 else 'PUBREC or PUBCOMP'} 0x{rc.value:02X}", took)
                self.confirmed.append(b)
                return Answer(True, "PUBACK" if self.qos == 1 else "PUBCOMP", took)
        return None

    def drop(self) -> None:
        if self.client is not None:
            self.client.drop()
            self.client = None

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


class AmqpPublisher:
    """pika with publisher confirms, to ``exchange`` with ``routing_key``; a nack, or the
    channel or connection closed by the broker, is a refusal."""

    def __init__(self, server: Any, exchange: str, routing_key: str) -> None:
        self.server = server
        self.exchange = exchange
        self.routing_key = routing_key
        self.name = "amqp"
        self.confirmed: list[bytes] = []
        self.conn: Any = None
        self.ch: Any = None

    def _channel(self) -> Any:
        if self.conn is None or self.conn.is_closed:
            self.conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.server.ports["amqp"]))
            self.ch = None
        if self.ch is None or self.ch.is_closed:
            self.ch = self.conn.channel()
            self.ch.confirm_delivery()
        return self.ch

    def publish(self, deadline: float) -> Answer | None:
        ch = self._channel()
        b = body(self.name)
        t0 = time.monotonic()
        try:
            ch.basic_publish(self.exchange, self.routing_key, b, pika.BasicProperties(delivery_mode=2))
        except pika.exceptions.NackError:
            return Answer(False, "basic.nack", time.monotonic() - t0)
        except (pika.exceptions.ChannelClosedByBroker, pika.exceptions.ConnectionClosedByBroker) as e:
            return Answer(False, f"closed {e.reply_code} {e.reply_text}", time.monotonic() - t0)
        self.confirmed.append(b)
        return Answer(True, "basic.ack", time.monotonic() - t0)

    def close(self) -> None:
        if self.conn is not None and self.conn.is_open:
            self.conn.close()


class KafkaPublisher:
    """confluent-kafka, acks=all, no retries: the delivery report is the answer."""

    def __init__(self, server: Any, topic: str) -> None:
        self.topic = topic
        self.name = "kafka"
        self.confirmed: list[bytes] = []
        self.producer = Producer({"bootstrap.servers": f"127.0.0.1:{server.ports['kafka']}", "acks": "all",
                                  "enable.idempotence": False, "retries": 0, "linger.ms": 0,
                                  "message.timeout.ms": 60_000})

    def publish(self, deadline: float) -> Answer | None:
        got: list[Any] = []
        b = body(self.name)
        t0 = time.monotonic()
        self.producer.produce(self.topic, b, on_delivery=lambda err, msg: got.append(err))
        while not got and time.monotonic() - t0 < deadline:
            self.producer.poll(0.05)
        if not got:
            return None
        took = time.monotonic() - t0
        if got[0] is not None:
            return Answer(False, got[0].name(), took)
        self.confirmed.append(b)
        return Answer(True, "acked", took)

    def close(self) -> None:
        self.producer.flush(10)


def publish_together(pubs: list[Any], deadline: float) -> dict[str, Answer | None]:
    """One publish on each, all at once (each in its own thread, so that they reach the
    broker in the same few reactor turns); each one's answer, None if none came within
    ``deadline`` seconds."""
    answers: dict[str, Answer | None] = {}
    start = threading.Barrier(len(pubs))

    def run(p: Any) -> None:
        start.wait()
        answers[p.name] = p.publish(deadline)

    threads = [threading.Thread(target=run, args=(p,), daemon=True) for p in pubs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(deadline + 5)
    return {p.name: answers.get(p.name) for p in pubs}
