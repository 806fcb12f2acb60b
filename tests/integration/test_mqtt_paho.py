"""MQTT with paho-mqtt (3.1.1 and 5.0) against a real ``logbus serve``: QoS 0, 1 and 2 both
ways, wildcards and ``$`` topics, retained messages, persistent sessions, will messages,
session takeover, unsubscribe, shared subscriptions, MQTT 5 properties."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.integration.mqtt_clients import Paho, props, unique
from tests.serverproc import ServerFactory



@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    factory = ServerFactory(Path(tmp_path_factory.mktemp("mqtt_paho")))
    try:
        yield factory.start(listeners={"kafka": "off"})
    finally:
        factory.cleanup()


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_publish_subscribe_each_qos(server: Any, version: int, qos: int) -> None:
    base = unique("qos")
    sub = Paho(server, unique("sub"), version=version)
    pub = Paho(server, unique("pub"), version=version)
    try:
        codes = sub.subscribe(f"{base}/+", qos)
        assert [getattr(c, "value", c) for c in codes] == [qos]
        for i in range(20):
            pub.publish(f"{base}/{i}", f"m{i}".encode(), qos)
        got = sub.take(20)
        assert [(m.topic, m.payload, m.qos) for m in got] == [(f"{base}/{i}", f"m{i}".encode(), qos) for i in range(20)]
        sub.assert_quiet()
    finally:
        sub.close()
        pub.close()


def test_granted_qos_caps_delivery(server: Any) -> None:
    base = unique("cap")
    sub = Paho(server, unique("sub"))
    pub = Paho(server, unique("pub"))
    try:
        sub.subscribe(f"{base}/#", 1)
        pub.publish(f"{base}/x", b"two", 2)
        pub.publish(f"{base}/x", b"zero", 0)
        got = sub.take(2)
        assert [(m.payload, m.qos) for m in got] == [(b"two", 1), (b"zero", 0)]
    finally:
        sub.close()
        pub.close()


def test_wildcards_and_dollar_topics(server: Any) -> None:
    base = unique("wild")
    sub = Paho(server, unique("sub"))
    hash_all = Paho(server, unique("all"))
    pub = Paho(server, unique("pub"))
    try:
        sub.subscribe(f"{base}/+/temp", 1)
        hash_all.subscribe("#", 0)
        pub.publish(f"{base}/kitchen/temp", b"1", 1)
        pub.publish(f"{base}/kitchen/humidity", b"2", 1)
        pub.publish(f"{base}/a/b/temp", b"3", 1)
        pub.publish(f"$SYS/{base}", b"4", 1)  # '#' does not match a topic that begins with '$'
        assert [m.payload for m in sub.take(1)] == [b"1"]
        sub.assert_quiet()
        seen = [m.payload for m in hash_all.take(3)]
        assert seen == [b"1", b"2", b"3"]
        hash_all.assert_quiet()
    finally:
        for c in (sub, hash_all, pub):
            c.close()


def test_one_copy_for_overlapping_subscriptions(server: Any) -> None:
    base = unique("overlap")
    sub = Paho(server, unique("sub"))
    pub = Paho(server, unique("pub"))
    try:
        sub.subscribe([(f"{base}/#", 0), (f"{base}/a", 1), (f"{base}/+", 0)])
        pub.publish(f"{base}/a", b"once", 1)
        m = sub.next_message()
        assert (m.payload, m.qos) == (b"once", 1)  # the highest QoS of the matching subscriptions
        sub.assert_quiet()
    finally:
        sub.close()
        pub.close()


def test_retained_messages_with_wildcards_and_clearing(server: Any) -> None:
    base = unique("ret")
    pub = Paho(server, unique("pub"))
    try:
        pub.publish(f"{base}/a/1", b"one", 1, retain=True)
        pub.publish(f"{base}/a/2", b"two", 1, retain=True)
        pub.publish(f"{base}/b/1", b"other", 0, retain=True)
        pub.publish(f"{base}/a/2", b"TWO", 1, retain=True)  # replaces
        sub = Paho(server, unique("sub"))
        sub.subscribe(f"{base}/a/+", 1)
        got = sorted((m.topic, m.payload, m.retain) for m in sub.take(2))
        assert got == [(f"{base}/a/1", b"one", True), (f"{base}/a/2", b"TWO", True)]
        sub.assert_quiet()
        # a live publish with retain reaches current subscribers with the flag cleared (3.1.1)
        pub.publish(f"{base}/a/3", b"live", 1, retain=True)
        m = sub.next_message()
        assert (m.payload, m.retain) == (b"live", False)
        # an empty retained payload clears the topic's retained message
        pub.publish(f"{base}/a/1", b"", 1, retain=True)
        assert sub.next_message().payload == b""
        sub.close()
        again = Paho(server, unique("sub"))
        again.subscribe(f"{base}/#", 1)
        got = sorted((m.topic, m.payload) for m in again.take(3))
        assert got == [(f"{base}/a/2", b"TWO"), (f"{base}/a/3", b"live"), (f"{base}/b/1", b"other")]
        again.assert_quiet()
        again.close()
    finally:
        pub.close()


@pytest.mark.parametrize("version", [4, 5])
def test_persistent_session_keeps_offline_messages(server: Any, version: int) -> None:
    base = unique("offline")
    cid = unique("keep")
    expiry = props(SessionExpiryInterval=300) if version == 5 else None
    sub = Paho(server, cid, version=version, clean=False, properties=expiry)
    sub.subscribe(f"{base}/#", 1)
    sub.close()
    pub = Paho(server, unique("pub"))
    for i in range(10):
        pub.publish(f"{base}/{i}", str(i).encode(), 1)
    pub.close()
    back = Paho(server, cid, version=version, clean=False, properties=expiry, connect=False)
    flags, _, _ = back.connect()  # no new SUBSCRIBE: the session has it
    assert flags.session_present
    got = back.take(10)
    assert [m.payload for m in got] == [str(i).encode() for i in range(10)]
    back.close()
    # a clean connect ends it: nothing is kept
    clean = Paho(server, cid, version=version, clean=True, connect=False)
    flags, _, _ = clean.connect()
    assert not flags.session_present
    clean.assert_quiet()
    clean.close()


def test_session_present_false_for_new_and_clean(server: Any) -> None:
    cid = unique("sp")
    c = Paho(server, cid, clean=False, connect=False)
    flags, rc, _ = c.connect()
    assert not flags.session_present
    c.close()
    c2 = Paho(server, cid, clean=False, connect=False)
    flags, rc, _ = c2.connect()
    assert flags.session_present
    c2.close()


@pytest.mark.parametrize("version", [4, 5])
def test_will_on_abrupt_disconnect_not_on_clean_one(server: Any, version: int) -> None:
    base = unique("will")
    watcher = Paho(server, unique("watch"))
    watcher.subscribe(f"{base}/#", 1)
    dying = Paho(server, unique("dying"), version=version, will=(f"{base}/gone", b"bye", 1, False))
    dying.drop()
    m = watcher.next_message()
    assert (m.topic, m.payload) == (f"{base}/gone", b"bye")
    polite = Paho(server, unique("polite"), version=version, will=(f"{base}/gone", b"never", 1, False))
    polite.close()
    watcher.assert_quiet(1.0)
    watcher.close()


def test_will_after_keep_alive_timeout(server: Any) -> None:
    base = unique("ka")
    watcher = Paho(server, unique("watch"))
    watcher.subscribe(f"{base}/#", 0)
    # a client that goes silent: keep alive 1 s, closed after 1.5 s without a packet
    from logbus.gateway.mqtt import Connect, ConnAck, Will
    from tests.integration.mqtt_clients import Raw

    raw = Raw(server, version=4)
    raw.send(Connect(unique("silent"), 4, keep_alive=1, will=Will(f"{base}/lost", b"timeout")))
    raw.expect(ConnAck)
    start = time.monotonic()
    try:
        assert raw.expect_closed(timeout=60) == []
        assert time.monotonic() - start >= 1.4  # 1.5 keep-alives, not sooner
    finally:
        raw.close()
    assert watcher.next_message().payload == b"timeout"
    watcher.close()


def test_session_takeover_closes_the_first_connection(server: Any) -> None:
    base = unique("take")
    cid = unique("twin")
    first = Paho(server, cid, version=5, properties=props(SessionExpiryInterval=60))
    first.subscribe(f"{base}/#", 1)
    second = Paho(server, cid, version=5, clean=False)
    assert first.disconnects.get(timeout=5) == 0x8E  # Session taken over
    pub = Paho(server, unique("pub"))
    pub.publish(f"{base}/x", b"to-second", 1)
    assert second.next_message().payload == b"to-second"  # the session (its subscription) moved
    for c in (second, pub):
        c.close()
    first.client.loop_stop()


def test_unsubscribe(server: Any) -> None:
    base = unique("unsub")
    sub = Paho(server, unique("sub"), version=5)
    pub = Paho(server, unique("pub"))
    sub.subscribe(f"{base}/a", 1)
    pub.publish(f"{base}/a", b"1", 1)
    assert sub.next_message().payload == b"1"
    codes = sub.unsubscribe(f"{base}/a")
    assert [c.value for c in codes] == [0]
    codes = sub.unsubscribe(f"{base}/never")
    assert [c.value for c in codes] == [0x11]  # No subscription existed
    pub.publish(f"{base}/a", b"2", 1)
    sub.assert_quiet()
    sub.close()
    pub.close()


def test_shared_subscription_balances_load(server: Any) -> None:
    base = unique("share")
    members = [Paho(server, unique("m"), version=5) for _ in range(3)]
    for m in members:
        m.subscribe(f"$share/workers/{base}/#", 1)
    plain = Paho(server, unique("plain"), version=5)
    plain.subscribe(f"{base}/#", 1)
    pub = Paho(server, unique("pub"))
    for i in range(30):
        pub.publish(f"{base}/job", str(i).encode(), 1)
    assert len(plain.take(30)) == 30  # a plain subscription gets every one
    counts: Counter[int] = Counter()
    seen: list[bytes] = []
    deadline = time.monotonic() + 10
    while len(seen) < 30 and time.monotonic() < deadline:
        for i, m in enumerate(members):
            while not m.messages.empty():
                seen.append(m.messages.get().payload)
                counts[i] += 1
        time.sleep(0.05)
    assert sorted(seen, key=int) == [str(i).encode() for i in range(30)]  # each exactly once
    assert len(counts) == 3 and min(counts.values()) >= 5, counts
    for c in (*members, plain, pub):
        c.close()


def test_a_shared_and_a_plain_subscription_each_send_their_own_copy(server: Any) -> None:
    """MQTT 5 section 4.8.2: a message matching a session's shared and non-shared
    subscriptions comes once by each, with that subscription's QoS and identifier."""
    base = unique("both")
    sub = Paho(server, unique("sub"), version=5)
    sub.subscribe(f"{base}/t", 0, properties=props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=1))
    sub.subscribe(f"$share/g/{base}/t", 1, properties=props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=2))
    pub = Paho(server, unique("pub"), version=5)
    pub.publish(f"{base}/t", b"x", 1)
    got = sorted((m.qos, m.properties.SubscriptionIdentifier) for m in sub.take(2))
    assert got == [(0, [1]), (1, [2])]
    sub.assert_quiet()
    sub.close()
    pub.close()


