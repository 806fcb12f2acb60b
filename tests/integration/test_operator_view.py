"""The operator's view against a real `logbus serve`, every number checked against what
real clients did: AMQP (pika) queue depth after N publishes and unacked after N
deliveries, an MQTT (paho) session's queued messages while it is offline, a Kafka
(kafka-python) group's committed offsets and lag after produce and commit, a pop group's
ready and invisible counts; browse without consuming, purge, offset resets (dry run,
execute, refused while the group has members); /api/overview, /api/exchanges,
/api/bindings and the Prometheus series (aggregated and per object)."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import kafka  # type: ignore[import-untyped]
import pika  # type: ignore[import-untyped]
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # type: ignore[import-untyped]
from kafka.structs import OffsetAndMetadata  # type: ignore[import-untyped]

from tests.integration.html_tables import html_rows, html_tables
from tests.integration.mgmt import Mgmt, q
from tests.integration.mqtt_clients import WAIT, Paho, unique
from tests.kafka_members import ready_to_join
from tests.serverproc import LogbusServer, module_server, run_logbus

JOIN_WAIT = 60.0  # s: a consumer group join, which may wait out a session timeout


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "operator-view")


@pytest.fixture(scope="module")
def mgmt(server: LogbusServer) -> Mgmt:
    m = Mgmt(server)
    m.add_user("watcher", "pw", "monitoring")
    m.add_user("manager", "pw", "management")  # no permission anywhere
    return m


def amqp(server: LogbusServer, **params: Any) -> Any:
    host, port = server.host_port("amqp")
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=host, port=port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1, **params))


def cli(server: LogbusServer, *args: str) -> Any:
    host, port = server.host_port("http")
    result = run_logbus(*args, "--server", f"{host}:{port}")
    assert result.returncode == 0, result.stderr
    return result


def cli_rows(text: str) -> list[dict[str, str]]:
    """A CLI table (columns two spaces apart, cells without double spaces) as {header: cell}."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0]
    starts = [i for i in range(len(header)) if header[i] != " " and (i == 0 or header[i - 2:i] == "  ")]
    cells = [[line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])] for line in lines]
    return [dict(zip(cells[0], row)) for row in cells[1:]]


def eventually(fetch: Any, ready: Any) -> Any:
    """``fetch()`` once ``ready(value)`` holds (the broker settles asynchronously)."""
    deadline = time.monotonic() + WAIT
    while True:
        value = fetch()
        if ready(value):
            return value
        assert time.monotonic() < deadline, value
        time.sleep(0.05)


def queue(mgmt: Mgmt, vhost: str, name: str) -> dict[str, Any]:
    reply = mgmt.call("GET", f"/api/queues/{q(vhost)}/{q(name)}")
    assert reply.status == 200, reply
    body: dict[str, Any] = reply.json()
    return body


