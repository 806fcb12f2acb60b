"""The MQTT session limits (docs/operations.md, "MQTT session limits") against a real
`logbus serve`: messages in flight to a client, messages queued per session (new ones
dropped past it, as in Mosquitto), the session expiry cap, the server's Receive Maximum;
each counted in /metrics. And a reconnecting session draining thousands of QoS 2
messages, each delivered once (issue 30)."""

from __future__ import annotations

import queue
import re
import time
from collections.abc import Callable
from typing import Any

from logbus.gateway.mqtt import (
    ConnAck, Connect, Disconnect, Properties, PubAck, Publish, PubRec, SubAck, Subscribe, Subscription,
)  # fmt: skip
from tests.integration.mgmt import Mgmt
from tests.integration.mqtt_clients import Paho, Raw, unique

DEADLINE = 20.0


def wait_for(what: Callable[[], Any], deadline: float = DEADLINE) -> Any:
    """``what()`` once it is true (polled), else fail: waiting on the broker's own view."""
    end = time.monotonic() + deadline
    while True:
        got = what()
        if got:
            return got
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.02)


def metric(server: Any, name: str) -> float:
    body = Mgmt(server).call("GET", "/metrics").body.decode()
    m = re.search(rf"^{name}_total (\S+)$", body, re.M)
    return float(m.group(1)) if m else 0.0


def session(server: Any, cid: str) -> dict[str, Any] | None:
    listed = Mgmt(server).call("GET", "/api/mqtt/sessions").json()
    return next((s for s in listed if s["client_id"] == cid), None)


def test_a_311_client_that_never_acks_holds_at_most_the_inflight_limit(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "amqp": "off"})  # mqtt_max_inflight_messages: 20
    base, cid = unique("inflight"), unique("noack")
    raw = Raw(server, version=4)
    raw.send(Connect(cid, 4, clean_start=True, keep_alive=60))
    raw.expect(ConnAck)
    raw.send(Subscribe(1, (Subscription(f"{base}/#", 1),)))
    raw.expect(SubAck)
    pub = Paho(server, unique("pub"))
    for i in range(50):
        pub.publish(f"{base}/t", str(i).encode(), 1)  # each PUBACKed: durable and queued
    s = wait_for(lambda: (x := session(server, cid)) and x["in_flight"] + x["queued"] == 50 and x)
    assert (s["in_flight"], s["queued"]) == (20, 30)
    got = [raw.expect(Publish) for _ in range(20)]
    assert [p.payload for p in got] == [str(i).encode() for i in range(20)]
    raw.quiet(0.3)  # the broker's own count says 20 in flight: nothing more comes
    assert metric(server, "logbus_mqtt_inflight_full") >= 1
    raw.send(PubAck(got[0].packet_id))  # room for one more
    assert raw.expect(Publish).payload == b"20"
    raw.quiet(0.3)
    raw.close()
    pub.close()


def test_a_5_client_receive_maximum_is_capped_by_the_inflight_limit(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "amqp": "off"}, args=["--mqtt-max-inflight-messages", "3"])
    base, cid = unique("inflight5"), unique("noack")
    raw = Raw(server, version=5)
    raw.send(Connect(cid, 5, keep_alive=60, properties=Properties(receive_maximum=100)))
    raw.expect(ConnAck)
    raw.send(Subscribe(1, (Subscription(f"{base}/#", 2),)))
    raw.expect(SubAck)
    pub = Paho(server, unique("pub"))
    for i in range(10):
        pub.publish(f"{base}/t", str(i).encode(), 1)
    wait_for(lambda: (x := session(server, cid)) and x["in_flight"] + x["queued"] == 10)
    assert session(server, cid)["in_flight"] == 3  # type: ignore[index]
    got = [raw.expect(Publish) for _ in range(3)]
    raw.quiet(0.3)
    raw.send(PubAck(got[0].packet_id))
    assert raw.expect(Publish).payload == b"3"
    raw.send(Disconnect())
    raw.close()
    pub.close()