def test_mqtt5_properties_round_trip(server: Any) -> None:
    base = unique("props")
    sub = Paho(server, unique("sub"), version=5)
    pub = Paho(server, unique("pub"), version=5)
    sub.subscribe(f"{base}/#", 1, properties=props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=7))
    p = props(PacketTypes.PUBLISH, PayloadFormatIndicator=1, ContentType="text/plain",
              ResponseTopic=f"{base}/reply", CorrelationData=b"\x01\x02", MessageExpiryInterval=60,
              UserProperty=[("k", "v"), ("k", "w"), ("région", "été")])
    pub.publish(f"{base}/req", "héllo".encode(), 1, properties=p)
    m = sub.next_message()
    got = m.properties
    assert m.payload == "héllo".encode()
    assert got.PayloadFormatIndicator == 1 and got.ContentType == "text/plain"
    assert got.ResponseTopic == f"{base}/reply" and got.CorrelationData == b"\x01\x02"
    assert 55 <= got.MessageExpiryInterval <= 60
    assert got.UserProperty == [("k", "v"), ("k", "w"), ("région", "été")]
    assert got.SubscriptionIdentifier == [7]
    sub.close()
    pub.close()


def test_no_local_and_retain_as_published(server: Any) -> None:
    from paho.mqtt.subscribeoptions import SubscribeOptions

    base = unique("opts")
    c = Paho(server, unique("self"), version=5)
    c.subscribe([(f"{base}/own", SubscribeOptions(qos=1, noLocal=True)),
                 (f"{base}/rap", SubscribeOptions(qos=1, retainAsPublished=True))])
    c.publish(f"{base}/own", b"mine", 1)
    c.publish(f"{base}/rap", b"kept", 1, retain=True)
    m = c.next_message()
    assert (m.topic, m.retain) == (f"{base}/rap", True)
    c.assert_quiet()
    c.close()


