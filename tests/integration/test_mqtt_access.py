"""Who may do what over MQTT: logbus's users and vhost permissions, and RabbitMQ's topic
permissions on ``amq.topic`` (set through the HTTP API): a publish refused is PUBACK 0x87
(3.1.1: the connection is closed) and reaches nobody; a subscription refused is SUBACK
0x87 (3.1.1: 0x80)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from logbus.gateway.mqtt import ConnAck, Connect, PubAck, Publish, SubAck, Subscribe, Subscription
from tests.integration.mgmt import Mgmt, q
from tests.integration.mqtt_clients import Paho, Raw, unique
from tests.serverproc import LogbusServer, module_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "mqtt_access", listeners={"kafka": "off", "amqp": "off"})


@pytest.fixture(scope="module")
def dev(server: LogbusServer) -> str:
    """A user "dev" with full vhost permissions, and topic permissions on amq.topic: write
    under sensors/, read under sensors/ and cmd/<its client id>."""
    m = Mgmt(server)
    m.add_user("dev", "pw")
    m.grant("/", "dev")
    m.ok("PUT", f"/api/topic-permissions/{q('/')}/dev",
         {"exchange": "amq.topic", "write": r"^sensors\.", "read": r"^(sensors\..*|cmd\.{client_id})$"})
    return "dev"


def raw_login(server: LogbusServer, cid: str, version: int = 5) -> Raw:
    raw = Raw(server, version=version)
    raw.send(Connect(cid, version, username="dev", password=b"pw", keep_alive=60))
    assert raw.expect(ConnAck).reason_code == 0
    return raw


def test_topic_permissions_listed_and_refused_when_bad(server: LogbusServer, dev: str) -> None:
    m = Mgmt(server)
    listed = m.ok("GET", "/api/topic-permissions").json()
    assert {"user": "dev", "vhost": "/", "exchange": "amq.topic", "write": r"^sensors\.",
            "read": r"^(sensors\..*|cmd\.{client_id})$"} in listed
    assert m.call("PUT", f"/api/topic-permissions/{q('/')}/dev",
                  {"exchange": "amq.topic", "write": "(", "read": ""}).status == 400
    assert m.call("PUT", f"/api/topic-permissions/{q('/')}/nobody",
                  {"exchange": "amq.topic", "write": "", "read": ""}).status == 404


def test_publish_outside_write_pattern_is_refused_and_reaches_nobody(server: LogbusServer, dev: str) -> None:
    watcher = Paho(server, unique("watch"))
    watcher.subscribe("#", 1)
    raw = raw_login(server, unique("d"))
    try:
        raw.send(Publish("sensors/t1", b"ok", 1, packet_id=1))
        assert raw.expect(PubAck).reason_code in (0, 0x10)
        raw.send(Publish("cmd/t1", b"no", 1, packet_id=2))
        assert raw.expect(PubAck) == PubAck(2, 0x87)
        raw.send(Publish("cmd/t1", b"no0", 0))  # QoS 0: dropped silently
        raw.send(Publish("sensors/t2", b"ok2", 1, packet_id=3))
        assert raw.expect(PubAck).packet_id == 3  # the connection goes on
        assert [m.payload for m in watcher.take(2)] == [b"ok", b"ok2"]
        watcher.assert_quiet()
    finally:
        raw.close()
        watcher.close()


def test_mqtt311_publish_refused_closes_the_connection(server: LogbusServer, dev: str) -> None:
    raw = raw_login(server, unique("d"), version=4)
    try:
        raw.send(Publish("cmd/t1", b"no", 1, packet_id=1))
        assert raw.expect_closed() == []
    finally:
        raw.close()


@pytest.mark.parametrize("version,refused", [(5, 0x87), (4, 0x80)])
def test_subscribe_outside_read_pattern_is_refused(server: LogbusServer, dev: str, version: int,
                                                   refused: int) -> None:
    cid = unique("d")
    raw = raw_login(server, cid, version)
    try:
        raw.send(Subscribe(1, (Subscription("sensors/#", 1), Subscription("cmd/other", 1),
                               Subscription(f"cmd/{cid}", 1), Subscription("#", 0))))
        assert raw.expect(SubAck).reason_codes == (1, refused, 1, refused)
    finally:
        raw.close()


def test_bad_password_and_user_without_vhost_permission(server: LogbusServer, dev: str) -> None:
    Mgmt(server).add_user("nobody-here", "pw")
    for version, bad_login, not_authorized in ((5, 0x86, 0x87), (4, 4, 5)):
        raw = Raw(server, version=version)
        try:
            raw.send(Connect(unique("x"), version, username="dev", password=b"wrong"))
            assert raw.expect(ConnAck).reason_code == bad_login
            assert raw.expect_closed() == []
        finally:
            raw.close()
        raw = Raw(server, version=version)
        try:
            raw.send(Connect(unique("x"), version, username="nobody-here", password=b"pw"))
            assert raw.expect(ConnAck).reason_code == not_authorized
        finally:
            raw.close()
