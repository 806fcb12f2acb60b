"""Kafka's ACL APIs against a real `logbus serve`, with kafka-python's admin client: ACLs
created, listed and deleted there are logbus permissions, so they take effect on AMQP
(pika) and MQTT (paho) at once; what the model cannot hold is refused with a reason, and
only an administrator may change them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika  # type: ignore[import-untyped]
import pika.exceptions  # type: ignore[import-untyped]
import pytest
from kafka import KafkaAdminClient  # type: ignore[import-untyped]
from kafka.errors import ClusterAuthorizationFailedError  # type: ignore[import-untyped]
from kafka.admin import (  # type: ignore[import-untyped]
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

from tests.integration.mgmt import Mgmt
from tests.integration.mqtt_clients import Paho, unique
from tests.serverproc import LogbusServer, module_server

NOT_AUTHORIZED = 0x87


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "kafka-acls")


@pytest.fixture(scope="module")
def admin(server: LogbusServer) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=server.addresses["kafka"])  # guest, from loopback: an administrator
    yield a
    a.close()


def acl(user: str, op: Any, rtype: Any, name: str, allow: bool = True,
        pattern: Any = ACLResourcePatternType.LITERAL) -> ACL:
    return ACL(principal=f"User:{user}", host="*", operation=op,
               permission_type=ACLPermissionType.ALLOW if allow else ACLPermissionType.DENY,
               resource_pattern=ResourcePattern(rtype, name, pattern))


def of(user: str, op: Any = ACLOperation.ANY, rtype: Any = ResourceType.ANY, name: str | None = None) -> ACLFilter:
    return ACLFilter(principal=f"User:{user}", host=None, operation=op, permission_type=ACLPermissionType.ANY,
                     resource_pattern=ResourcePatternFilter(rtype, name, ACLResourcePatternType.ANY))


def described(admin: KafkaAdminClient, user: str) -> set[tuple[str, str, str]]:
    found, error = admin.describe_acls(of(user))
    assert error.errno == 0, error
    return {(a.resource_pattern.resource_type.name, a.resource_pattern.resource_name, a.operation.name) for a in found}


def test_acls_are_permissions_on_every_protocol(server: LogbusServer, admin: KafkaAdminClient) -> None:
    mgmt = Mgmt(server)
    mgmt.add_user("bob", "bob-pw")
    guest = pika.BlockingConnection(pika.ConnectionParameters(*server.host_port("amqp")))
    guest.channel().exchange_declare("acl-orders", "fanout")
    guest.close()

    created = admin.create_acls([acl("bob", ACLOperation.WRITE, ResourceType.TOPIC, "acl-orders")])
    assert created["failed"] == [] and len(created["succeeded"]) == 1
    assert mgmt.ok("GET", "/api/permissions/%2F/bob").json()["write"] == "^acl\\-orders$"

    # AMQP: bob may publish to acl-orders, not elsewhere
    host, port = server.host_port("amqp")
    bob = pika.BlockingConnection(pika.ConnectionParameters(host, port, credentials=pika.PlainCredentials("bob",
                                                                                                          "bob-pw")))
    try:
        channel = bob.channel()
        channel.confirm_delivery()
        channel.basic_publish("acl-orders", "", b"allowed")
        other = bob.channel()
        other.confirm_delivery()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            other.basic_publish("amq.topic", "x", b"refused")
        assert closed.value.reply_code == 403
    finally:
        if bob.is_open:
            bob.close()

    # MQTT: subscribing needs read on amq.topic, which an ACL grants and takes back
    paho = Paho(server, unique("acl"), version=5, username="bob", password="bob-pw")
    try:
        assert [c.value for c in paho.subscribe("acl/+", 1)] == [NOT_AUTHORIZED]
        admin.create_acls([acl("bob", ACLOperation.READ, ResourceType.TOPIC, "amq.topic")])
        assert [c.value for c in paho.subscribe("acl/+", 1)] == [1]
        assert described(admin, "bob") == {("TOPIC", "acl-orders", "WRITE"), ("TOPIC", "amq.topic", "READ"),
                                           ("GROUP", "amq.topic", "READ")}
        deleted = admin.delete_acls([of("bob", ACLOperation.READ, ResourceType.TOPIC, "amq.topic")])
        assert deleted and deleted[0][2] is not None
        assert [c.value for c in paho.subscribe("acl/#", 1)] == [NOT_AUTHORIZED]
    finally:
        paho.close()
    assert described(admin, "bob") == {("TOPIC", "acl-orders", "WRITE")}


def test_what_the_model_cannot_hold_is_refused_with_a_reason(server: LogbusServer, admin: KafkaAdminClient) -> None:
    Mgmt(server).add_user("carol", "carol-pw")
    result = admin.create_acls([
        acl("carol", ACLOperation.READ, ResourceType.TOPIC, "x", allow=False),  # DENY
        acl("carol", ACLOperation.DESCRIBE, ResourceType.TOPIC, "y"),  # describe alone
        acl("carol", ACLOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster"),
        acl("nobody", ACLOperation.READ, ResourceType.TOPIC, "z"),  # no such user
        acl("carol", ACLOperation.READ, ResourceType.TOPIC, "logs-", pattern=ACLResourcePatternType.PREFIXED),
    ])
    assert len(result["succeeded"]) == 1 and len(result["failed"]) == 4, result
    assert described(admin, "carol") == {("TOPIC", "logs-", "READ"), ("GROUP", "logs-", "READ")}


def test_only_an_administrator_changes_acls(server: LogbusServer, admin: KafkaAdminClient) -> None:
    mgmt = Mgmt(server)
    mgmt.add_user("dave", "dave-pw")
    mgmt.grant("/", "dave")
    dave = KafkaAdminClient(bootstrap_servers=server.addresses["kafka"], security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="PLAIN", sasl_plain_username="dave", sasl_plain_password="dave-pw")
    try:
        result = dave.create_acls([acl("dave", ACLOperation.ALL, ResourceType.TOPIC, "*")])
        assert result["succeeded"] == [] and len(result["failed"]) == 1
        with pytest.raises(ClusterAuthorizationFailedError):
            dave.describe_acls(of("guest"))
    finally:
        dave.close()