def test_retain_handling(server: Any) -> None:
    from paho.mqtt.subscribeoptions import SubscribeOptions

    base = unique("rh")
    pub = Paho(server, unique("pub"))
    pub.publish(f"{base}/t", b"r", 1, retain=True)
    c = Paho(server, unique("rh"), version=5)
    c.subscribe([(f"{base}/t", SubscribeOptions(qos=1, retainHandling=2))])
    c.assert_quiet()
    c.subscribe([(f"{base}/+", SubscribeOptions(qos=1, retainHandling=1))])
    assert c.next_message().payload == b"r"
    c.subscribe([(f"{base}/+", SubscribeOptions(qos=1, retainHandling=1))])  # exists: not again
    c.assert_quiet()
    c.subscribe([(f"{base}/+", SubscribeOptions(qos=1, retainHandling=0))])  # always
    assert c.next_message().payload == b"r"
    c.close()
    pub.close()


def test_topic_alias_from_the_client(server: Any) -> None:
    base = unique("alias")
    sub = Paho(server, unique("sub"), version=5)
    sub.subscribe(f"{base}/#", 1)
    pub = Paho(server, unique("pub"), version=5)
    pub.publish(f"{base}/long/topic/name", b"1", 1, properties=props(PacketTypes.PUBLISH, TopicAlias=3))
    pub.publish("", b"2", 1, properties=props(PacketTypes.PUBLISH, TopicAlias=3))
    got = sub.take(2)
    assert [(m.topic, m.payload) for m in got] == [(f"{base}/long/topic/name", b"1"), (f"{base}/long/topic/name", b"2")]
    sub.close()
    pub.close()


