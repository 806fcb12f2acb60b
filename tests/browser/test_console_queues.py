"""The console's queues, consumer groups and message search in a real browser against a
real `logbus serve`, fed by real clients: messages published over AMQP (pika, with
confirms) and MQTT (paho, to an offline session), records produced over Kafka
(kafka-python) and a group's commits; each page's numbers are checked exactly, and its
actions (purge, reset, search) against what the clients then see."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import paho.mqtt.client as mqtt
import pika
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
from paho.mqtt.enums import CallbackAPIVersion
from selenium.webdriver.common.by import By

from tests.browser.console import DEADLINE, ConsoleBrowser
from tests.integration.mgmt import Mgmt
from tests.kafka_members import ready_to_join
from tests.serverproc import LogbusServer

TOPIC, GROUP = "console-lag", "console-lag-group"
# the records produced to TOPIC, per partition: their keys, in offset order
KEYS = {0: ["cust-a", "cust-b", "cust-a", "cust-b", "cust-a", "cust-b"], 1: ["cust-a", "cust-a", "cust-b", "cust-b"]}
COMMITTED = {0: 2, 1: 1}  # the group's commits: lag 4 and 3


def publish_amqp(server: LogbusServer, queue: str, n: int) -> None:
    """``n`` messages to ``queue`` (declared), each confirmed by the broker."""
    host, port = server.host_port("amqp")
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        host, port, credentials=pika.PlainCredentials("guest", "guest")))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True)
        for i in range(n):
            channel.basic_publish("", queue, f"order {i}".encode(), pika.BasicProperties(message_id=f"{queue}-{i}"),
                                  mandatory=True)
    finally:
        connection.close()


@pytest.fixture(scope="module")
def kafka_group(server: LogbusServer, mgmt: Mgmt) -> Iterator[str]:
    """TOPIC with KEYS produced over Kafka, and GROUP's COMMITTED offsets (committed by a
    consumer that assigned itself the partitions: the group has no members)."""
    mgmt.ok("POST", "/api/topics", {"name": TOPIC, "partitions": 2})
    host, port = server.host_port("kafka")
    bootstrap = f"{host}:{port}"
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for partition, keys in KEYS.items():
            for i, key in enumerate(keys):
                producer.send(TOPIC, f"{key} #{i}".encode(), key=key.encode(), partition=partition)
        producer.flush(DEADLINE)
    finally:
        producer.close(DEADLINE)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in KEYS])
        consumer.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(c, "", -1) for p, c in COMMITTED.items()})
    finally:
        consumer.close(autocommit=False)
    yield bootstrap


def test_a_queue_published_to_over_amqp_shows_its_messages_sorts_browses_and_purges(
        console: ConsoleBrowser, server: LogbusServer, mgmt: Mgmt) -> None:
    publish_amqp(server, "console-orders", 7)
    publish_amqp(server, "console-orders-few", 2)
    console.login("guest", "guest", then="/queues?name=console-orders")
    assert console.accessibility_problems() == []
    rows = console.table("Queues")
    assert [(r["Name"], r["Vhost"], r["Kind"], r["Ready"], r["Unacked"], r["Consumers"]) for r in rows] == [
        ("console-orders", "/", "classic", "7", "0", "0"), ("console-orders-few", "/", "classic", "2", "0", "0")]

    # sorted by a column header's link (a number: the largest first), again: the other way
    console.follow("Ready")
    console.until(lambda: "sort=ready" in console.path(), "the sorted table")
    assert [r["Name"] for r in console.table("Queues")] == ["console-orders", "console-orders-few"]
    th = console.driver.find_element(By.CSS_SELECTOR, "th[aria-sort]")
    assert (th.text, th.get_attribute("aria-sort")) == ("Ready", "descending")
    console.follow("Ready")
    console.until(lambda: "dir=asc" in console.path(), "the table sorted the other way")
    assert [r["Name"] for r in console.table("Queues")] == ["console-orders-few", "console-orders"]
    # the filter form, a GET: readable without JavaScript, bookmarkable
    console.fill("f-name", "orders-few")
    console.press("Show")
    console.until(lambda: [r["Name"] for r in console.table("Queues")] == ["console-orders-few"], "the filter")

    console.go("/queues?name=console-orders")
    console.follow("console-orders")
    console.until(lambda: console.h1() == "console-orders", "the queue's page")
    assert console.path() == "/queues/%2F/console-orders"
    facts = console.facts("queue-facts")
    assert (facts["Ready"], facts["Unacked"], facts["Messages"], facts["Routed"]) == ("7", "0", "7", "7")
    browsed = console.table("First 10 ready messages (browsed: nothing is taken)")
    assert [(r["Position"], r["Message id"], r["Payload"]) for r in browsed] == [
        (str(i + 1), f"console-orders-{i}", f"order {i} (7 B)") for i in range(7)]
    # the routing key said once: an AMQP message's record key is the same, no column repeats it
    assert {r["Routing key"] for r in browsed} == {"console-orders"} and "Key" not in browsed[0]

    console.press("Purge…")  # a confirmation first, a page of its own (no script needed)
    console.until(lambda: "confirm=purge" in console.path(), "the purge's confirmation")
    assert console.accessibility_problems() == []
    assert mgmt.ok("GET", "/api/queues/%2F/console-orders").json()["messages_ready"] == 7
    console.press("Purge")
    console.until(lambda: console.status() == "Purged 7 messages from 'console-orders'.", "the purge's message")
    assert console.path().startswith("/queues/%2F/console-orders?done=")
    assert console.facts("queue-facts")["Ready"] == "0"
    assert console.table("First 10 ready messages (browsed: nothing is taken)") == []
    assert mgmt.ok("GET", "/api/queues/%2F/console-orders").json()["messages_ready"] == 0
    console.go("/queues?name=console-orders")
    assert {r["Name"]: r["Ready"] for r in console.table("Queues")} == {"console-orders": "0",
                                                                       "console-orders-few": "2"}


def test_an_offline_mqtt_session_shows_what_it_has_queued(console: ConsoleBrowser, server: LogbusServer,
                                                         mgmt: Mgmt) -> None:
    host, port = server.host_port("mqtt")
    subscribed = threading.Event()
    sub = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="console-offline", clean_session=False,
                      protocol=mqtt.MQTTv311)
    sub.username_pw_set("guest", "guest")
    sub.on_subscribe = lambda *a: subscribed.set()
    sub.connect(host, port)
    sub.loop_start()
    try:
        sub.subscribe("console/offline", qos=1)
        assert subscribed.wait(DEADLINE)
    finally:
        sub.disconnect()
        sub.loop_stop()
    pub = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="console-publisher", protocol=mqtt.MQTTv311)
    pub.username_pw_set("guest", "guest")
    pub.connect(host, port)
    pub.loop_start()
    try:
        for i in range(4):
            pub.publish("console/offline", f"while away {i}", qos=1).wait_for_publish(DEADLINE)
    finally:
        pub.disconnect()
        pub.loop_stop()

    console.login("guest", "guest", then="/mqtt")
    row = console.reload_until("/mqtt", lambda: {r["Client id"]: r for r in console.table("MQTT sessions")}
                               .get("console-offline"), "the offline session")
    assert (row["Connected"], row["Clean"], row["Queued"]) == ("no", "no", "4")
    [queue] = [q for q in mgmt.ok("GET", "/api/queues").json()
               if q["kind"] == "session" and "console-offline" in q["name"]]
    console.go("/queues?kind=session&name=console-offline")
    [shown] = console.table("Queues")
    assert (shown["Name"], shown["Kind"], shown["Ready"]) == (queue["name"], "session", "4")


def test_a_kafka_group_shows_its_lag_per_partition_and_is_reset(console: ConsoleBrowser, mgmt: Mgmt,
                                                               kafka_group: str) -> None:
    console.login("guest", "guest", then="/consumer-groups")
    row = {r["Consumer group"]: r for r in console.table("Consumer groups")}[GROUP]
    assert (row["State"], row["Members"], row["Partitions"], row["Lag"]) == ("Empty", "0", "2", "7")
    console.follow(GROUP)
    console.until(lambda: console.h1() == GROUP, "the group's page")

    def lag() -> list[tuple[str, str, str, str]]:
        return [(r["Topic [partition]"], r["Committed offset"], r["Log end"], r["Lag"])
                for r in console.table("Lag per partition")]
    assert lag() == [(f"{TOPIC} [0]", "2", "6", "4"), (f"{TOPIC} [1]", "1", "4", "3")]

    console.choose("f-to", "earliest")
    console.press("Show the plan")  # a dry run: the plan, nothing changed
    console.until(lambda: console.table("Reset plan"), "the plan")
    assert console.accessibility_problems() == []
    assert [(r["Topic [partition]"], r["Current offset"], r["New offset"]) for r in console.table("Reset plan")] == [
        (f"{TOPIC} [0]", "2", "0"), (f"{TOPIC} [1]", "1", "0")]
    assert lag() == [(f"{TOPIC} [0]", "2", "6", "4"), (f"{TOPIC} [1]", "1", "4", "3")]
    assert [p["committed_offset"] for p in mgmt.ok("GET", f"/api/consumer-groups/{GROUP}").json()["partitions"]] \
        == [2, 1]

    console.press("Execute the reset")
    console.until(lambda: console.status() == f"Offsets of consumer group '{GROUP}' reset on 2 partitions.", "the reset")
    assert console.h1() == GROUP
    assert lag() == [(f"{TOPIC} [0]", "0", "6", "6"), (f"{TOPIC} [1]", "0", "4", "4")]
    consumer = KafkaConsumer(bootstrap_servers=kafka_group, group_id=GROUP, enable_auto_commit=False)
    try:  # what a Kafka client of the group now reads
        assert [consumer.committed(TopicPartition(TOPIC, p)) for p in KEYS] == [0, 0]
    finally:
        consumer.close(autocommit=False)

    console.choose("f-to", "shift")  # shift by 3: on partition 0 to 3, on partition 1 to 3
    console.fill("f-value", "3")
    console.press("Show the plan")
    console.until(lambda: console.table("Reset plan"), "the second plan")
    assert [r["New offset"] for r in console.table("Reset plan")] == ["3", "3"]


def test_an_active_group_may_not_be_reset_and_says_so(console: ConsoleBrowser, server: LogbusServer,
                                                     kafka_group: str) -> None:
    member = ready_to_join(KafkaConsumer(TOPIC, bootstrap_servers=kafka_group, group_id="console-active",
                                         enable_auto_commit=False, auto_offset_reset="earliest"))
    try:
        member.poll(timeout_ms=5000)  # joins the group and is assigned both partitions
        console.login("guest", "guest", then="/consumer-groups/console-active?to=earliest&topics=" + TOPIC)
        problem = console.until(lambda: console.driver.find_elements(By.ID, "reset-problem"), "the refusal")
        assert "can only be reset if the group 'console-active' is inactive" in problem[0].text
        assert console.table("Reset plan") == []
        assert len(console.table("Members")) == 1
    finally:
        member.close(autocommit=False)


def test_a_key_produced_over_kafka_is_found_by_the_topic_search(console: ConsoleBrowser, kafka_group: str) -> None:
    console.login("guest", "guest", then="/topics")
    console.follow(TOPIC)
    console.until(lambda: console.h1() == TOPIC, "the topic's page")
    console.fill("f-key", "cust-a")
    console.press("Search")
    found = console.until(lambda: console.table("Messages found: 5"), "the search's answer")
    expected = [(p, o) for p, keys in KEYS.items() for o, k in enumerate(keys) if k == "cust-a"]
    assert [(int(r["Partition"]), int(r["Offset"])) for r in found] == expected
    assert {r["Key"] for r in found} == {"cust-a"}
    assert [r["Payload"] for r in found][:2] == ["cust-a #0", "cust-a #2"]
    assert "key=cust-a" in console.path()  # a GET: the answer is a page one can bookmark
    assert console.accessibility_problems() == []

    console.fill("f-partition", "1")
    console.press("Search")
    console.until(lambda: console.table("Messages found: 2"), "the search in partition 1")
    console.fill("f-key", "nobody")
    console.press("Search")
    console.until(lambda: "Messages found: 0: no record matches." in console.driver.page_source
                  or console.driver.find_elements(By.CSS_SELECTOR, "p.empty"), "an empty answer")


def test_the_read_only_role_sees_no_purge_or_reset_and_a_forged_one_is_refused(
        console: ConsoleBrowser, server: LogbusServer, mgmt: Mgmt, kafka_group: str) -> None:
    publish_amqp(server, "console-kept", 3)
    console.login("watcher", "watch-pw", then="/queues/%2F/console-kept")
    assert console.h1() == "console-kept"
    assert console.facts("queue-facts")["Ready"] == "3"
    assert "Purge…" not in console.buttons()
    console.go(f"/consumer-groups/{GROUP}?to=earliest")
    assert console.table("Lag per partition")
    assert console.buttons() == [] and console.table("Reset plan") == []
    token = console.csrf()
    assert console.fetch_status("POST", "/queues/purge", {"csrf": token, "vhost": "/", "name": "console-kept"}) == 403
    assert console.fetch_status("POST", "/consumer-groups/reset",
                                {"csrf": token, "group": GROUP, "to": "latest", "topics": TOPIC}) == 403
    assert mgmt.ok("GET", "/api/queues/%2F/console-kept").json()["messages_ready"] == 3
    before = [p["committed_offset"] for p in mgmt.ok("GET", f"/api/consumer-groups/{GROUP}").json()["partitions"]]
    assert before != [6, 4]  # not reset to latest