def metric(text: str, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(name + ("{" + want + "}" if labels else " ")):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_amqp_queue_depth_unacked_browse_and_purge(server: LogbusServer, mgmt: Mgmt) -> None:
    conn = amqp(server)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("ov-orders", durable=True, arguments={"x-max-length": 1000})
    for i in range(7):
        ch.basic_publish("", "ov-orders", f"order {i}".encode(), pika.BasicProperties(message_id=f"m{i}"))
    info = queue(mgmt, "/", "ov-orders")
    assert (info["messages_ready"], info["messages_unacknowledged"], info["messages"]) == (7, 0, 7)
    assert (info["kind"], info["protocol"], info["durable"]) == ("classic", "amqp", True)
    assert info["arguments"] == {"x-max-length": 1000}
    assert info["message_stats"]["publish"] == 7

    # browse: the first three in order, nothing taken
    reply = mgmt.call("POST", "/api/queues/%2F/ov-orders/get", {"count": 3, "ackmode": "ack_requeue_true"})
    assert reply.status == 200, reply
    got = reply.json()
    assert [m["payload"] for m in got] == ["order 0", "order 1", "order 2"]
    assert [m["message_id"] for m in got] == ["m0", "m1", "m2"]
    assert not any(m["redelivered"] for m in got)
    assert queue(mgmt, "/", "ov-orders")["messages_ready"] == 7

    # three deliveries not acked yet, then one acked and one requeued
    ch.basic_qos(prefetch_count=3)
    tags: list[int] = []
    ch.basic_consume("ov-orders", lambda c, m, p, b: tags.append(m.delivery_tag))
    while len(tags) < 3:
        conn.process_data_events(time_limit=0.1)
    info = eventually(lambda: queue(mgmt, "/", "ov-orders"), lambda i: i["messages_unacknowledged"] == 3)
    assert (info["messages_ready"], info["consumers"]) == (4, 1)
    assert info["message_stats"]["deliver_get"] == 3
    ch.basic_ack(tags[0])
    ch.basic_cancel(ch.consumer_tags[0])
    ch.basic_nack(tags[1], requeue=True)
    info = eventually(lambda: queue(mgmt, "/", "ov-orders"), lambda i: i["messages_unacknowledged"] == 1)
    assert (info["messages_ready"], info["consumers"], info["message_stats"]["ack"]) == (5, 0, 1)

    # purge: the ready ones go, the leased one stays
    assert mgmt.call("DELETE", "/api/queues/%2F/ov-orders/contents").status == 204
    info = queue(mgmt, "/", "ov-orders")
    assert (info["messages_ready"], info["messages_unacknowledged"]) == (0, 1)
    conn.close()
    info = eventually(lambda: queue(mgmt, "/", "ov-orders"), lambda i: i["messages_unacknowledged"] == 0)
    assert info["messages_ready"] == 1  # given back when its channel closed

    # who may: a management user without permissions neither sees nor purges it
    manager = mgmt.as_user(("manager", "pw"))
    assert "ov-orders" not in [x["name"] for x in manager.call("GET", "/api/queues").json()]
    assert manager.call("DELETE", "/api/queues/%2F/ov-orders/contents").status == 404
    assert mgmt.call("GET", "/api/queues/%2F/no-such").status == 404
    assert mgmt.call("GET", "/api/queues/no-such-vhost").status == 404
    assert mgmt.call("POST", "/api/queues/%2F/ov-orders/get", {"count": 0}).status == 400


def test_exchanges_and_bindings(server: LogbusServer, mgmt: Mgmt) -> None:
    conn = amqp(server)
    ch = conn.channel()
    ch.exchange_declare("ov-events", "topic", durable=True)
    ch.queue_declare("ov-audit", durable=True)
    ch.queue_bind("ov-audit", "ov-events", "order.*")
    exchanges = {e["name"]: e for e in mgmt.call("GET", "/api/exchanges/%2F").json()}
    assert exchanges["ov-events"]["type"] == "topic" and exchanges["ov-events"]["durable"] is True
    bindings = mgmt.call("GET", "/api/bindings").json()
    assert {"source": "ov-events", "destination": "ov-audit", "routing_key": "order.*"}.items() <= next(
        b for b in bindings if b["source"] == "ov-events").items()
    conn.close()


def test_mqtt_session_queue_while_offline(server: LogbusServer, mgmt: Mgmt) -> None:
    cid = unique("ov-dev")
    sub = Paho(server, cid, clean=False)
    sub.subscribe("ov/dev/#", qos=1)
    sub.close()
    pub = Paho(server)
    for i in range(5):
        pub.publish(f"ov/dev/{i}", b"reading", qos=1).wait_for_publish(WAIT)
    pub.close()
    name = f"mqtt-session:{cid}"
    info = eventually(lambda: queue(mgmt, "/", name), lambda i: i["messages_ready"] == 5)
    assert (info["kind"], info["protocol"], info["consumers"]) == ("session", "mqtt", 0)
    browsed = mgmt.call("POST", f"/api/queues/%2F/{q(name)}/get", {"count": 10}).json()
    assert [m["routing_key"] for m in browsed] == [f"ov.dev.{i}" for i in range(5)]  # RabbitMQ's mapping
    assert [m["properties"]["mqtt_topic"] for m in browsed] == [f"ov/dev/{i}" for i in range(5)]
    sub = Paho(server, cid, clean=False)
    assert len(sub.take(5)) == 5
    info = eventually(lambda: queue(mgmt, "/", name), lambda i: i["messages"] == 0)
    assert info["message_stats"]["deliver_get"] == 5
    sub.close()


def test_kafka_group_lag_and_reset(server: LogbusServer, mgmt: Mgmt) -> None:
    topic, group = "ov-clicks", "ov-analytics"
    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"])
    for i in range(10):
        producer.send(topic, key=b"k", value=b"click %d" % i, partition=0)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.commit({tp: OffsetAndMetadata(4, "", -1)})
    g = mgmt.call("GET", f"/api/consumer-groups/{group}").json()
    part = next(p for p in g["partitions"] if p["topic"] == topic)
    assert (part["committed_offset"], part["log_end_offset"], part["lag"]) == (4, 10, 6)
    assert g["lag"] == 6
    assert group in [x["consumer_group"] for x in mgmt.call("GET", "/api/consumer-groups").json()]

    reset = f"/api/consumer-groups/{group}/reset-offsets"
    plan = mgmt.call("POST", reset, {"to": "earliest"}).json()  # a dry run
    assert plan == [{"topic": topic, "partition": 0, "current_offset": 4, "new_offset": 0}]
    assert mgmt.call("GET", f"/api/consumer-groups/{group}").json()["lag"] == 6
    plan = mgmt.call("POST", reset, {"to": "shift", "value": 3, "execute": True}).json()
    assert isinstance(plan, list), plan
    assert plan[0]["new_offset"] == 7
    assert consumer.committed(tp) == 7  # the client sees it
    assert mgmt.call("GET", f"/api/consumer-groups/{group}").json()["lag"] == 3
    assert mgmt.call("POST", reset, {"to": "sideways"}).status == 400
    watcher = mgmt.as_user(("watcher", "pw"))
    assert watcher.call("GET", f"/api/consumer-groups/{group}").status == 200
    assert watcher.call("POST", reset, {"to": "earliest"}).status == 403
    consumer.close()

    # a group with members may not be reset
    member = ready_to_join(KafkaConsumer(topic, bootstrap_servers=server.addresses["kafka"], group_id=group,
                                         enable_auto_commit=False, consumer_timeout_ms=200))
    try:
        # a join may wait out a rebalance (a member whose leave was lost: its session
        # timeout, 10 s in kafka-python), so the bound is well past that, not a speed
        deadline = time.monotonic() + JOIN_WAIT
        while not member.assignment():
            member.poll(timeout_ms=100)
            assert time.monotonic() < deadline
        g = mgmt.call("GET", f"/api/consumer-groups/{group}").json()
        assert g["state"] == "Stable" and [a["partition"] for a in g["members"][0]["assignment"]] == [0]
        refused = mgmt.call("POST", reset, {"to": "earliest", "execute": True})
        assert refused.status == 409 and refused.json()["error"] == "group_active", refused
    finally:
        member.close()  # also when an assertion failed: its thread would reconnect to a stopped server
    assert mgmt.call("GET", "/api/consumer-groups/no-such").status == 404


def test_pop_group_is_a_queue(server: LogbusServer, mgmt: Mgmt) -> None:
    mgmt.ok("POST", "/api/topics", {"name": "ov-jobs", "partitions": 1})
    assert mgmt.call("POST", "/api/pop/ov-workers/ov-jobs/receive", {"max": 1, "invisible_ms": 60_000}).status == 200
    reply = mgmt.ok("POST", "/api/topics/ov-jobs/messages", {"messages": [{"value": f"j{i}"} for i in range(4)]})
    assert len(reply.json()["offsets"]) == 4
    got = mgmt.call("POST", "/api/pop/ov-workers/ov-jobs/receive", {"max": 1, "invisible_ms": 60_000}).json()
    assert len(got["messages"]) == 1
    info = queue(mgmt, "~", "ov-workers/ov-jobs")
    assert (info["vhost"], info["kind"], info["protocol"]) == ("", "pop", "http")
    assert (info["messages_ready"], info["messages_unacknowledged"]) == (3, 1)
    assert "ov-workers/ov-jobs" in [x["name"] for x in mgmt.call("GET", "/api/queues/~").json()]


def test_overview_and_metrics(server: LogbusServer, mgmt: Mgmt) -> None:
    before = mgmt.call("GET", "/api/overview").json()["message_totals"]
    conn = amqp(server)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("ov-metrics", durable=True)
    for _ in range(3):
        ch.basic_publish("", "ov-metrics", b"x")
    device = Paho(server)
    for i in range(2):
        device.publish("ov/metrics", b"m", qos=1).wait_for_publish(WAIT)
    device.publish("ov/metrics", b"m", qos=0).wait_for_publish(WAIT)
    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks=1)
    for _ in range(4):
        producer.send("ov-metrics-k", b"r", partition=0)
    producer.flush()
    producer.close()

    mgmt.ok("POST", "/api/topics/ov-metrics-k/messages", {"messages": [{"value": "h"}, {"value": "i"}]})

    def moved(o: dict[str, Any]) -> dict[str, tuple[int, int]]:
        now = o["message_totals"]
        return {p: (now[p]["received"] - before[p]["received"], now[p]["confirmed"] - before[p]["confirmed"])
                for p in ("amqp", "mqtt", "kafka", "http")}

    want = {"amqp": (3, 3), "mqtt": (3, 2), "kafka": (4, 4), "http": (2, 2)}
    ov = eventually(lambda: mgmt.call("GET", "/api/overview").json(), lambda o: moved(o) == want)
    assert ov["connections_by_protocol"]["amqp"] >= 1 and ov["connections_by_protocol"]["mqtt"] >= 1
    queues = mgmt.call("GET", "/api/queues").json()
    assert ov["queue_totals"]["messages_ready"] == sum(x["messages_ready"] for x in queues)
    assert ov["mem_used"] > 0 and ov["fd_used"] > 0 and ov["disk_free"] > 0
    assert ov["product_name"] == "logbus" and ov["uptime_ms"] > 0

    scrape = mgmt.call("GET", "/metrics").body.decode()
    ready = {x["kind"]: 0 for x in queues}
    for x in queues:
        ready[x["kind"]] += x["messages_ready"]
    assert metric(scrape, "logbus_queue_messages_ready", kind="classic") == ready["classic"]
    assert metric(scrape, "logbus_connections", protocol="mqtt") == float(ov["connections_by_protocol"]["mqtt"])
    assert metric(scrape, "logbus_global_messages_received_total", protocol="kafka") == float(
        ov["message_totals"]["kafka"]["received"])
    assert metric(scrape, "logbus_global_messages_confirmed_total", protocol="amqp") == float(
        ov["message_totals"]["amqp"]["confirmed"])
    assert (metric(scrape, "process_resident_memory_bytes") or 0) > 0
    assert 'queue="ov-metrics"' not in scrape  # per-object series are not in the default set
    per_object = mgmt.call("GET", "/metrics/per-object").body.decode()
    assert metric(per_object, "logbus_queue_messages_ready", kind="classic", queue="ov-metrics", vhost="/") == 3
    device.close()
    conn.close()