def test_topics_with_dots_spaces_and_unicode_round_trip(server: Any) -> None:
    base = unique("names")
    sub = Paho(server, unique("sub"), version=5)
    sub.subscribe(f"{base}/#", 1)
    pub = Paho(server, unique("pub"))
    topics = [f"{base}/v1.2/status", f"{base}/with space/x", f"{base}/température/°C", f"{base}//empty", f"{base}/a.b.c"]
    for t in topics:
        pub.publish(t, b"x", 1)
    assert [m.topic for m in sub.take(len(topics))] == topics
    sub.close()
    pub.close()


def test_retained_message_keeps_its_properties_and_gets_the_subscription_id(server: Any) -> None:
    base = unique("retprops")
    pub = Paho(server, unique("pub"), version=5)
    pub.publish(f"{base}/s", b"v", 1, retain=True,
                properties=props(PacketTypes.PUBLISH, UserProperty=[("unit", "°C")], ContentType="text/plain"))
    sub = Paho(server, unique("sub"), version=5)
    sub.subscribe(f"{base}/#", 1, properties=props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=42))
    m = sub.next_message()
    assert (m.payload, m.retain) == (b"v", True)
    assert m.properties.UserProperty == [("unit", "°C")] and m.properties.ContentType == "text/plain"
    assert m.properties.SubscriptionIdentifier == [42]
    sub.close()
    pub.close()
