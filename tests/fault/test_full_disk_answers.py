"""A full disk that makes the state store refuse writes, reached through each path that
writes it (the AMQP default exchange, the topic exchange amq.topic, an MQTT persistent
session's queue), under a real `logbus serve` with a small tmpfs as its data directory.

While the store refuses, every publisher (MQTT 3.1.1 and 5.0 at QoS 1 and 2, AMQP with
confirms, Kafka with acks=all) publishes at once and must be answered in its protocol's
terms: the issue's bound is 1 s, waited for here as an event with a generous deadline
(a silent broker never answers; the time each answer took is printed). The server's log
holds no traceback. Once the space is back, without a restart, new publishes are
confirmed, and every message confirmed before is read back.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Iterator

import pika
import pytest
from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.errors import KafkaError
from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

from logbus.gateway.mqtt import NO_PROPERTIES, ConnAck, Connect, Disconnect, Properties, Subscribe, Subscription

from tests.fault.answerkit import AmqpPublisher, Answer, KafkaPublisher, MqttPublisher, publish_together
from tests.fault.faultkit import Tmpfs, drain, http, on_a_small_disk
from tests.integration.mqtt_clients import Paho, Raw
from tests.kafka_wire import Wire
from tests.serverproc import LogbusServer

ANSWER_DEADLINE = 10.0  # the bound is 1 s: this only tells an answer from none
PATHS = ("default-exchange", "topic-exchange", "mqtt-session")
COORDINATOR_NOT_AVAILABLE = 15  # Kafka's, retriable


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LogbusServer, Tmpfs]]:
    with on_a_small_disk(tmp_path_factory.mktemp("full-disk") / "srv", "48m") as both:
        yield both


def health(s: LogbusServer) -> tuple[int, Any]:
    return http(s, "GET", "/healthz")


def wait_health(s: LogbusServer, want: Any, timeout: float = 30.0) -> Any:
    """/healthz until ``want(status, body)``; its last body."""
    deadline = time.monotonic() + timeout
    while True:
        status, got = health(s)
        if want(status, got):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"/healthz never got there: {status} {got}")
        time.sleep(0.05)


def state_store_refuses(status: int, got: Any) -> bool:
    return status == 503 and any(r.startswith("state store") for r in got.get("reasons", ()))


class Filler:
    """Publishes small messages down one path until the full disk refuses one. Which file
    needed a new page first is chance: when it was the log's, the state store has not
    refused a write yet, and durable declares are made until it refuses one (the disk is
    full either way)."""

    def __init__(self, s: LogbusServer, path: str, tag: str) -> None:
        self.s, self.path, self.tag = s, path, tag
        self.confirmed: list[bytes] = []
        if path == "mqtt-session":
            self.mqtt: MqttPublisher | None = MqttPublisher(s, 5, 1, f"{tag}/session/fill")
            self.amqp: AmqpPublisher | None = None
        else:
            self.mqtt = None
            exchange, key = ("", f"{tag}-default") if path == "default-exchange" else ("amq.topic", f"{tag}.fill")
            self.amqp = AmqpPublisher(s, exchange, key)

    def run(self, timeout: float = 60.0) -> None:
        pub: Any = self.mqtt or self.amqp
        deadline = time.monotonic() + timeout
        n = 0
        while True:
            answer = pub.publish(ANSWER_DEADLINE)
            assert answer is not None, f"the filler ({self.path}) got no answer"
            n += 1
            if not answer.confirmed:
                break
            assert time.monotonic() < deadline, f"{n} publishes, none refused"
        self.confirmed = pub.confirmed
        declares = 0 if state_store_refuses(*health(self.s)) else self._declare_until_refused(deadline)
        print(f"{self.path}: refused after {n} publishes; the state store refused a write"
              + (f" after {declares} declares" if declares else ""))

    def _declare_until_refused(self, deadline: float) -> int:
        n = 0
        while not state_store_refuses(*health(self.s)):
            assert time.monotonic() < deadline, f"the state store never refused a write: {health(self.s)}"
            conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.s.ports["amqp"]))
            try:
                ch = conn.channel()
                while time.monotonic() < deadline:
                    ch.queue_declare(f"{self.tag}-declared{n}", durable=True)
                    n += 1
            except pika.exceptions.ConnectionClosedByBroker as e:  # the store refused it
                assert e.reply_code == 541, e
            finally:
                if conn.is_open:
                    conn.close()
        return n

    def close(self) -> None:
        (self.mqtt or self.amqp).close()  # type: ignore[union-attr]


def no_traceback(s: LogbusServer, since: int) -> None:
    text = s.log_text()[since:]
    assert "Traceback" not in text, "the server logged a traceback:\n" + text[text.index("Traceback") - 2000:][:6000]


def read_queue(s: LogbusServer, queue: str) -> list[bytes]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", s.ports["amqp"]))
    try:
        return drain(conn.channel(), queue)
    finally:
        conn.close()


def read_topic(s: LogbusServer, topic: str) -> list[bytes]:
    c = KafkaConsumer(topic, bootstrap_servers=f"127.0.0.1:{s.ports['kafka']}", auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        return [m.value for m in c]
    finally:
        c.close()


def read_session(s: LogbusServer, client_id: str, want: set[bytes]) -> set[bytes]:
    """Take the persistent session up again and receive until ``want`` came (or 20 s)."""
    c = Paho(s, client_id, version=4, clean=False)
    got: set[bytes] = set()
    deadline = time.monotonic() + 20
    try:
        while not want <= got and time.monotonic() < deadline:
            try:
                got.add(c.next_message(timeout=max(0.1, deadline - time.monotonic())).payload)
            except AssertionError:
                break
    finally:
        c.close()
    return got


@pytest.mark.parametrize("path", PATHS)
def test_every_publisher_is_answered_while_the_state_store_refuses_and_nothing_confirmed_is_lost(
        server: tuple[LogbusServer, Tmpfs], path: str) -> None:
    s, fs = server
    wait_health(s, lambda status, got: status == 200)  # the case before may have just freed the space
    since = len(s.log_text())
    tag = f"full{uuid.uuid4().hex[:8]}"
    status, _ = http(s, "POST", "/api/topics", {"name": f"{tag}-kafka", "partitions": 1, "config": {"flush": "sync"}})
    assert status == 201, status
    setup = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", s.ports["amqp"]))
    ch = setup.channel()
    ch.queue_declare(f"{tag}-default", durable=True)
    ch.queue_declare(f"{tag}-topic", durable=True)  # where MQTT publishes and amq.topic's land
    ch.queue_bind(f"{tag}-topic", "amq.topic", f"{tag}.#")
    setup.close()
    session_id = f"{tag}-session"
    if path == "mqtt-session":  # a persistent session, offline: what reaches it is in its queue
        sub = Paho(s, session_id, version=4, clean=False)
        assert sub.subscribe(f"{tag}/session/#", qos=1) == [1]
        sub.close()

    pubs: list[Any] = [MqttPublisher(s, v, q, f"{tag}/answer/{v}{q}") for v in (4, 5) for q in (1, 2)]
    pubs += [AmqpPublisher(s, "", f"{tag}-default"), KafkaPublisher(s, f"{tag}-kafka")]
    for p in pubs:  # connected, and each path used once (topics made) before the disk fills
        assert p.publish(ANSWER_DEADLINE).confirmed, p.name  # type: ignore[union-attr]

    filler = Filler(s, path, tag)
    ballast = fs.fill(leave=256 << 10)
    try:
        filler.run()
        answers = publish_together(pubs, ANSWER_DEADLINE)
    finally:
        ballast.unlink()
    print({name: a for name, a in answers.items()})
    silent = [name for name, a in answers.items() if a is None]
    assert not silent, f"no answer within {ANSWER_DEADLINE} s for {silent}: {answers}"
    no_traceback(s, since)

    # space again: the broker resumes by itself, every publisher is confirmed
    wait_health(s, lambda status, got: status == 200)
    again: dict[str, Answer | None] = {p.name: p.publish(ANSWER_DEADLINE) for p in pubs}
    refused = {name: a for name, a in again.items() if a is None or not a.confirmed}
    assert not refused, f"not confirmed after the space came back: {refused}"
    filler.close()
    for p in pubs:
        p.close()

    # every confirmed message is there
    default_queue = read_queue(s, f"{tag}-default")  # AMQP's, and the default-exchange filler's
    topic_queue = read_queue(s, f"{tag}-topic")  # MQTT's, and the topic-exchange filler's
    held = {"amqp": default_queue, "kafka": read_topic(s, f"{tag}-kafka")}
    for p in pubs:
        got = set(held.get(p.name, topic_queue))
        lost = set(p.confirmed) - got
        assert not lost, f"{p.name}: {len(lost)} of {len(p.confirmed)} confirmed messages lost"
    filled = set(filler.confirmed)
    if path == "mqtt-session":
        got = read_session(s, session_id, filled)
    else:
        got = set(default_queue if path == "default-exchange" else topic_queue)
    assert filled <= got, f"the filler: {len(filled - got)} of {len(filled)} confirmed messages lost"
    no_traceback(s, since)


def raw_connect(s: LogbusServer, cid: str, version: int) -> tuple[Raw, ConnAck | None]:
    """A CONNECT of a session that outlives its connection: the CONNACK (None: closed)."""
    raw = Raw(s, version=version)
    raw.send(Connect(cid, version, clean_start=False, keep_alive=60,
                     properties=Properties(session_expiry_interval=600) if version == 5 else NO_PROPERTIES))
    got = raw.recv()
    assert got is None or isinstance(got, ConnAck), got
    return raw, got


def exists(s: LogbusServer, queue: str) -> bool:
    """Asked over the HTTP API: a passive declare would count as a use (x-expires)."""
    status, _ = http(s, "GET", f"/api/queues/%2F/{queue}")
    assert status in (200, 404), status
    return status == 200


def wait_gone(s: LogbusServer, queue: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while exists(s, queue):
        assert time.monotonic() < deadline, f"queue {queue!r} is still there"
        time.sleep(0.05)


def init_producer_id(w: Wire) -> tuple[int, int]:
    got = w.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), InitProducerIdResponse, 1)
    return got.error_code, got.producer_id


def test_what_else_the_state_store_refuses_is_answered_and_written_once_it_takes_writes(
        server: tuple[LogbusServer, Tmpfs], request: pytest.FixtureRequest) -> None:
    """Sessions' CONNECT and SUBSCRIBE, a queue deleted, one expired (x-expires) and an
    exclusive queue's connection closed, a Kafka offset commit, InitProducerId and
    DeleteGroups: each answered in its protocol's terms (or done) while the store refuses,
    with no traceback; what was done in memory reaches the store once it takes writes."""
    s, fs = server
    wait_health(s, lambda status, got: status == 200)
    since = len(s.log_text())
    tag = f"full{uuid.uuid4().hex[:8]}"
    sessions = {v: raw_connect(s, f"{tag}-kept{v}", v) for v in (4, 5)}  # connected before
    assert all(ack is not None and ack.reason_code == 0 for _, ack in sessions.values())
    amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", s.ports["amqp"]))
    ch = amqp.channel()
    ch.queue_declare(f"{tag}-doomed", durable=True)
    ch.queue_declare("", exclusive=True)
    ch.queue_declare(f"{tag}-expiring", durable=True, arguments={"x-expires": 500})
    keeper = ch.basic_consume(f"{tag}-expiring", lambda *a: None)  # unused from its cancel on
    assert exists(s, f"{tag}-doomed") and exists(s, f"{tag}-expiring")
    status, _ = http(s, "POST", "/api/topics", {"name": f"{tag}-kafka", "partitions": 1})
    assert status == 201, status
    tp = TopicPartition(f"{tag}-kafka", 0)
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{s.ports['kafka']}", group_id=f"{tag}-group",
                             enable_auto_commit=False)
    request.addfinalizer(consumer.close)  # failed: its client must not go on reconnecting for the later tests
    consumer.assign([tp])
    consumer.commit({tp: OffsetAndMetadata(0, "", -1)})

    filler = Filler(s, "default-exchange", tag)
    ballast = fs.fill(leave=256 << 10)
    try:
        filler.run()
        # a session that outlives its connection cannot be stored: CONNECT refused
        for version, code in ((5, 0x88), (4, 3)):  # Server unavailable
            raw, ack = raw_connect(s, f"{tag}-new{version}", version)
            assert ack is not None and ack.reason_code == code, (version, ack)
            raw.close()
        # a subscription the session's record cannot hold: 5.0 DISCONNECT 0x80; 3.1.1 closed
        for version, (raw, _) in sessions.items():
            raw.send(Subscribe(1, (Subscription(f"{tag}/kept/#", 1),)))
            got = raw.expect_closed()
            assert got == ([Disconnect(0x80, got[0].properties)] if version == 5 else []), got
            raw.close()
        # a queue deleted, an exclusive queue's connection closed: done, the store catches up
        assert ch.queue_delete(f"{tag}-doomed").method.message_count == 0
        ch.basic_cancel(keeper)
        wait_gone(s, f"{tag}-expiring")  # deleted by its x-expires meanwhile
        amqp.close()
        with pytest.raises(KafkaError):  # COORDINATOR_NOT_AVAILABLE: retriable
            consumer.commit({tp: OffsetAndMetadata(1, "", -1)})
        with Wire(s) as w:  # no producer id can be reserved, no group's offsets deleted
            assert init_producer_id(w) == (COORDINATOR_NOT_AVAILABLE, -1)
            deleted = w.call(DeleteGroupsRequest(groups_names=[f"{tag}-group"]), DeleteGroupsResponse, 1)
            assert [r[1] for r in deleted.results] == [COORDINATOR_NOT_AVAILABLE], deleted
    finally:
        ballast.unlink()
    no_traceback(s, since)

    wait_health(s, lambda status, got: status == 200)
    consumer.commit({tp: OffsetAndMetadata(1, "", -1)})
    consumer.close()
    with Wire(s) as w:
        code, pid = init_producer_id(w)
        assert code == 0 and pid >= 0
    filler.close()
    s.restart()  # what the store holds now
    for version in (4, 5):  # kept, with the subscription made while the store refused
        raw, ack = raw_connect(s, f"{tag}-kept{version}", version)
        assert ack is not None and ack.reason_code == 0 and ack.session_present, (version, ack)
        raw.close()
    for queue in (f"{tag}-doomed", f"{tag}-expiring"):
        assert not exists(s, queue), queue
    no_traceback(s, since)
