"""Filters on MQTT 5 subscriptions (SUBSCRIBE user properties ``filter-tag`` and
``filter-sql``; docs/filters.md) against a real ``logbus serve``, with paho-mqtt and
aio-pika: a subscriber gets only the tags it asks for from AMQP publishes, only the MQTT
publishes its selector takes, retained messages through the same filter, and keeps its
filter across a broker restart; members of a shared subscription each get what their own
filter takes, and what none takes is never queued; a bad filter gets SUBACK 0x83 with a
reason string."""

from __future__ import annotations

from typing import Any

import aio_pika
from paho.mqtt.packettypes import PacketTypes

from logbus.gateway.mqtt.packets import ConnAck, Connect, SubAck, Subscribe, Subscription
from logbus.gateway.mqtt.properties import Properties
from tests.integration.amqp_target import run
from tests.integration.mqtt_clients import Paho, Raw, props, unique

WAIT = 10.0


def filter_props(**user: str) -> Any:
    return props(PacketTypes.SUBSCRIBE, UserProperty=[(k.replace("_", "-"), v) for k, v in user.items()])


def publish_amqp(server: Any, items: list[tuple[str, bytes, dict[str, Any]]]) -> None:
    async def main() -> None:
        host, port = server.host_port("amqp")
        conn = await aio_pika.connect(f"amqp://guest:guest@{host}:{port}/", timeout=WAIT)
        try:
            x = await (await conn.channel()).get_exchange("amq.topic")
            for key, body, headers in items:
                await x.publish(aio_pika.Message(body, headers=headers), key)
        finally:
            await conn.close()

    run(main())


def test_tag_filter_gets_only_those_tags_from_amqp(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "http": "off"})
    root = unique("tags")
    sub = Paho(server, unique("sub"), version=5)
    assert [c.value for c in sub.subscribe(f"{root}/#", 1, properties=filter_props(filter_tag="TagA || TagB"))] == [1]
    publish_amqp(server, [(f"{root}.x", b"a", {"x-tag": "TagA"}), (f"{root}.x", b"c", {"x-tag": "TagC"}),
                          (f"{root}.y", b"none", {}), (f"{root}.y", b"b", {"x-tag": "TagB"})])
    assert [m.payload for m in sub.take(2)] == [b"a", b"b"]
    sub.assert_quiet(0.5)


def test_sql_filter_on_mqtt_publishes_and_overlapping_subscriptions(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "http": "off"})
    root = unique("sql")
    sub = Paho(server, unique("sub"), version=5)
    codes = sub.subscribe(f"{root}/#", 1, properties=filter_props(filter_sql="temp > 30 AND region = 'eu'"))
    assert [c.value for c in codes] == [1]
    sub.subscribe(f"{root}/all", 1)  # no filter: everything on this one topic
    pub = Paho(server, unique("pub"), version=5)
    for topic, body, user in [(f"{root}/a", b"hot-eu", [("temp", "35"), ("region", "eu")]),
                              (f"{root}/a", b"cold-eu", [("temp", "3"), ("region", "eu")]),
                              (f"{root}/b", b"hot-us", [("temp", "35"), ("region", "us")]),
                              (f"{root}/all", b"cold-on-all", [("temp", "3")]),
                              (f"{root}/a", b"no-props", [])]:
        pub.publish(topic, body, 1, properties=props(PacketTypes.PUBLISH, UserProperty=user) if user else None)
    assert sorted(m.payload for m in sub.take(2)) == [b"cold-on-all", b"hot-eu"]
    sub.assert_quiet(0.5)
    # subscribing again with another filter replaces it
    sub.subscribe(f"{root}/#", 1, properties=filter_props(filter_sql="temp < 10"))
    pub.publish(f"{root}/a", b"cold-now", 1, properties=props(PacketTypes.PUBLISH, UserProperty=[("temp", "3")]))
    pub.publish(f"{root}/a", b"hot-now", 1, properties=props(PacketTypes.PUBLISH, UserProperty=[("temp", "99")]))
    assert [m.payload for m in sub.take(1)] == [b"cold-now"]
    sub.assert_quiet(0.5)
    # and without a filter, everything comes again
    sub.subscribe(f"{root}/#", 1)
    pub.publish(f"{root}/a", b"any", 1)
    assert [m.payload for m in sub.take(1)] == [b"any"]


def test_retained_messages_pass_the_filter(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "http": "off"})
    root = unique("ret")
    pub = Paho(server, unique("pub"), version=5)
    for topic, tag in [(f"{root}/1", "keep"), (f"{root}/2", "drop"), (f"{root}/3", "keep")]:
        pub.publish(topic, tag.encode(), 1, retain=True,
                    properties=props(PacketTypes.PUBLISH, UserProperty=[("tag", tag)]))
    sub = Paho(server, unique("sub"), version=5)
    sub.subscribe(f"{root}/#", 1, properties=filter_props(filter_tag="keep"))
    got = sub.take(2)
    assert sorted(m.topic for m in got) == [f"{root}/1", f"{root}/3"] and all(m.retain for m in got)
    sub.assert_quiet(0.5)


