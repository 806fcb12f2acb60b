"""The broker's one registry of client connections against a real `logbus serve`: an AMQP
(pika), an MQTT (paho) and a Kafka (kafka-python) client, and the HTTP API's own
connection, are each listed by /api/connections with their protocol, user, vhost, client
id and counts, and closed by id in their protocol's terms (AMQP 320 CONNECTION_FORCED,
MQTT 5 DISCONNECT 0x98); an unknown id is 404; who sees and closes which is RabbitMQ's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pika  # type: ignore[import-untyped]
import pika.exceptions  # type: ignore[import-untyped]
import pytest
from kafka import KafkaProducer  # type: ignore[import-untyped]

from tests.integration.mgmt import Mgmt
from tests.integration.mqtt_clients import WAIT, Paho, props, unique
from tests.serverproc import LogbusServer, module_server, run_logbus

ADMINISTRATIVE_ACTION = 0x98
CONNECTION_FORCED = 320


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "connections")


@pytest.fixture(scope="module")
def mgmt(server: LogbusServer) -> Mgmt:
    m = Mgmt(server)
    m.add_user("monitor", "pw", "monitoring")  # a valid user, not an administrator
    return m


def listed(mgmt: Mgmt, ready: Any, query: str = "") -> list[dict[str, Any]]:
    """/api/connections once ``ready(connections)`` holds."""
    deadline = time.monotonic() + WAIT
    while True:
        reply = mgmt.call("GET", "/api/connections" + query)
        assert reply.status == 200, reply
        conns = reply.json()
        if ready(conns):
            return list(conns)
        assert time.monotonic() < deadline, conns
        time.sleep(0.05)


def one(conns: list[dict[str, Any]], **where: Any) -> dict[str, Any] | None:
    hits = [c for c in conns if all(c[k] == v for k, v in where.items())]
    assert len(hits) <= 1, hits
    return hits[0] if hits else None


def amqp(server: LogbusServer) -> Any:
    host, port = server.host_port("amqp")
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=host, port=port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1,
        socket_timeout=5, stack_timeout=15))


def test_every_protocol_is_listed_and_closed_by_id(server: LogbusServer, mgmt: Mgmt) -> None:
    cid = unique("registry")
    topic = unique("registry-topic")
    assert run_logbus("topic", "create", topic, "--server", server.http_url).returncode == 0

    connection = amqp(server)
    channel = connection.channel()
    channel.confirm_delivery()
    for i in range(3):
        channel.basic_publish("amq.topic", "reg.x", b"m%d" % i)

    mqtt = Paho(server, cid, version=5, properties=props(SessionExpiryInterval=0))
    mqtt.client.reconnect_delay_set(min_delay=120, max_delay=120)
    mqtt.publish(f"{cid}/t", b"hello", 1)

    kafka = KafkaProducer(bootstrap_servers=server.addresses["kafka"], client_id="registry-kafka",
                          enable_idempotence=False)
    try:
        kafka.send(topic, b"k").get(timeout=WAIT)
        conns = listed(mgmt, lambda cs: one(cs, protocol="mqtt", client_id=cid) is not None
                       and one(cs, protocol="kafka", client_id="registry-kafka") is not None
                       and any(c["protocol"] == "amqp" and c["received"] == 3 for c in cs))
        a = next(c for c in conns if c["protocol"] == "amqp" and c["received"] == 3)
        m = one(conns, protocol="mqtt", client_id=cid)
        k = one(conns, protocol="kafka", client_id="registry-kafka")
        assert m is not None and k is not None
        assert (a["user"], a["vhost"], a["tls"]) == ("guest", "/", False)
        assert (m["user"], m["vhost"], m["received"]) == ("guest", "/", 1)
        assert a["peer"].startswith("127.0.0.1:") and m["bytes_in"] > 0 and k["bytes_in"] > 0
        assert one(conns, protocol="http") is not None  # this very request's
        assert {c["protocol"] for c in listed(mgmt, bool, "?protocol=mqtt")} == {"mqtt"}
        assert mgmt.call("GET", "/api/connections?protocol=smtp").status == 400

        # closed by id, each in its own protocol's words
        assert mgmt.call("DELETE", f"/api/connections/{m['id']}").status == 204
        assert mqtt.disconnects.get(timeout=WAIT) == ADMINISTRATIVE_ACTION
        assert mgmt.call("DELETE", f"/api/connections/{a['id']}").status == 204
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            connection.process_data_events(time_limit=WAIT)
        assert closed.value.reply_code == CONNECTION_FORCED
        gone = listed(mgmt, lambda cs: one(cs, id=m["id"]) is None and one(cs, id=a["id"]) is None)
        assert one(gone, id=k["id"]) is not None  # the others stay
        assert mgmt.call("DELETE", f"/api/connections/{m['id']}").status == 404
        assert mgmt.call("DELETE", "/api/connections/nonsense").status == 404
    finally:
        kafka.close()
        mqtt.close()
        if connection.is_open:
            connection.close()


def test_each_user_sees_its_own_monitoring_sees_all_administrators_close_any(server: LogbusServer,
                                                                                 mgmt: Mgmt) -> None:
    """RabbitMQ's tags: management sees and closes its own connections, monitoring sees
    every one and closes none, an administrator closes any; wrong credentials are 401."""
    mgmt.add_user("manager", "pw", "management")
    mgmt.grant("/", "manager")
    manager, monitor = mgmt.as_user(("manager", "pw")), mgmt.as_user(("monitor", "pw"))
    assert mgmt.as_user(("guest", "wrong")).call("GET", "/api/connections").status == 401
    host, port = server.host_port("amqp")
    params = dict(host=host, port=port, connection_attempts=1, socket_timeout=5, stack_timeout=15)
    own = pika.BlockingConnection(pika.ConnectionParameters(credentials=pika.PlainCredentials("manager", "pw"),
                                                            **params))  # type: ignore[arg-type]
    other = amqp(server)
    try:
        everyone = listed(monitor, lambda cs: sum(c["protocol"] == "amqp" for c in cs) >= 2)
        assert {"guest", "manager"} <= {c["user"] for c in everyone if c["protocol"] == "amqp"}
        mine = manager.ok("GET", "/api/connections").json()
        assert mine and {c["user"] for c in mine} == {"manager"}, mine  # its AMQP and this HTTP one
        theirs = next(c for c in everyone if c["protocol"] == "amqp" and c["user"] == "guest")
        its = next(c for c in mine if c["protocol"] == "amqp")
        assert monitor.call("DELETE", f"/api/connections/{its['id']}").status == 403
        assert manager.call("DELETE", f"/api/connections/{theirs['id']}").status == 403
        assert other.is_open and own.is_open
        assert manager.call("DELETE", f"/api/connections/{its['id']}").status == 204
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            own.process_data_events(time_limit=WAIT)
        assert closed.value.reply_code == CONNECTION_FORCED
        other.process_data_events(time_limit=0)
        assert other.is_open
    finally:
        for c in (own, other):
            if c.is_open:
                c.close()