def test_search_a_topic_by_key_message_id_and_time(server: LogbusServer, mgmt: Mgmt) -> None:
    topic = "ov-search"
    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"])
    for i in range(30):
        producer.send(topic, key=b"user-%d" % (i % 5), value=b"event %d" % i, partition=0, timestamp_ms=10_000 + i)
    producer.flush()
    producer.close()
    reply = mgmt.call("GET", f"/api/topics/{topic}/search?key=user-3")
    assert reply.status == 200, reply
    found = reply.json()["messages"]
    assert reply.json()["truncated"] is False
    assert [(m["offset"], m["key"], m["payload"]) for m in found] == [
        (i, "user-3", f"event {i}") for i in range(3, 30, 5)]
    assert [m["timestamp_ms"] for m in found] == [10_000 + i for i in range(3, 30, 5)]
    assert mgmt.call("GET", f"/api/topics/{topic}/search?key=nobody").json() == {"messages": [], "truncated": False}
    window = mgmt.call("GET", f"/api/topics/{topic}/search?from=10010&to=10012").json()
    assert [m["offset"] for m in window["messages"]] == [10, 11, 12] and window["truncated"] is False
    window = mgmt.call("GET", f"/api/topics/{topic}/search?from=10010&to=10012&limit=2").json()
    assert [m["offset"] for m in window["messages"]] == [10, 11] and window["truncated"] is True
    limited = mgmt.call("GET", f"/api/topics/{topic}/search?key=user-3&limit=2").json()
    assert [m["offset"] for m in limited["messages"]] == [3, 8] and limited["truncated"] is True
    exact = mgmt.call("GET", f"/api/topics/{topic}/search?key=user-3&limit=6").json()
    assert len(exact["messages"]) == 6 and exact["truncated"] is False  # six match: none left out

    # the CLI and the console say that more match than they show
    shown = cli(server, "topic", "search", topic, "--key", "user-3", "--limit", "2").stdout
    assert [r["OFFSET"] for r in cli_rows(shown.split("\n\n")[0])] == ["3", "8"]
    assert shown.rstrip().endswith("first 2 shown, more match")
    assert "more match" not in cli(server, "topic", "search", topic, "--key", "user-3", "--limit", "6").stdout
    as_json = json.loads(cli(server, "topic", "search", topic, "--key", "user-3", "--limit", "2", "--json").stdout)
    assert as_json["truncated"] is True
    page = mgmt.call("GET", f"/topics/{topic}?key=user-3&limit=2").body.decode()
    assert [r["Offset"] for r in html_rows(page, "Messages found: first 2 shown, more match")] == ["3", "8"]
    page = mgmt.call("GET", f"/topics/{topic}?key=user-3&limit=6").body.decode()
    assert len(html_rows(page, "Messages found: 6")) == 6

    conn = amqp(server)  # an AMQP message id, found in the exchange's topic
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("ov-orders-x", "direct", durable=True)
    for i in range(4):
        ch.basic_publish("ov-orders-x", "", b"o%d" % i, pika.BasicProperties(message_id=f"order-{i}"))
    conn.close()
    by_id = mgmt.call("GET", "/api/topics/ov-orders-x/search?message_id=order-2").json()["messages"]
    assert [(m["message_id"], m["payload"]) for m in by_id] == [("order-2", "o2")]

    assert mgmt.call("GET", f"/api/topics/{topic}/search").status == 400  # no criterion
    assert mgmt.call("GET", f"/api/topics/{topic}/search?colour=red").status == 400
    assert mgmt.call("GET", f"/api/topics/{topic}/search?from=soon").status == 400
    assert mgmt.call("GET", "/api/topics/no-such-topic/search?key=a").status == 404
    assert mgmt.as_user(("manager", "pw")).call("GET", f"/api/topics/{topic}/search?key=a").status == 403


