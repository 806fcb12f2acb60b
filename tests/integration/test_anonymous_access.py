"""Clients without credentials, from loopback, against a real `logbus serve` with the
shipped defaults: MQTT (paho, 3.1.1 and 5.0) and Kafka (kafka-python) clients act as user
``anonymous``, which has no tags and, from the first boot, only publish and consume on
vhost ``/`` (decision 0039). So an anonymous Kafka admin client may not create or delete
topics (TOPIC_AUTHORIZATION_FAILED, 29) nor touch ACLs (CLUSTER_AUTHORIZATION_FAILED,
31), as Apache Kafka answers; an anonymous MQTT client is refused what its permissions
do not give, in MQTT's words (CONNACK 0x87 / 5, SUBACK 0x87 / 0x80, PUBACK 0x87 or, in
3.1.1, the connection closed). What an operator grants ``anonymous`` it gets, no more;
``guest`` keeps its password."""

from __future__ import annotations

import queue
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # type: ignore[import-untyped]
from kafka.admin import (  # type: ignore[import-untyped]
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    NewTopic,
    ResourcePattern,
    ResourceType,
)
from kafka.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError  # type: ignore[import-untyped]

from tests.integration.mgmt import Mgmt
from tests.integration.mqtt_clients import WAIT, Paho, unique
from tests.serverproc import LogbusServer, module_server, run_logbus

ANONYMOUS = "anonymous"
FIRST_BOOT = {"configure": "", "write": ".*", "read": ".*"}  # what the first boot gives it
BAD_LOGIN, NOT_AUTHORIZED = 0x86, 0x87  # paho 2 shows 3.1.1's return codes 4 and 5 as these


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "anonymous", anonymous_admin=False)


@pytest.fixture
def mgmt(server: LogbusServer) -> Iterator[Mgmt]:
    m = Mgmt(server)
    yield m
    m.ok("PUT", f"/api/permissions/%2F/{ANONYMOUS}", FIRST_BOOT)  # as the first boot left it, for the next test


def permission_cli(server: LogbusServer, *args: str) -> None:
    """``logbus permission ...`` as the operator (guest) types it."""
    done = run_logbus("permission", *args, "--server", server.http_url)
    assert done.returncode == 0, done.stderr


def user_of(mgmt: Mgmt, protocol: str, client_id: str) -> str:
    """The user /api/connections names for the connection of ``client_id``."""
    deadline = time.monotonic() + WAIT
    while True:
        found = [c["user"] for c in mgmt.ok("GET", "/api/connections").json()
                 if c["protocol"] == protocol and c.get("client_id") == client_id]
        if found:
            return str(found[0])
        assert time.monotonic() < deadline, f"no {protocol} connection of client {client_id!r}"
        time.sleep(0.05)


def topics(mgmt: Mgmt) -> set[str]:
    return {t["name"] for t in mgmt.ok("GET", "/api/topics").json()}


def acl(user: str, op: Any, rtype: Any, name: str) -> ACL:
    return ACL(principal=f"User:{user}", host="*", operation=op, permission_type=ACLPermissionType.ALLOW,
               resource_pattern=ResourcePattern(rtype, name, ACLResourcePatternType.LITERAL))


# -- the user and what it starts with ---------------------------------------------------------


def test_the_first_boot_gives_anonymous_publish_and_consume_only(mgmt: Mgmt) -> None:
    user = mgmt.ok("GET", f"/api/users/{ANONYMOUS}").json()
    assert user["tags"] == [] and user["password_hash"] == ""  # no tag, no password: no login of its own
    assert {k: v for k, v in mgmt.ok("GET", f"/api/permissions/%2F/{ANONYMOUS}").json().items()
            if k in FIRST_BOOT} == FIRST_BOOT


@pytest.mark.parametrize("version", [4, 5])
def test_an_anonymous_mqtt_client_acts_as_anonymous(server: LogbusServer, mgmt: Mgmt, version: int) -> None:
    topic = f"anon/{unique('t')}"
    sub = Paho(server, unique("anon-sub"), version=version)
    pub = Paho(server, unique("anon-pub"), version=version)
    try:
        assert user_of(mgmt, "mqtt", sub.client._client_id.decode()) == ANONYMOUS
        assert sub.subscribe(topic, 1)[0].value == 1  # publish and consume: the first boot's
        pub.publish(topic, b"hello", qos=1)
        assert sub.next_message().payload == b"hello"
    finally:
        sub.close()
        pub.close()


# -- refused what it was not given --------------------------------------------------------------


def test_an_anonymous_kafka_admin_may_not_create_or_delete_topics_nor_change_acls(server: LogbusServer,
                                                                                  mgmt: Mgmt) -> None:
    mgmt.add_user("bystander", "pw")
    mgmt.ok("POST", "/api/topics", {"name": "kept"})
    admin = KafkaAdminClient(bootstrap_servers=server.addresses["kafka"])
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            admin.create_topics([NewTopic("anon-made", 1, 1)])
        with pytest.raises(TopicAuthorizationFailedError):
            admin.delete_topics(["kept"])
        result = admin.create_acls([acl(ANONYMOUS, ACLOperation.ALL, ResourceType.TOPIC, "kept"),
                                    acl("bystander", ACLOperation.ALL, ResourceType.TOPIC, "kept")])
        assert result["succeeded"] == []
        assert result["failed"] == [ClusterAuthorizationFailedError, ClusterAuthorizationFailedError]
    finally:
        admin.close()
    assert "kept" in topics(mgmt) and "anon-made" not in topics(mgmt)
    assert mgmt.call("GET", "/api/permissions/%2F/bystander").status == 404  # no ACL became a permission
    assert mgmt.ok("GET", f"/api/permissions/%2F/{ANONYMOUS}").json()["configure"] == ""


