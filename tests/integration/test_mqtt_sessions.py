"""MQTT sessions that outlive connections and broker restarts: offline messages kept across a
clean restart and a kill -9, QoS 2 exactly-once across a client reconnect and a broker restart
in the middle of the flow (both ways), the client's receive maximum, session expiry."""

from __future__ import annotations

import time
from typing import Any

import pytest

from logbus.gateway.mqtt import (
    ConnAck, Connect, Disconnect, Properties, PubAck, PubComp, Publish, PubRec, PubRel, SubAck, Subscribe,
    Subscription,
)  # fmt: skip
from tests.integration.mgmt import Mgmt
from tests.integration.mqtt_clients import Paho, Raw, props, unique
from tests.serverproc import run_logbus

KEEP = Properties(session_expiry_interval=600)


def raw_connect(server: Any, cid: str, *, clean: bool = False, receive_maximum: int | None = None) -> tuple[Raw, ConnAck]:
    raw = Raw(server, version=5)
    raw.send(Connect(cid, 5, clean_start=clean, keep_alive=60,
                     properties=Properties(session_expiry_interval=600, receive_maximum=receive_maximum)))
    return raw, raw.expect(ConnAck)


def restart(server: Any, how: str) -> None:
    if how == "kill":
        server.kill()
    server.restart(same_ports=True)


@pytest.mark.parametrize("how", ["stop", "kill"])
@pytest.mark.parametrize("version", [4, 5])
def test_offline_messages_survive_a_restart(logbus_server: Any, how: str, version: int) -> None:
    server = logbus_server(listeners={"kafka": "off", "http": "off"})
    base, cid = unique("off"), unique("keep")
    expiry = props(SessionExpiryInterval=600) if version == 5 else None
    sub = Paho(server, cid, version=version, clean=False, properties=expiry)
    sub.subscribe(f"{base}/#", 1)
    sub.close()
    pub = Paho(server, unique("pub"))
    for i in range(50):
        pub.publish(f"{base}/{i % 3}", str(i).encode(), 1)
    pub.close()
    restart(server, how)
    back = Paho(server, cid, version=version, clean=False, properties=expiry, connect=False)
    flags, _, _ = back.connect()
    assert flags.session_present
    got = back.take(50)
    assert [m.payload for m in got] == [str(i).encode() for i in range(50)]
    back.assert_quiet(1.0)
    # the subscription itself survived: new messages arrive too
    pub = Paho(server, unique("pub"))
    pub.publish(f"{base}/new", b"after", 1)
    assert back.next_message().payload == b"after"
    back.close()
    pub.close()


def test_unacked_qos1_is_resent_with_dup_and_same_id(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "http": "off"})
    base, cid = unique("dup"), unique("raw")
    raw, _ = raw_connect(server, cid)
    raw.send(Subscribe(1, (Subscription(f"{base}/#", 1),)))
    raw.expect(SubAck)
    pub = Paho(server, unique("pub"))
    pub.publish(f"{base}/a", b"once", 1)
    first = raw.expect(Publish)
    assert (first.payload, first.qos, first.dup) == (b"once", 1, False)
    raw.close()  # no PUBACK
    raw, ack = raw_connect(server, cid)
    assert ack.session_present
    again = raw.expect(Publish)
    assert (again.payload, again.packet_id, again.dup) == (b"once", first.packet_id, True)
    raw.send(PubAck(again.packet_id))
    raw.quiet(1.0)
    raw.send(Disconnect())
    raw.close()
    pub.close()


