"""The MQTT page of the console and its API against a real `logbus serve`, with paho-mqtt
clients: a client's keep alive, connection and message counts (API and page); retained
messages listed by topic filter, deleted from the console (as a client's empty retained
PUBLISH: a new subscriber gets none, and a restart does not bring it back) and over the
API, and who may do which."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.integration.html_tables import html_rows, html_tables
from tests.integration.console_forms import form_post, login, until
from tests.integration.mgmt import Mgmt
from tests.integration.mqtt_clients import Paho, props, unique
from tests.serverproc import LogbusServer, module_server

OLD_FIELDS = {"client_id", "user", "connected", "peer", "protocol", "clean", "expiry_interval", "subscriptions",
              "queued", "in_flight"}  # what /api/mqtt/clients and /sessions said before: kept


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "console-mqtt", listeners={"amqp": "off", "kafka": "off"})


@pytest.fixture(scope="module")
def mgmt(server: LogbusServer) -> Mgmt:
    m = Mgmt(server)
    m.add_user("mqtt-watcher", "pw", "monitoring")  # sees, changes nothing
    m.add_user("mqtt-manager", "pw", "management")  # the console, but not the MQTT page
    return m


def retained(m: Mgmt, topic_filter: str) -> dict[str, dict[str, Any]]:
    return {r["topic"]: r for r in m.ok("GET", f"/api/mqtt/retained?topic={quote(topic_filter, safe='')}").json()}


def first_message_after_subscribing(server: LogbusServer, topic: str) -> Any:
    """What a new subscriber to ``topic`` gets first: its retained message, if the topic
    holds one, comes before the marker published (not retained) once it subscribed."""
    subscriber, publisher = Paho(server, unique("sub")), Paho(server, unique("marker"))
    try:
        assert subscriber.subscribe(topic, qos=1) == [1]
        publisher.publish(topic, b"marker", qos=1)
        return subscriber.next_message()
    finally:
        subscriber.close()
        publisher.close()


# -- clients ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 5])
def test_a_client_shows_its_keep_alive_connection_and_the_messages_it_carried(
        server: LogbusServer, mgmt: Mgmt, version: int) -> None:
    cid, topic = unique("keeper"), unique("counted")
    expiry = props(SessionExpiryInterval=300) if version == 5 else None
    c = Paho(server, cid, version=version, keepalive=37, clean=False, properties=expiry)
    try:
        assert c.subscribe(topic, qos=1) == [1]
        for i in range(5):
            c.publish(topic, b"m%d" % i, qos=1)  # each PUBACKed: counted as received first
        assert sorted(m.payload for m in c.take(5)) == [b"m%d" % i for i in range(5)]  # written: counted as sent

        [s] = [s for s in mgmt.ok("GET", "/api/mqtt/clients").json() if s["client_id"] == cid]
        assert OLD_FIELDS <= s.keys()
        assert (s["keep_alive"], s["protocol"], s["received"], s["sent"]) == (
            37, "5.0" if version == 5 else "3.1.1", 5, 5)
        [conn] = [x for x in mgmt.ok("GET", "/api/connections?protocol=mqtt").json() if x["client_id"] == cid]
        assert (s["connection"], s["connected_at"]) == (conn["id"], conn["connected_at"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", s["connected_at"])
        [same] = [x for x in mgmt.ok("GET", "/api/mqtt/sessions").json() if x["client_id"] == cid]
        assert same == s

        row = {r["Client id"]: r for r in html_rows(mgmt.call("GET", "/mqtt").body.decode(), "MQTT sessions")}[cid]
        assert (row["Keep alive (s)"], row["Protocol"], row["Messages in"], row["Messages out"],
                row["Connected at (UTC)"]) == ("37", s["protocol"], "5", "5", s["connected_at"])
        assert re.fullmatch(r"[\d.]+/s in, [\d.]+/s out", row["Rates"]), row  # differenced between reloads

        c.close()  # the session stays (kept), its connection's facts go
        offline = until(lambda: {x["client_id"]: x for x in mgmt.ok("GET", "/api/mqtt/sessions").json()}[cid],
                        lambda x: not x["connected"], "the session offline")
        assert offline.keys() == OLD_FIELDS  # as before: the connection's facts went with it
        row = {r["Client id"]: r for r in html_rows(mgmt.call("GET", "/mqtt").body.decode(), "MQTT sessions")}[cid]
        assert (row["Keep alive (s)"], row["Messages in"], row["Connected at (UTC)"]) == ("", "", "")
    finally:
        c.close()
        mgmt.call("DELETE", f"/api/mqtt/sessions/{quote(cid, safe='')}")


# -- retained messages ---------------------------------------------------------------------------


def test_a_retained_message_deleted_from_the_console_is_gone_for_new_subscribers_and_after_a_restart(
        server: LogbusServer, mgmt: Mgmt) -> None:
    prefix = unique("house")
    topic, other = f"{prefix}/kitchen/temp", f"{prefix}/hall/temp"
    publisher = Paho(server, unique("thermo"), version=5)
    publisher.publish(topic, b"21.5", qos=1, retain=True)
    publisher.publish(other, b"\xff\x00", qos=0, retain=True)  # not UTF-8
    publisher.close()

    found = retained(mgmt, f"{prefix}/#")
    assert list(found) == [other, topic]  # topic order, level by level
    m = found[topic]
    assert (m["payload"], m["payload_encoding"], m["payload_bytes"], m["qos"], m["expires_at"]) == (
        "21.5", "string", 4, 1, None)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", m["stored_at"])
    assert (found[other]["payload"], found[other]["payload_encoding"]) == ("/wA=", "base64")
    assert list(retained(mgmt, f"{prefix}/+/temp")) == [other, topic]
    assert list(retained(mgmt, f"{prefix}/kitchen/temp")) == [topic]
    assert first_message_after_subscribing(server, topic).payload == b"21.5"  # it is there, retained

    page_path = f"/mqtt/retained?topic={quote(prefix + '/#', safe='')}"
    page = mgmt.call("GET", page_path).body.decode()
    rows = {r["Topic"]: r for r in html_rows(page, f"Retained messages matching {prefix}/#")}
    assert (rows[topic]["Payload"], rows[topic]["QoS"], rows[topic]["Size (B)"], rows[topic]["Action"]) == (
        "21.5", "1", "4", "Delete…")
    assert rows[other]["Payload"] == "/wA= (base64)"
    assert "Retained messages" in mgmt.call("GET", "/mqtt").body.decode()  # the MQTT page links to it

    # Delete… asks first; the confirmation's form posts the deletion
    confirm = mgmt.call("GET", f"{page_path}&confirm={quote(topic, safe='')}").body.decode()
    assert f"Delete the retained message of topic {topic}?" in confirm
    assert 'action="/mqtt/delete_retained"' in confirm
    done = form_post(mgmt, "/mqtt/delete_retained", f"{page_path}&confirm={quote(topic, safe='')}",
                     {"topic": topic, "back": page_path})
    assert done.status == 303, done
    assert done.headers["Location"].startswith(page_path + "&done=Retained+message+of+topic")
    assert list(retained(mgmt, f"{prefix}/#")) == [other]
    rows = {r["Topic"]: r for r in html_rows(mgmt.call("GET", page_path).body.decode(),
                                             f"Retained messages matching {prefix}/#")}
    assert list(rows) == [other]

    got = first_message_after_subscribing(server, topic)
    assert (got.payload, got.retain) == (b"marker", False)

    server.restart()  # the deletion is durable; the other retained message is still there
    assert list(retained(mgmt, f"{prefix}/#")) == [other]
    got = first_message_after_subscribing(server, topic)
    assert (got.payload, got.retain) == (b"marker", False)
    got = first_message_after_subscribing(server, other)
    assert (got.payload, got.retain) == (b"\xff\x00", True)

    # the API deletes the same way (the topic one URL-encoded path segment)
    assert mgmt.call("DELETE", f"/api/mqtt/retained/{quote(other, safe='')}").status == 204
    assert mgmt.call("DELETE", f"/api/mqtt/retained/{quote(other, safe='')}").status == 404
    assert retained(mgmt, f"{prefix}/#") == {}
    got = first_message_after_subscribing(server, other)
    assert (got.payload, got.retain) == (b"marker", False)


def test_listing_needs_monitoring_deleting_needs_an_administrator_on_the_api_and_the_console(
        server: LogbusServer, mgmt: Mgmt) -> None:
    topic = unique("guarded") + "/t"
    publisher = Paho(server, unique("pub"))
    publisher.publish(topic, b"keep me", qos=1, retain=True)
    publisher.close()
    path = f"/api/mqtt/retained/{quote(topic, safe='')}"

    watcher, manager = mgmt.as_user(("mqtt-watcher", "pw")), mgmt.as_user(("mqtt-manager", "pw"))
    assert list(retained(watcher, topic)) == [topic]
    assert watcher.call("DELETE", path).status == 403
    assert manager.call("GET", "/api/mqtt/retained").status == 403
    assert manager.call("DELETE", path).status == 403
    assert Mgmt(server, auth=None).call("GET", "/api/mqtt/retained").status == 401

    session = login(server, "mqtt-watcher", "pw")
    confirm = f"/mqtt/retained?topic={quote(topic, safe='')}&confirm={quote(topic, safe='')}"
    page = Mgmt(server, None).call("GET", confirm, headers=session)
    assert page.status == 200
    body = page.body.decode()
    assert [r["Action"] for r in html_rows(body, f"Retained messages matching {topic}")] == [""]
    assert "delete_retained" not in body  # no confirmation either
    refused = form_post(Mgmt(server, None), "/mqtt/delete_retained", confirm, {"topic": topic}, session)
    assert refused.status == 403, refused
    assert list(retained(mgmt, topic)) == [topic]

    assert mgmt.call("DELETE", path).status == 204


def test_a_bad_filter_or_limit_is_refused_and_a_topic_without_one_is_not_found(
        server: LogbusServer, mgmt: Mgmt) -> None:
    for query in ("topic=a%2F%23%2Fb", "topic=a%2Bb", "limit=0", "limit=1001", "limit=x"):
        reply = mgmt.call("GET", f"/api/mqtt/retained?{query}")
        assert reply.status == 400, (query, reply)
    page = mgmt.call("GET", "/mqtt/retained?topic=a%2F%23%2Fb").body.decode()
    assert "is not an MQTT topic filter" in page and "Retained messages" not in html_tables(page)
    missing = mgmt.call("DELETE", f"/api/mqtt/retained/{quote(unique('nothing') + '/here', safe='')}")
    assert (missing.status, missing.json()["error"]) == (404, "unknown_retained")
    assert form_post(mgmt, "/mqtt/delete_retained", "/mqtt/retained?confirm=no%2Fsuch",
                     {"topic": "no/such/topic"}).status == 404

    prefix = unique("many")
    publisher = Paho(server, unique("pub"))
    for i in range(3):
        publisher.publish(f"{prefix}/{i}", b"x", qos=1, retain=True)
    publisher.close()
    limited = mgmt.ok("GET", f"/api/mqtt/retained?topic={quote(prefix + '/#', safe='')}&limit=2").json()
    assert [r["topic"] for r in limited] == [f"{prefix}/0", f"{prefix}/1"]
    for i in range(3):
        mgmt.ok("DELETE", f"/api/mqtt/retained/{quote(f'{prefix}/{i}', safe='')}")