def test_an_anonymous_kafka_producer_does_not_auto_create_but_publishes_and_consumes(server: LogbusServer,
                                                                                     mgmt: Mgmt) -> None:
    addr = server.addresses["kafka"]
    mgmt.ok("POST", "/api/topics", {"name": "anon-existing"})
    producer = KafkaProducer(bootstrap_servers=addr, enable_idempotence=False, retries=0, max_block_ms=5000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("anon-auto", b"v").get(timeout=WAIT)
        assert producer.send("anon-existing", b"v").get(timeout=WAIT).offset == 0
    finally:
        producer.close()
    assert "anon-auto" not in topics(mgmt)
    consumer = KafkaConsumer(bootstrap_servers=addr, enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        tp = TopicPartition("anon-existing", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        assert [r.value for r in consumer] == [b"v"]
    finally:
        consumer.close()


@pytest.mark.parametrize("version,sub_refused", [(4, 0x80), (5, NOT_AUTHORIZED)])
def test_an_anonymous_mqtt_client_gets_exactly_what_the_operator_grants(server: LogbusServer, mgmt: Mgmt,
                                                                        version: int, sub_refused: int) -> None:
    permission_cli(server, "clear", "/", ANONYMOUS)
    refused = Paho(server, unique("anon"), version=version, connect=False)
    try:
        _, rc, _ = refused.connect()
        assert rc.value == NOT_AUTHORIZED  # no permission in "/": CONNACK 0x87 (3.1.1: 5)
    finally:
        refused.close()

    permission_cli(server, "set", "/", ANONYMOUS, "--configure", "", "--write", "", "--read", ".*")
    client = Paho(server, unique("anon"), version=version)
    try:
        assert client.subscribe("granted/#", 1)[0].value == 1
        published: queue.Queue[Any] = queue.Queue()
        client.client.on_publish = lambda c, u, mid, rc, props: published.put(rc)
        client.client.publish("granted/x", b"no write", qos=1)
        if version == 5:
            assert published.get(timeout=WAIT).value == NOT_AUTHORIZED  # PUBACK 0x87
        else:  # 3.1.1 cannot say it: the connection is closed, as Mosquitto does
            client.disconnects.get(timeout=WAIT)
    finally:
        client.close()

    permission_cli(server, "set", "/", ANONYMOUS, "--configure", "", "--write", ".*", "--read", "^$")
    client = Paho(server, unique("anon"), version=version)
    try:
        assert client.subscribe("granted/#", 1)[0].value == sub_refused  # read taken away: SUBACK refuses
        client.publish("granted/x", b"write", qos=1)  # write given: PUBACK 0
    finally:
        client.close()


def test_an_anonymous_kafka_client_gets_exactly_what_the_operator_grants(server: LogbusServer,
                                                                         mgmt: Mgmt) -> None:
    permission_cli(server, "set", "/", ANONYMOUS, "--configure", "^anon-", "--write", ".*", "--read", ".*")
    admin = KafkaAdminClient(bootstrap_servers=server.addresses["kafka"])
    try:
        admin.create_topics([NewTopic("anon-granted", 1, 1)])
        assert "anon-granted" in topics(mgmt)
        with pytest.raises(TopicAuthorizationFailedError):
            admin.create_topics([NewTopic("other-refused", 1, 1)])
        admin.delete_topics(["anon-granted"])
        assert "anon-granted" not in topics(mgmt)
        result = admin.create_acls([acl(ANONYMOUS, ACLOperation.ALL, ResourceType.TOPIC, "x")])
        assert result["failed"] == [ClusterAuthorizationFailedError]  # ACLs stay the administrator's
    finally:
        admin.close()


# -- guest keeps its password ---------------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 5])
def test_guest_still_needs_its_password_over_mqtt(server: LogbusServer, mgmt: Mgmt, version: int) -> None:
    for password in ("wrong", None):
        c = Paho(server, unique("guest"), version=version, username="guest", password=password, connect=False)
        try:
            _, rc, _ = c.connect()
            assert rc.value == BAD_LOGIN  # CONNACK 0x86 (3.1.1: 4)
        finally:
            c.close()
    c = Paho(server, unique("guest"), version=version, username="guest", password="guest")
    try:
        assert user_of(mgmt, "mqtt", c.client._client_id.decode()) == "guest"
    finally:
        c.close()


def test_guest_still_needs_its_password_over_kafka(server: LogbusServer, mgmt: Mgmt) -> None:
    """kcat for the refused login (kafka-python leaves a refused client's sockets to the
    garbage collector), kafka-python's admin client for the accepted one."""
    boot = server.addresses["kafka"]
    refused = subprocess.run(["kcat", "-L", "-b", boot, "-m", "5", "-X", "security.protocol=SASL_PLAINTEXT",
                              "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=guest",
                              "-X", "sasl.password=wrong"], capture_output=True, timeout=60)
    assert refused.returncode != 0
    assert b"Authentication failed" in refused.stderr or b"SASL authentication error" in refused.stderr, \
        refused.stderr
    admin = KafkaAdminClient(bootstrap_servers=boot, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="guest", sasl_plain_password="guest")
    try:
        admin.create_topics([NewTopic("made-by-guest", 1, 1)])
        admin.delete_topics(["made-by-guest"])
    finally:
        admin.close()
