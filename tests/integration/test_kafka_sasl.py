"""Kafka SASL against a real `logbus serve` with ``--kafka-anonymous off`` (Kafka's
SASL_PLAINTEXT listener), with kafka-python, aiokafka, confluent-kafka and kcat: PLAIN,
SCRAM-SHA-256 and SCRAM-SHA-512 log in as logbus users; a wrong password or no SASL at all
gets nowhere and appends nothing; the authenticated user's permissions decide, and the
connection registry shows who it is. Over TLS (SASL_SSL) every client logs in alike."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # type: ignore[import-untyped]
from kafka.errors import TopicAuthorizationFailedError  # type: ignore[import-untyped]

from tests.integration.certs import self_signed
from tests.integration.mgmt import Mgmt
from tests.kafka_wire import Wire
from tests.serverproc import LogbusServer, module_server

WAIT = 15
TOPIC = "sasl-orders"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "kafka-sasl", listeners={"amqp": "off", "mqtt": "off"},
                             args=["--kafka-anonymous", "off"])


@pytest.fixture(scope="module")
def mgmt(server: LogbusServer) -> Mgmt:
    m = Mgmt(server)
    m.add_user("alice", "alice-secret")
    m.grant("/", "alice")
    m.add_user("reader", "reader-secret")
    m.grant("/", "reader", configure="", write="", read=".*")
    m.ok("POST", "/api/topics", {"name": TOPIC})
    return m


def sasl(mechanism: str, user: str = "alice", password: str = "alice-secret") -> dict[str, Any]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password}


def end_offset(mgmt: Mgmt) -> int:
    return int(mgmt.ok("GET", f"/api/topics/{TOPIC}").json()["partition_detail"][0]["log_end_offset"])


def consume_from(server: LogbusServer, offset: int, count: int, **config: Any) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False,
                             consumer_timeout_ms=5000, **config)
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, offset)
        got: list[bytes] = []
        for record in consumer:
            got.append(record.value)
            if len(got) == count:
                break
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_logs_in_with_each_mechanism(server: LogbusServer, mgmt: Mgmt, mechanism: str) -> None:
    start = end_offset(mgmt)
    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"], **sasl(mechanism))
    try:
        producer.send(TOPIC, mechanism.encode()).get(timeout=WAIT)
    finally:
        producer.close()
    assert consume_from(server, start, 1, **sasl(mechanism)) == [mechanism.encode()]


def test_aiokafka_scram_sha_512(server: LogbusServer, mgmt: Mgmt) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # type: ignore[import-untyped]
    from aiokafka.structs import TopicPartition as TP  # type: ignore[import-untyped]

    start = end_offset(mgmt)
    config = sasl("SCRAM-SHA-512")

    async def run() -> bytes:
        producer = AIOKafkaProducer(bootstrap_servers=server.addresses["kafka"], **config)
        await producer.start()
        try:
            await producer.send_and_wait(TOPIC, b"from aiokafka")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False,
                                    **config)
        await consumer.start()
        try:
            tp = TP(TOPIC, 0)
            consumer.assign([tp])
            consumer.seek(tp, start)
            record = await asyncio.wait_for(consumer.getone(), WAIT)
            return bytes(record.value)
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == b"from aiokafka"


def test_confluent_kafka_scram_sha_512(server: LogbusServer, mgmt: Mgmt) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition as CTP  # type: ignore[import-untyped]

    start = end_offset(mgmt)
    config = {"bootstrap.servers": server.addresses["kafka"], "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "alice-secret"}
    producer = Producer(config)
    delivered: list[Any] = []
    producer.produce(TOPIC, b"from confluent", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(WAIT) == 0 and delivered == [None]
    consumer = Consumer({**config, "group.id": "sasl-confluent", "enable.auto.commit": False})
    try:
        consumer.assign([CTP(TOPIC, 0, start)])
        deadline = time.monotonic() + WAIT
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        assert msg is not None and msg.error() is None and msg.value() == b"from confluent"
    finally:
        consumer.close()


def test_kcat_scram_sha_512(server: LogbusServer, mgmt: Mgmt) -> None:
    start = end_offset(mgmt)
    auth = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-512",
            "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"]
    boot = server.addresses["kafka"]
    subprocess.run(["kcat", "-P", "-b", boot, "-t", TOPIC, *auth], input=b"from kcat\n", check=True, timeout=30)
    out = subprocess.run(["kcat", "-C", "-b", boot, "-t", TOPIC, "-p", "0", "-o", str(start), "-c", "1", "-q", *auth],
                         capture_output=True, check=True, timeout=30)
    assert out.stdout == b"from kcat\n"
    wrong = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-512",
             "-X", "sasl.username=alice", "-X", "sasl.password=nope"]
    refused = subprocess.run(["kcat", "-L", "-b", boot, "-m", "5", *wrong], capture_output=True, timeout=30)
    assert refused.returncode != 0
    assert b"Authentication failed" in refused.stderr or b"SASL authentication error" in refused.stderr, \
        refused.stderr


def kcat_produce(boot: str, *settings: str) -> int:
    """kcat's exit code for producing one message with ``settings`` (-X key=value each)."""
    argv = ["kcat", "-P", "-b", boot, "-t", TOPIC, "-X", "message.timeout.ms=3000"]
    for setting in settings:
        argv += ["-X", setting]
    return subprocess.run(argv, input=b"must not land\n", capture_output=True, timeout=60).returncode