@pytest.mark.parametrize("how", ["reconnect", "stop", "kill"])
def test_qos2_to_the_client_exactly_once(logbus_server: Any, how: str) -> None:
    """A QoS 2 message to a client: the connection (or the broker) goes down before the
    PUBREC, then again after it: the PUBLISH comes again with its id and DUP, then only the
    PUBREL; the message is never sent as a new one."""
    server = logbus_server(listeners={"kafka": "off", "http": "off"})
    base, cid = unique("q2out"), unique("raw")
    raw, _ = raw_connect(server, cid)
    raw.send(Subscribe(1, (Subscription(f"{base}/#", 2),)))
    raw.expect(SubAck)
    pub = Paho(server, unique("pub"))
    pub.publish(f"{base}/x", b"exactly-once", 2)
    pub.close()
    first = raw.expect(Publish)
    assert first.qos == 2
    raw.close()  # before PUBREC

    def down() -> None:
        if how != "reconnect":
            restart(server, how)

    down()
    raw, ack = raw_connect(server, cid)
    assert ack.session_present
    again = raw.expect(Publish)
    assert (again.payload, again.packet_id, again.dup) == (b"exactly-once", first.packet_id, True)
    raw.send(PubRec(again.packet_id))
    assert raw.expect(PubRel).packet_id == first.packet_id
    raw.close()  # after PUBREC, before PUBCOMP
    down()
    raw, ack = raw_connect(server, cid)
    assert ack.session_present
    rel = raw.expect(PubRel)  # only the PUBREL: the message itself is the client's now
    assert rel.packet_id == first.packet_id
    raw.send(PubComp(rel.packet_id))
    raw.quiet(1.0)
    raw.send(Disconnect())
    raw.close()


@pytest.mark.parametrize("how", ["reconnect", "stop", "kill"])
def test_qos2_from_the_client_exactly_once(logbus_server: Any, how: str) -> None:
    """A QoS 2 publish PUBRECed, then the connection (or the broker) goes down: the client
    sends the PUBLISH again (DUP) and then PUBREL: subscribers get it once."""
    server = logbus_server(listeners={"kafka": "off", "http": "off"})
    base, cid = unique("q2in"), unique("raw")
    sub = Paho(server, unique("sub"), version=5, clean=False, properties=props(SessionExpiryInterval=600))
    sub.subscribe(f"{base}/#", 2)
    raw, _ = raw_connect(server, cid)
    raw.send(Publish(f"{base}/x", b"one", 2, packet_id=42))
    assert raw.expect(PubRec).packet_id == 42
    assert sub.next_message().payload == b"one"  # passed on when the PUBLISH came (method B)
    raw.close()
    if how != "reconnect":
        sub.client.loop_stop()
        restart(server, how)
        sub = Paho(server, sub.client._client_id.decode(), version=5, clean=False,
                   properties=props(SessionExpiryInterval=600))
    raw, ack = raw_connect(server, cid)
    assert ack.session_present
    raw.send(Publish(f"{base}/x", b"one", 2, dup=True, packet_id=42))
    assert raw.expect(PubRec).packet_id == 42
    raw.send(PubRel(42))
    comp = raw.expect(PubComp)
    assert (comp.packet_id, comp.reason_code) == (42, 0)
    sub.assert_quiet(1.0)  # not published a second time
    raw.send(PubRel(42))  # the id is free again: 0x92 Packet Identifier not found
    assert raw.expect(PubComp).reason_code == 0x92
    raw.send(Disconnect())
    raw.close()
    sub.close()


def test_client_receive_maximum_limits_messages_in_flight(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "http": "off"})
    base = unique("rm")
    raw, _ = raw_connect(server, unique("raw"), clean=True, receive_maximum=2)
    raw.send(Subscribe(1, (Subscription(f"{base}/#", 1),)))
    raw.expect(SubAck)
    pub = Paho(server, unique("pub"))
    for i in range(5):
        pub.publish(f"{base}/t", str(i).encode(), 1)
    got = [raw.expect(Publish), raw.expect(Publish)]
    raw.quiet(0.5)  # two unacknowledged: no third
    raw.send(PubAck(got[0].packet_id))
    got.append(raw.expect(Publish))
    raw.quiet(0.5)
    for p in got[1:]:
        raw.send(PubAck(p.packet_id))
    got += [raw.expect(Publish), raw.expect(Publish)]
    assert [p.payload for p in got] == [b"0", b"1", b"2", b"3", b"4"]
    raw.send(Disconnect())
    raw.close()
    pub.close()


def test_session_expiry_ends_an_offline_session(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "http": "off"})
    base, cid = unique("exp"), unique("short")
    c = Paho(server, cid, version=5, clean=False, properties=props(SessionExpiryInterval=1))
    c.subscribe(f"{base}/#", 1)
    c.close()
    time.sleep(2.0)
    back = Paho(server, cid, version=5, clean=False, properties=props(SessionExpiryInterval=1), connect=False)
    flags, _, _ = back.connect()
    assert not flags.session_present
    back.close()


