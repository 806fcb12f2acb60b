"""The console's MQTT page in a real browser against a real `logbus serve`, with paho-mqtt
clients: a client's keep alive and message counts in the sessions table; a retained
message found by a topic filter and deleted after a confirmation, after which a new
subscriber gets none; the read-only role sees no Delete and its forged form is refused."""

from __future__ import annotations

from urllib.parse import quote

from tests.browser.console import ConsoleBrowser
from tests.integration.mgmt import Mgmt
from tests.integration.mqtt_clients import Paho, unique
from tests.serverproc import LogbusServer


def retained_topics(mgmt: Mgmt, topic_filter: str) -> list[str]:
    return [r["topic"] for r in mgmt.ok("GET", f"/api/mqtt/retained?topic={quote(topic_filter, safe='')}").json()]


def retain(server: LogbusServer, topic: str, payload: bytes) -> None:
    publisher = Paho(server, unique("mqtt-page-pub"))
    try:
        publisher.publish(topic, payload, qos=1, retain=True)
    finally:
        publisher.close()


def test_a_client_shows_its_keep_alive_and_the_messages_it_carried(console: ConsoleBrowser, server: LogbusServer) -> None:
    cid, topic = unique("mqtt-page-client"), unique("mqtt-page-echo")
    client = Paho(server, cid, keepalive=37)
    try:
        client.subscribe(topic, qos=1)
        for i in range(3):
            client.publish(topic, b"%d" % i, qos=1)
        client.take(3)
        console.login("guest", "guest", then="/mqtt")
        assert console.accessibility_problems() == []
        row = {r["Client id"]: r for r in console.table("MQTT sessions")}[cid]
        assert (row["Keep alive (s)"], row["Protocol"], row["Messages in"], row["Messages out"]) == (
            "37", "3.1.1", "3", "3")
        assert row["Connected at (UTC)"].endswith("Z")
    finally:
        client.close()


def test_a_retained_message_is_found_by_filter_and_deleted_after_a_confirmation(
        console: ConsoleBrowser, server: LogbusServer, mgmt: Mgmt) -> None:
    prefix = unique("mqtt-page-house")
    topic, other = f"{prefix}/kitchen/temp", f"{prefix}/hall/temp"
    retain(server, topic, b"21.5")
    retain(server, other, b"19.0")

    console.login("guest", "guest", then="/mqtt")
    console.follow("Retained messages")
    console.until(lambda: console.h1() == "Retained messages", "the retained messages' page")
    console.fill("f-topic", f"{prefix}/+/temp")
    console.press("Show")
    caption = f"Retained messages matching {prefix}/+/temp"
    console.until(lambda: console.table(caption), "the filtered list")
    assert console.accessibility_problems() == []
    assert [(r["Topic"], r["Payload"], r["QoS"]) for r in console.table(caption)] == [
        (other, "19.0", "1"), (topic, "21.5", "1")]

    console.press_in_row(caption, {"Topic": topic}, "Delete…")
    console.until(lambda: "Delete" in console.buttons(), "the deletion's confirmation")
    assert console.accessibility_problems() == []
    console.press("Delete")
    console.until(lambda: "deleted" in console.status(), "the deletion's message")
    assert [r["Topic"] for r in console.table(caption)] == [other]  # back on the same filter
    assert retained_topics(mgmt, f"{prefix}/#") == [other]

    # a new subscriber gets no retained message: the first it gets is what is published next
    subscriber, publisher = Paho(server, unique("mqtt-page-sub")), Paho(server, unique("mqtt-page-marker"))
    try:
        subscriber.subscribe(topic, qos=1)
        publisher.publish(topic, b"marker", qos=1)
        got = subscriber.next_message()
        assert (got.payload, got.retain) == (b"marker", False)
    finally:
        subscriber.close()
        publisher.close()
    mgmt.ok("DELETE", f"/api/mqtt/retained/{quote(other, safe='')}")


def test_the_read_only_role_sees_no_delete_and_its_forged_form_is_refused(
        console: ConsoleBrowser, server: LogbusServer, mgmt: Mgmt) -> None:
    topic = unique("mqtt-page-guarded") + "/t"
    retain(server, topic, b"keep me")
    console.login("watcher", "watch-pw", then=f"/mqtt/retained?topic={quote(topic, safe='')}")
    caption = f"Retained messages matching {topic}"
    assert [r["Topic"] for r in console.table(caption)] == [topic]  # it sees it
    assert console.buttons_in_row(caption, {"Topic": topic}) == []
    console.go(f"/mqtt/retained?topic={quote(topic, safe='')}&confirm={quote(topic, safe='')}")
    assert "Delete" not in console.buttons()  # nor a confirmation, asked by hand

    # the administrator's form, made by hand with the watcher's valid token: the server says no
    assert console.fetch_status("POST", "/mqtt/delete_retained", {"csrf": console.csrf(), "topic": topic}) == 403
    assert retained_topics(mgmt, topic) == [topic]
    mgmt.ok("DELETE", f"/api/mqtt/retained/{quote(topic, safe='')}")
