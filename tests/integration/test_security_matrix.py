"""The security matrix against one real `logbus serve` listening in plain and over TLS on
every protocol: each protocol x transport x who (no credentials, a wrong password, a
user without the permission, a user with it) x what (publish or produce, consume,
administer) answers with that protocol's refusal or its success, with the real clients:

    AMQP    pika (plain; TLS without credentials),      403 ACCESS_REFUSED / channel 403
            aio-pika (TLS)
    MQTT    paho 5 (plain), paho 3.1.1 (TLS), paho 5     CONNACK 0x87/0x86 (5, 4 in 3.1.1),
            over WebSocket and secure WebSocket          PUBACK 0x87, SUBACK 0x87 (0x80)
    Kafka   kafka-python (SASL_PLAINTEXT), kcat and      SASL 58 (the connection closes),
            confluent-kafka (SASL_SSL, and the refused   29 TOPIC_AUTHORIZATION_FAILED
            logins: kafka-python leaks those sockets)
    HTTP    curl (plain and TLS)                         401, 403

Anonymous access is off here (``--mqtt-anonymous off --kafka-anonymous off``): the tests
run from loopback, where it could be on; beyond loopback it is always refused.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika  # type: ignore[import-untyped]
import pika.exceptions  # type: ignore[import-untyped]
import pytest

from tests.integration.certs import self_signed
from tests.integration.mgmt import Mgmt
from tests.integration.mqtt_clients import Paho, unique
from tests.serverproc import LogbusServer, module_server

WAIT = 15
WHO = {"none": ("", ""), "wrong": ("alice", "wrong"), "denied": ("bob", "bob-pw"), "allowed": ("alice", "alice-pw")}
OK, REFUSED = "ok", "refused"
EXPECTED = {"none": REFUSED, "wrong": REFUSED, "denied": REFUSED, "allowed": OK}
TOPIC = "mx"  # a Kafka and HTTP topic, and the AMQP exchange behind it


@dataclass
class Env:
    server: LogbusServer
    cert: Path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    cert, key = self_signed(tmp_path_factory.mktemp("matrix-certs"))
    tls = f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}"
    plain = "tcp:0:interface=127.0.0.1"
    listeners = {name: f"{plain} {tls}" for name in ("amqp", "mqtt", "kafka", "http", "mqtt_ws")}
    for server in module_server(tmp_path_factory, "matrix", listeners=listeners,
                                args=["--mqtt-anonymous", "off", "--kafka-anonymous", "off"]):
        mgmt = Mgmt(server)
        mgmt.add_user("alice", "alice-pw", "administrator")
        mgmt.grant("/", "alice")
        mgmt.add_user("bob", "bob-pw")  # may use vhost "/", but none of the matrix's resources
        mgmt.grant("/", "bob", configure="^bob-only$", write="^bob-only$", read="^bob-only$")
        mgmt.ok("POST", "/api/topics", {"name": TOPIC})
        guest = pika.BlockingConnection(pika.ConnectionParameters(*server.host_port("amqp")))
        ch = guest.channel()
        ch.exchange_declare(TOPIC, "fanout")
        ch.queue_declare("mxq")
        ch.queue_bind("mxq", TOPIC)
        guest.close()
        mgmt.ok("POST", "/api/pop/mxgroup/mx/receive", {"max": 1})  # the pop group, for the HTTP consume
        yield Env(server, cert)


def listener(env: Env, name: str, tls: bool) -> tuple[str, int]:
    return env.server.host_port(f"{name}.2" if tls else name)


# -- AMQP ----------------------------------------------------------------------------------------


def amqp(env: Env, tls: bool, who: str, op: str) -> str:
    user, password = WHO[who]
    if not tls or who == "none":  # aio-pika fills an empty login in with guest's: pika sends it empty
        host, port = listener(env, "amqp", tls)
        options = pika.SSLOptions(ssl.create_default_context(cafile=str(env.cert)), "127.0.0.1") if tls else None
        try:
            conn = pika.BlockingConnection(pika.ConnectionParameters(
                host, port, credentials=pika.PlainCredentials(user, password), connection_attempts=1,
                ssl_options=options))
        except pika.exceptions.ProbableAuthenticationError:
            return REFUSED
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            if op == "publish":
                ch.basic_publish(TOPIC, "", b"matrix")
            elif op == "consume":
                ch.basic_get("mxq", auto_ack=True)
            else:
                ch.exchange_declare(unique("mx-admin"), "fanout")
            return OK
        except pika.exceptions.ChannelClosedByBroker as e:
            assert e.reply_code == 403, e
            return REFUSED
        finally:
            if conn.is_open:
                conn.close()
    return asyncio.run(_aio_pika(env, user, password, op))


async def _aio_pika(env: Env, user: str, password: str, op: str) -> str:
    import aio_pika
    from aiormq.exceptions import ChannelAccessRefused, ProbableAuthenticationError

    host, port = listener(env, "amqp", True)
    context = ssl.create_default_context(cafile=str(env.cert))
    try:
        conn = await aio_pika.connect(host=host, port=port, login=user, password=password, ssl=True,
                                      ssl_context=context, timeout=WAIT)
    except ProbableAuthenticationError:
        return REFUSED
    try:
        ch = await conn.channel()
        if op == "publish":
            ex = await ch.get_exchange(TOPIC, ensure=False)
            await ex.publish(aio_pika.Message(b"matrix"), routing_key="")
        elif op == "consume":
            queue = await ch.get_queue("mxq", ensure=False)
            await queue.get(no_ack=True, fail=False)
        else:
            await ch.declare_exchange(unique("mx-admin"), aio_pika.ExchangeType.FANOUT)
        return OK
    except ChannelAccessRefused:
        return REFUSED
    finally:
        await conn.close()


# -- MQTT ----------------------------------------------------------------------------------------


def mqtt(env: Env, transport: str, who: str, op: str) -> str:
    user, password = WHO[who]
    ws = transport in ("ws", "wss")
    tls = transport in ("tls", "wss")
    version = 4 if transport == "tls" else 5
    port = listener(env, "mqtt_ws" if ws else "mqtt", tls)[1]
    c = Paho(env.server, unique("mx"), version=version, username=user or None, password=password or None,
             transport="websockets" if ws else "tcp", port=port, connect=False)
    if tls:
        c.client.tls_set(ca_certs=str(env.cert), cert_reqs=ssl.CERT_REQUIRED)
    try:
        _, reason, _ = c.connect()
        code = reason.value if hasattr(reason, "value") else int(reason)
        if code != 0:
            assert code in (0x86, 0x87, 4, 5), code  # paho 2 shows a 3.1.1 return code as its 5.0 reason
            return REFUSED
        if op == "publish":
            if version == 4:  # 3.1.1 has no refusal but closing
                info = c.client.publish("mx/t", b"matrix", 1)
                info.wait_for_publish(5)
                return OK if info.is_published() else REFUSED
            acks: list[Any] = []
            c.client.on_publish = lambda client, userdata, mid, rc, props: acks.append(rc)
            info = c.client.publish("mx/t", b"matrix", 1)
            info.wait_for_publish(WAIT)
            assert len(acks) == 1, acks
            return OK if getattr(acks[0], "value", acks[0]) < 0x80 else REFUSED  # 0x10 no subscribers: fine
        codes = [getattr(x, "value", x) for x in c.subscribe("mx/#", 1)]
        return OK if codes == [1] else REFUSED
    finally:
        c.close()


# -- Kafka ---------------------------------------------------------------------------------------


def kafka(env: Env, tls: bool, who: str, op: str) -> str:
    user, password = WHO[who]
    host, port = listener(env, "kafka", tls)
    if tls or who in ("none", "wrong"):  # kafka-python leaks a refused client's sockets: librdkafka here
        return _confluent(env, f"{host}:{port}", user, password, op, tls)
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAuthorizationFailedError

    config: dict[str, Any] = {"bootstrap_servers": f"{host}:{port}", "request_timeout_ms": 5000}
    if user:
        config.update(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                      sasl_plain_username=user, sasl_plain_password=password)
    try:
        if op == "publish":
            p = KafkaProducer(max_block_ms=5000, bootstrap_timeout_ms=5000, retries=0, **config)
            try:
                p.send(TOPIC, b"matrix").get(timeout=WAIT)
            finally:
                p.close()
        elif op == "consume":
            c = KafkaConsumer(consumer_timeout_ms=2000, bootstrap_timeout_ms=5000, **config)
            try:
                tp = TopicPartition(TOPIC, 0)
                c.assign([tp])
                c.seek(tp, 0)
                if not [r for r in c]:
                    return REFUSED  # metadata said 29 for the topic: nothing fetched
            finally:
                c.close()
        else:
            a = KafkaAdminClient(bootstrap_timeout_ms=5000, **config)
            try:
                a.create_topics([NewTopic(unique("mx-admin"), 1, 1)])
            finally:
                a.close()
        return OK
    except (TopicAuthorizationFailedError, KafkaError):
        return REFUSED


def _confluent(env: Env, boot: str, user: str, password: str, op: str, tls: bool) -> str:
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    protocol = ("SASL_" if user else "") + ("SSL" if tls else "PLAINTEXT")
    config: dict[str, Any] = {"bootstrap.servers": boot, "security.protocol": protocol, "socket.timeout.ms": 5000}
    if tls:
        config["ssl.ca.location"] = str(env.cert)
    if user:
        config.update({"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password})
    errors: list[Any] = []
    config["error_cb"] = errors.append
    if op == "publish":  # kcat: librdkafka as confluent-kafka, whose delivery reports misbehave under pytest
        argv = ["kcat", "-P", "-b", boot, "-t", TOPIC, "-X", f"security.protocol={protocol}",
                "-X", "message.timeout.ms=5000"] + (["-X", f"ssl.ca.location={env.cert}"] if tls else [])
        if user:
            argv += ["-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", f"sasl.username={user}",
                     "-X", f"sasl.password={password}"]
        done = subprocess.run(argv, input=b"matrix\n", capture_output=True, timeout=60)
        return OK if done.returncode == 0 else REFUSED
    if op == "consume":
        c = Consumer({**config, "group.id": unique("mxg"), "enable.auto.commit": False})
        try:
            c.assign([TopicPartition(TOPIC, 0, 0)])
            for _ in range(20):
                m = c.poll(0.25)
                if m is not None:
                    return OK if m.error() is None else REFUSED
                if errors:
                    return REFUSED
            return REFUSED
        finally:
            c.close()
    a = AdminClient(config)
    future = a.create_topics([NewTopic(unique("mx-admin"), 1, 1)], request_timeout=5)
    try:
        next(iter(future.values())).result(timeout=WAIT)
        return OK
    except KafkaException:
        return REFUSED


# -- HTTP ----------------------------------------------------------------------------------------


def http(env: Env, tls: bool, who: str, op: str) -> str:
    user, password = WHO[who]
    host, port = listener(env, "http", tls)
    url = f"{'https' if tls else 'http'}://{host}:{port}"
    method, path, body = {
        "publish": ("POST", f"/api/topics/{TOPIC}/messages", {"messages": [{"value": "matrix"}]}),
        "consume": ("POST", f"/api/pop/mxgroup/{TOPIC}/receive", {"max": 1}),
        "admin": ("PUT", "/api/limits", {"disk_free_limit": 50_000_000}),
    }[op]
    argv = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", method, "--max-time", "10",
            "-H", "Content-Type: application/json", "-d", json.dumps(body), url + path]
    if tls:
        argv += ["--cacert", str(env.cert)]
    if user:
        argv += ["-u", f"{user}:{password}"]
    status = int(subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout)
    expected_refusal = 401 if who in ("none", "wrong") else 403
    assert status in (200, expected_refusal), (op, who, status)
    return OK if status == 200 else REFUSED


# -- the matrix ----------------------------------------------------------------------------------

CASES = [(proto, transport, op) for proto, transports, ops in (
    ("amqp", ("plain", "tls"), ("publish", "consume", "admin")),
    ("mqtt", ("plain", "tls", "ws", "wss"), ("publish", "consume")),  # MQTT has no administration
    ("kafka", ("plain", "tls"), ("publish", "consume", "admin")),
    ("http", ("plain", "tls"), ("publish", "consume", "admin")),
) for transport in transports for op in ops]


@pytest.mark.parametrize("who", list(WHO))
@pytest.mark.parametrize(("proto", "transport", "op"), CASES)
def test_matrix(env: Env, proto: str, transport: str, op: str, who: str) -> None:
    tls = transport in ("tls", "wss")
    if proto == "amqp":
        got = amqp(env, tls, who, op)
    elif proto == "mqtt":
        got = mqtt(env, transport, who, op)
    elif proto == "kafka":
        got = kafka(env, tls, who, op)
    else:
        got = http(env, tls, who, op)
    assert got == EXPECTED[who], (proto, transport, op, who)