def test_a_wrong_password_or_no_sasl_gets_nowhere(server: LogbusServer, mgmt: Mgmt) -> None:
    """kcat (librdkafka) for the refused logins: kafka-python leaves a refused client's
    sockets behind for the garbage collector. Without SASL the connection is closed at the
    first request that is not ApiVersions or SASL."""
    start = end_offset(mgmt)
    boot = server.addresses["kafka"]
    for mechanism, user, password in (("SCRAM-SHA-512", "alice", "wrong"), ("PLAIN", "alice", "wrong"),
                                      ("SCRAM-SHA-256", "nobody", "alice-secret")):
        assert kcat_produce(boot, "security.protocol=SASL_PLAINTEXT", f"sasl.mechanisms={mechanism}",
                            f"sasl.username={user}", f"sasl.password={password}") != 0
    assert kcat_produce(boot) != 0  # no SASL at all
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse  # type: ignore[import-untyped]

    with Wire(server) as w, pytest.raises(AssertionError, match="connection closed"):
        w.call(MetadataRequest(topics=None), MetadataResponse, 1)
    assert end_offset(mgmt) == start  # nothing appended


def test_the_authenticated_users_permissions_decide(server: LogbusServer, mgmt: Mgmt) -> None:
    start = end_offset(mgmt)
    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"], retries=0, max_block_ms=5000,
                             **sasl("SCRAM-SHA-256", "reader", "reader-secret"))
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(TOPIC, b"no write").get(timeout=WAIT)
    finally:
        producer.close()
    assert end_offset(mgmt) == start
    mgmt.ok("POST", f"/api/topics/{TOPIC}/messages", {"messages": [{"value": "for the reader"}]})
    assert consume_from(server, start, 1, **sasl("SCRAM-SHA-256", "reader", "reader-secret")) == [b"for the reader"]


def test_the_connection_registry_shows_the_sasl_user(server: LogbusServer, mgmt: Mgmt) -> None:
    consumer = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], client_id="sasl-registry",
                             **sasl("SCRAM-SHA-512"))
    try:
        consumer.topics()
        deadline = time.monotonic() + WAIT
        while True:
            mine = [c for c in mgmt.ok("GET", "/api/connections?protocol=kafka").json()
                    if c["client_id"] == "sasl-registry"]
            if mine:
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert {c["user"] for c in mine} == {"alice"}
    finally:
        consumer.close()


# -- SASL_SSL: the same logins over TLS ---------------------------------------------------------


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LogbusServer, Path]]:
    cert, key = self_signed(tmp_path_factory.mktemp("kafka-certs"))
    endpoint = f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}"
    for server in module_server(tmp_path_factory, "kafka-sasl-ssl", listeners={"kafka": endpoint, "amqp": "off",
                                                                               "mqtt": "off"},
                                args=["--kafka-anonymous", "off"]):
        m = Mgmt(server)
        m.add_user("alice", "alice-secret")
        m.grant("/", "alice")
        m.ok("POST", "/api/topics", {"name": TOPIC})
        yield server, cert


def test_scram_sha_512_over_tls_with_every_client(tls: tuple[LogbusServer, Path]) -> None:
    """Kafka's SASL_SSL: kafka-python, aiokafka, confluent-kafka and kcat each produce one
    message with SCRAM-SHA-512 over TLS (verifying the certificate) and read all four."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context  # type: ignore[import-untyped]
    from confluent_kafka import Producer  # type: ignore[import-untyped]

    server, cert = tls
    boot = server.addresses["kafka"]
    python_sasl = {**sasl("SCRAM-SHA-512"), "security_protocol": "SASL_SSL", "ssl_cafile": str(cert)}
    producer = KafkaProducer(bootstrap_servers=boot, **python_sasl)
    try:
        producer.send(TOPIC, b"kafka-python").get(timeout=WAIT)
    finally:
        producer.close()

    async def aio() -> None:
        p = AIOKafkaProducer(bootstrap_servers=boot, security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                             sasl_plain_username="alice", sasl_plain_password="alice-secret",
                             ssl_context=create_ssl_context(cafile=str(cert)))
        await p.start()
        try:
            await p.send_and_wait(TOPIC, b"aiokafka")
        finally:
            await p.stop()

    asyncio.run(aio())
    confluent = Producer({"bootstrap.servers": boot, "security.protocol": "SASL_SSL", "ssl.ca.location": str(cert),
                          "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
                          "sasl.password": "alice-secret"})
    confluent.produce(TOPIC, b"confluent-kafka")
    assert confluent.flush(WAIT) == 0
    kcat_auth = ["-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={cert}", "-X",
                 "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"]
    subprocess.run(["kcat", "-P", "-b", boot, "-t", TOPIC, *kcat_auth], input=b"kcat\n", check=True, timeout=30)
    out = subprocess.run(["kcat", "-C", "-b", boot, "-t", TOPIC, "-o", "beginning", "-c", "4", "-q", *kcat_auth],
                         capture_output=True, check=True, timeout=30)
    assert sorted(out.stdout.split()) == [b"aiokafka", b"confluent-kafka", b"kafka-python", b"kcat"]
    assert kcat_produce(boot, "security.protocol=SSL", f"ssl.ca.location={cert}") != 0  # TLS without a login