def test_a_session_past_its_queue_limit_drops_new_messages_and_counts_them(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "amqp": "off"}, args=["--mqtt-max-queued-messages", "10"])
    base, cid = unique("queued"), unique("offline")
    sub = Paho(server, cid, clean=False)
    sub.subscribe(f"{base}/#", 1)
    sub.close()
    pub = Paho(server, unique("pub"))
    for i in range(25):
        pub.publish(f"{base}/t", str(i).encode(), 1)  # each PUBACKed: the publisher is not told
    pub.close()
    assert session(server, cid)["queued"] == 10  # type: ignore[index]
    assert metric(server, "logbus_mqtt_queue_dropped") == 15
    back = Paho(server, cid, clean=False, connect=False)
    flags, _, _ = back.connect()
    assert flags.session_present
    assert [m.payload for m in back.take(10)] == [str(i).encode() for i in range(10)]  # the oldest kept
    back.assert_quiet(0.5)
    back.close()


def test_the_session_expiry_cap_applies_and_a_5_client_is_told(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "amqp": "off"}, args=["--mqtt-max-session-expiry", "1"])
    raw = Raw(server, version=5)
    raw.send(Connect(unique("v5"), 5, clean_start=False, keep_alive=60,
                     properties=Properties(session_expiry_interval=600)))
    assert raw.expect(ConnAck).properties.session_expiry_interval == 1
    raw.send(Disconnect())
    raw.close()
    # a 3.1.1 persistent session, kept "until a clean connect" before, ends a second after
    cid, base = unique("v311"), unique("exp")
    c = Paho(server, cid, clean=False)
    c.subscribe(f"{base}/#", 1)
    assert session(server, cid)["expiry_interval"] == 1  # type: ignore[index]
    c.close()
    wait_for(lambda: session(server, cid) is None)  # the broker ended it
    back = Paho(server, cid, clean=False, connect=False)
    flags, _, _ = back.connect()
    assert not flags.session_present
    back.close()
    assert metric(server, "logbus_mqtt_session_expiry_capped") >= 3


def test_the_server_receive_maximum_is_told_and_enforced(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "amqp": "off"}, args=["--mqtt-receive-maximum", "5"])
    raw = Raw(server, version=5)
    raw.send(Connect(unique("rm"), 5, keep_alive=60))
    assert raw.expect(ConnAck).properties.receive_maximum == 5
    topic = unique("rm")
    for pid in range(1, 6):  # QoS 2 without PUBREL: each outstanding until its PUBCOMP
        raw.send(Publish(topic, b"x", 2, packet_id=pid))
        assert raw.expect(PubRec).packet_id == pid
    raw.send(Publish(topic, b"x", 2, packet_id=6))
    got = raw.expect_closed()
    assert [(type(p), p.reason_code) for p in got] == [(Disconnect, 0x93)]
    raw.close()
    assert metric(server, "logbus_mqtt_receive_maximum_exceeded") == 1


def test_a_reconnecting_session_drains_thousands_of_qos2_messages_each_once(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "amqp": "off"}, args=["--mqtt-max-queued-messages", "5000"])
    n = 3000
    base, cid = unique("drain"), unique("q2")
    sub = Paho(server, cid, clean=False)
    sub.subscribe(f"{base}/#", 2)
    sub.close()
    pub = Paho(server, unique("pub"))
    for i in range(n):
        pub.client.publish(f"{base}/t", str(i).encode(), 2)
    wait_for(lambda: (x := session(server, cid)) and x["queued"] == n, deadline=120)
    pub.close()
    back = Paho(server, cid, clean=False, connect=False)
    flags, _, _ = back.connect()
    assert flags.session_present
    got = back.take(n, timeout=120)
    payloads = [m.payload for m in got]
    assert sorted(payloads, key=int) == [str(i).encode() for i in range(n)]  # every one, once
    assert all(m.qos == 2 for m in got)
    try:
        extra = back.messages.get(timeout=1.0)
    except queue.Empty:
        extra = None
    assert extra is None, f"delivered again: {extra}"
    back.close()


def test_the_limits_apply_to_sessions_taken_up_at_start(logbus_server: Any) -> None:
    """A 3.1.1 session stored with no expiry is held to the cap once the broker starts again."""
    server = logbus_server(listeners={"kafka": "off", "amqp": "off"})
    cid = unique("stored")
    c = Paho(server, cid, clean=False)
    c.subscribe(f"{unique('s')}/#", 1)
    c.close()
    assert session(server, cid)["expiry_interval"] == 86400  # type: ignore[index]
    server.stop()
    server.args += ["--mqtt-max-session-expiry", "1"]
    server.restart(same_ports=True)
    wait_for(lambda: session(server, cid) is None)