def test_bad_filter_gets_suback_0x83_with_a_reason(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "http": "off", "amqp": "off"})
    raw = Raw(server, version=5)
    raw.send(Connect(unique("raw"), 5))
    raw.expect(ConnAck)
    for pid, user, words in [(1, ("filter-sql", "temp >"), "filter-sql: expected a name, a literal or ("),
                             (2, ("filter-tag", "A || "), "filter-tag: an empty tag")]:
        raw.send(Subscribe(pid, (Subscription(f"{unique('bad')}/#", 1), Subscription(f"$share/g/{unique('bad')}/x", 0)),
                           Properties(user_properties=(user,))))
        ack = raw.expect(SubAck)
        assert ack.packet_id == pid
        assert ack.reason_codes == (0x83, 0x83)
        assert ack.properties.reason_string is not None and words in ack.properties.reason_string
    raw.send(Subscribe(4, (Subscription(f"{unique('fine')}/#", 1),)))  # the connection goes on
    assert raw.expect(SubAck).reason_codes == (1,)


def test_filter_survives_a_broker_restart(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "http": "off", "amqp": "off"})
    root, cid = unique("persist"), unique("keep")
    expiry = props(SessionExpiryInterval=600)
    sub = Paho(server, cid, version=5, clean=False, properties=expiry)
    sub.subscribe(f"{root}/#", 1, properties=filter_props(filter_sql="n >= 5"))
    sub.close()
    server.restart(same_ports=True)
    pub = Paho(server, unique("pub"), version=5)
    for n in range(10):
        pub.publish(f"{root}/x", str(n).encode(), 1, properties=props(PacketTypes.PUBLISH, UserProperty=[("n", str(n))]))
    back = Paho(server, cid, version=5, clean=False, properties=expiry, connect=False)
    flags, _, _ = back.connect()
    assert flags.session_present
    assert [m.payload for m in back.take(5)] == [b"5", b"6", b"7", b"8", b"9"]
    back.assert_quiet(0.5)


def tagged(server: Any, root: str, tags: list[str]) -> None:
    pub = Paho(server, unique("pub"), version=5)
    try:
        for i, tag in enumerate(tags):
            pub.publish(f"{root}/x", f"{tag}{i}".encode(), 1,
                        properties=props(PacketTypes.PUBLISH, UserProperty=[("tag", tag)]))
    finally:
        pub.close()


def test_shared_subscription_members_each_get_what_their_filter_takes(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "http": "off"})
    root = unique("share")
    group = f"$share/g/{root}/#"
    a, b = Paho(server, unique("a"), version=5), Paho(server, unique("b"), version=5)
    assert [c.value for c in a.subscribe(group, 1, properties=filter_props(filter_tag="A"))] == [1]
    assert [c.value for c in b.subscribe(group, 1, properties=filter_props(filter_sql="tag IN ('B')"))] == [1]
    tagged(server, root, ["A", "B", "C", "A", "B"])
    publish_amqp(server, [(f"{root}.y", b"amqp-A", {"x-tag": "A"})])
    assert [m.payload for m in a.take(3)] == [b"A0", b"A3", b"amqp-A"]
    assert [m.payload for m in b.take(2)] == [b"B1", b"B4"]
    # C2 was never queued: a member without a filter gets only what is published from now on
    anyone = Paho(server, unique("any"), version=5)
    anyone.subscribe(group, 1)
    tagged(server, root, ["C"])
    assert [m.payload for m in anyone.take(1)] == [b"C0"]
    # a member subscribing again with another filter takes by that one
    a.subscribe(group, 1, properties=filter_props(filter_tag="D"))
    b.unsubscribe(group)
    anyone.unsubscribe(group)
    tagged(server, root, ["B", "D"])
    assert [m.payload for m in a.take(1)] == [b"D1"]
    for c in (a, b, anyone):
        c.assert_quiet(0.5)


def test_shared_subscription_filters_survive_a_broker_restart(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "http": "off", "amqp": "off"})
    root = unique("share-keep")
    group = f"$share/g/{root}/#"
    expiry = props(SessionExpiryInterval=600)
    ids = {"A": unique("a"), "B": unique("b")}
    for tag, cid in ids.items():
        c = Paho(server, cid, version=5, clean=False, properties=expiry)
        c.subscribe(group, 1, properties=filter_props(filter_tag=tag))
        c.close()
    server.restart(same_ports=True)
    tagged(server, root, ["A", "B", "C", "B"])  # queued for the members while they are away
    back = {}
    for tag, cid in ids.items():
        back[tag] = Paho(server, cid, version=5, clean=False, properties=expiry, connect=False)
        flags, _, _ = back[tag].connect()
        assert flags.session_present
    assert [m.payload for m in back["A"].take(1)] == [b"A0"]
    assert [m.payload for m in back["B"].take(2)] == [b"B1", b"B3"]
    for c in back.values():
        c.assert_quiet(0.5)