def test_amq_topic_is_searched_by_a_key_in_either_protocol_form(server: LogbusServer, mgmt: Mgmt) -> None:
    room = unique("kitchen")  # a level with neither "." nor "/"
    device = Paho(server)
    device.publish(f"sensors/{room}/temp", b"21.5", qos=1).wait_for_publish(WAIT)  # record key sensors/<room>/temp
    device.close()
    conn = amqp(server)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("amq.topic", f"sensors.{room}.temp", b"22.0")  # record key sensors.<room>.temp
    conn.close()
    for key in (f"sensors.{room}.temp", f"sensors/{room}/temp"):
        found = mgmt.call("GET", f"/api/topics/amq.topic/search?key={quote(key, safe='')}").json()
        assert sorted(m["payload"] for m in found["messages"]) == ["21.5", "22.0"], (key, found)
        assert {m["key"] for m in found["messages"]} == {f"sensors/{room}/temp", f"sensors.{room}.temp"}
    assert mgmt.call("GET", f"/api/topics/amq.topic/search?key=sensors.{room}.hum").json()["messages"] == []
    shown = cli(server, "topic", "search", "amq.topic", "--key", f"sensors.{room}.temp").stdout
    assert sorted(r["VALUE"] for r in cli_rows(shown)) == ["21.5", "22.0"]
    page = mgmt.call("GET", f"/topics/amq.topic?key=sensors.{room}.temp").body.decode()
    assert sorted(r["Payload"] for r in html_rows(page, "Messages found: 2")) == ["21.5", "22.0"]