def test_topic_aliases_towards_the_client(logbus_server: Any) -> None:
    """A client with a Topic Alias Maximum gets a topic once with an alias, then the alias
    alone (paho 2.x does not resolve aliases it receives, so a raw client checks)."""
    server = logbus_server(listeners={"kafka": "off", "http": "off"})
    base = unique("talias")
    raw = Raw(server, version=5)
    raw.send(Connect(unique("raw"), 5, properties=Properties(topic_alias_maximum=1)))
    raw.expect(ConnAck)
    raw.send(Subscribe(1, (Subscription(f"{base}/#", 0),)))
    raw.expect(SubAck)
    pub = Paho(server, unique("pub"))
    for topic in ("a", "a", "b", "a"):
        pub.publish(f"{base}/{topic}", topic.encode(), 0)
    got = [raw.expect(Publish) for _ in range(4)]
    assert [(p.topic, p.properties.topic_alias) for p in got] == [
        (f"{base}/a", 1), ("", 1), (f"{base}/b", 1), (f"{base}/a", 1)]  # one alias: replaced
    raw.send(Disconnect())
    raw.close()
    pub.close()


def _queue_names(mgmt: Mgmt) -> set[str]:
    return {q["name"] for q in mgmt.ok("GET", "/api/queues").json()}


def test_a_publish_only_client_has_no_queue(logbus_server: Any) -> None:
    """10,000 sensors that only publish are 10,000 sessions, not 10,000 empty queues: a
    session's queue is made at its first SUBSCRIBE (clean or persistent), in the API's
    and the CLI's queue list as in the console."""
    server = logbus_server(listeners={"kafka": "off", "amqp": "off"})
    mgmt = Mgmt(server)
    ids = [unique("sensor"), unique("kept"), unique("later")]
    clean, kept = Paho(server, ids[0]), Paho(server, ids[1], clean=False)
    later = Paho(server, ids[2], version=5, clean=False, properties=props(SessionExpiryInterval=600))
    for client in (clean, kept, later):
        client.publish(f"{unique('readings')}/t", b"21.5", 1)
    sessions = {s["client_id"] for s in mgmt.ok("GET", "/api/mqtt/sessions").json()}
    assert set(ids) <= sessions
    assert not [name for name in _queue_names(mgmt) if name.startswith("mqtt-session:")]
    listed = run_logbus("queue", "list", "--server", server.http_url, "--kind", "session")
    assert listed.returncode == 0 and "mqtt-session:" not in listed.stdout, listed
    # the first SUBSCRIBE makes it, and messages come
    base = unique("sub")
    later.subscribe(f"{base}/#", 1)
    assert f"mqtt-session:{ids[2]}" in _queue_names(mgmt)
    clean.publish(f"{base}/x", b"hello", 1)
    assert later.next_message().payload == b"hello"
    for client in (clean, kept, later):
        client.close()


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_persistent_session_without_a_queue_survives_a_restart(logbus_server: Any, how: str) -> None:
    """A kept session with no subscription is stored without a queue; taken up again after
    a restart it subscribes, gets its queue, and its offline messages survive the next
    restart as any session's do."""
    server = logbus_server(listeners={"kafka": "off", "amqp": "off"})
    cid, base = unique("late"), unique("late")
    expiry = props(SessionExpiryInterval=600)
    first = Paho(server, cid, version=5, clean=False, properties=expiry)
    first.close()
    restart(server, how)
    assert f"mqtt-session:{cid}" not in _queue_names(Mgmt(server))
    back = Paho(server, cid, version=5, clean=False, properties=expiry, connect=False)
    flags, _, _ = back.connect()
    assert flags.session_present
    back.subscribe(f"{base}/#", 1)
    back.close()
    pub = Paho(server, unique("pub"))
    pub.publish(f"{base}/a", b"kept offline", 1)
    pub.close()
    restart(server, how)
    again = Paho(server, cid, version=5, clean=False, properties=expiry)
    assert again.next_message().payload == b"kept offline"
    again.close()


def test_a_will_of_a_publish_only_session_is_published(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "amqp": "off", "http": "off"})
    base = unique("will")
    watcher = Paho(server, unique("watch"))
    watcher.subscribe(f"{base}/#", 1)
    dying = Paho(server, unique("dying"), will=(f"{base}/gone", b"bye", 1, False))
    dying.drop()  # no DISCONNECT: the will goes out
    assert watcher.next_message().payload == b"bye"
    watcher.close()