def test_connections_show_their_name_product_version_bytes_and_connected_at(server: LogbusServer,
                                                                            mgmt: Mgmt) -> None:
    before_ms = int(time.time() * 1000)
    conn = amqp(server, client_properties={"connection_name": "ov-billing-worker"})
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("ov-named", durable=True)
    body = b"x" * 20_000
    ch.basic_publish("", "ov-named", body)
    ch.basic_publish("", "ov-named", body)
    method, _, got = ch.basic_get("ov-named", auto_ack=True)
    assert got == body
    after_ms = int(time.time() * 1000)

    def named(conns: list[dict[str, Any]]) -> dict[str, Any] | None:
        return next((c for c in conns if c["client_id"] == "ov-billing-worker"), None)

    c = named(mgmt.call("GET", "/api/connections?protocol=amqp").json())
    assert c is not None, "the AMQP connection_name is shown"
    assert (c["client_product"], c["client_version"]) == ("Pika Python Client Library", pika.__version__)
    assert c["bytes_in"] >= 2 * len(body) and len(body) <= c["bytes_out"] < 2 * len(body)
    connected = dt.datetime.fromisoformat(c["connected_at"].replace("Z", "+00:00"))
    assert connected.tzinfo is not None and connected.utcoffset() == dt.timedelta(0)
    assert before_ms <= round(connected.timestamp() * 1000) <= after_ms
    assert round(connected.timestamp() * 1000) == c["opened_ms"]

    # a Kafka client's client.id, and its name and version from ApiVersions (v3 and later)
    consumer = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], client_id="ov-reader")
    assert consumer.topics() is not None
    k = eventually(lambda: [x for x in mgmt.call("GET", "/api/connections?protocol=kafka").json()
                            if x["client_id"] == "ov-reader"], bool)[0]
    assert (k["client_product"], k["client_version"]) == ("kafka-python", kafka.__version__)
    assert k["bytes_in"] > 0 and k["bytes_out"] > 0

    rows = {r["ID"]: r for r in cli_rows(cli(server, "connection", "list", "--protocol", "amqp").stdout)}
    row = rows[str(c["id"])]
    assert (row["CLIENT"], row["PRODUCT"], row["VERSION"]) == ("ov-billing-worker", "Pika Python Client Library",
                                                               pika.__version__)
    assert row["CONNECTED AT"] == c["connected_at"]
    assert int(row["BYTES IN"]) >= 2 * len(body) and int(row["BYTES OUT"]) >= len(body)
    as_json = json.loads(cli(server, "connection", "list", "--protocol", "amqp", "--json").stdout)
    assert named(as_json) is not None

    page = mgmt.call("GET", "/connections?protocol=amqp").body.decode()
    shown = {r["Id"]: r for r in html_rows(page, "Open connections")}[str(c["id"])]
    assert (shown["Client id"], shown["Client software"]) == ("ov-billing-worker", f"Pika Python Client Library {pika.__version__}")
    assert shown["Connected at (UTC)"] == c["connected_at"]
    assert shown["Bytes in"] and shown["Bytes out"]
    consumer.close()
    conn.close()


def test_counters_are_one_definition_on_every_screen_after_the_clients_close(logbus_server: Any) -> None:
    """MQTT publishes reach an AMQP queue, an AMQP client consumes them, a Kafka client
    produces and another fetches, HTTP publishes to a pop group and receives; once every
    client has gone, the CLI overview,
    /api/overview, the console's overview and /metrics all show what was done, each
    counter in the protocol the table in docs/operations.md names."""
    server = logbus_server()
    mgmt = Mgmt(server)
    conn = amqp(server)
    ch = conn.channel()
    ch.queue_declare("cnt-readings", durable=True)
    ch.queue_bind("cnt-readings", "amq.topic", "cnt.#")
    device = Paho(server)
    for i in range(3):
        device.publish(f"cnt/{i}", b"r", qos=1).wait_for_publish(WAIT)
    device.close()
    ch.basic_qos(prefetch_count=10)
    tags: list[int] = []
    ch.basic_consume("cnt-readings", lambda c, m, p, b: tags.append(m.delivery_tag))
    deadline = time.monotonic() + WAIT
    while len(tags) < 3:
        conn.process_data_events(time_limit=0.1)
        assert time.monotonic() < deadline, tags
    for tag in tags:
        ch.basic_ack(tag)
    eventually(lambda: queue(mgmt, "/", "cnt-readings"), lambda i: i["message_stats"]["ack"] == 3)
    conn.close()

    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks=1)
    for i in range(4):
        producer.send("cnt-k", b"k%d" % i, partition=0)
    producer.flush()
    producer.close()
    reader = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], auto_offset_reset="earliest",
                           enable_auto_commit=False)
    reader.assign([TopicPartition("cnt-k", 0)])
    records: list[Any] = []
    deadline = time.monotonic() + WAIT
    while len(records) < 4:
        for batch in reader.poll(timeout_ms=200).values():
            records += batch
        assert time.monotonic() < deadline, records
    assert [r.value for r in records] == [b"k0", b"k1", b"k2", b"k3"]
    k = next(x for x in mgmt.call("GET", "/api/connections?protocol=kafka").json() if x["sent"])
    assert k["sent"] == 4  # a busy Kafka consumer's messages out: the records it fetched
    reader.close()

    # HTTP: two messages published to a topic a pop group reads, received and acked over HTTP
    mgmt.ok("POST", "/api/topics", {"name": "cnt-jobs", "partitions": 1})
    assert mgmt.call("POST", "/api/pop/cnt-workers/cnt-jobs/receive", {"max": 1}).json()["messages"] == []
    mgmt.ok("POST", "/api/topics/cnt-jobs/messages", {"messages": [{"value": "j1"}, {"value": "j2"}]})
    popped: list[dict[str, Any]] = []
    deadline = time.monotonic() + WAIT
    while len(popped) < 2:
        popped += mgmt.call("POST", "/api/pop/cnt-workers/cnt-jobs/receive",
                            {"max": 2, "invisible_ms": 60_000}).json()["messages"]
        assert time.monotonic() < deadline, popped
    mgmt.ok("POST", "/api/pop/cnt-workers/cnt-jobs/ack", {"handles": [m["handle"] for m in popped]})

    zero = {"received": 0, "confirmed": 0, "sent": 0, "routed": 0, "delivered": 0, "redelivered": 0, "acked": 0,
            "dead_lettered": 0}
    want = {"amqp": {**zero, "sent": 3, "delivered": 3, "acked": 3},
            "mqtt": {**zero, "received": 3, "confirmed": 3, "routed": 3},
            "kafka": {**zero, "received": 4, "confirmed": 4, "sent": 4},
            "http": {**zero, "received": 2, "confirmed": 2, "sent": 2, "routed": 2, "delivered": 2, "acked": 2}}
    ov = eventually(lambda: mgmt.call("GET", "/api/overview").json(),
                    lambda o: all(o["connections_by_protocol"][p] == 0 for p in ("amqp", "mqtt", "kafka")))
    assert ov["message_totals"] == want

    shown = cli(server, "overview").stdout.split("\n\n")[1]
    assert {r["PROTOCOL"]: {k.lower().replace("-", "_"): int(v) for k, v in r.items() if k != "PROTOCOL"}
            for r in cli_rows(shown)} == want

    page = mgmt.call("GET", "/").body.decode()
    console = {r["Protocol"].lower(): {k.lower().replace("-", "_"): int(v) for k, v in r.items() if k != "Protocol"}
               for r in html_rows(page, "Messages since start")}
    assert console == want
    assert "Messages since start" in html_tables(page)

    scrape = mgmt.call("GET", "/metrics").body.decode()
    names = {"acked": "acknowledged"}
    for protocol, counts in want.items():
        for name, n in counts.items():
            assert metric(scrape, f"logbus_global_messages_{names.get(name, name)}_total",
                          protocol=protocol) == n, (protocol, name)
