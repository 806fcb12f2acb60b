"""Exchanges, queues and bindings declared, bound, published to and deleted over the HTTP
API (RabbitMQ's management API: PUT/DELETE /api/exchanges, /api/queues, POST/DELETE
/api/bindings, POST .../publish, GET /api/consumers) against a real `logbus serve`, with
a real AMQP client (pika) seeing what was made and getting what was published; the
permissions asked are those of the AMQP methods; a refused change leaves nothing."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pika  # type: ignore[import-untyped]
import pytest

from tests.integration.mgmt import Mgmt, q
from tests.serverproc import LogbusServer, module_server

WAIT = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "topology-api")


@pytest.fixture(scope="module")
def mgmt(server: LogbusServer) -> Mgmt:
    m = Mgmt(server)
    m.add_user("reader", "pw", "management")
    m.grant("/", "reader", configure="^$", write="^$", read=".*")  # may read, may configure nothing
    return m


def amqp(server: LogbusServer, connection_name: str = "") -> Any:
    host, port = server.host_port("amqp")
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=host, port=port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1,
        client_properties={"connection_name": connection_name} if connection_name else None))


def get_body(channel: Any, queue: str) -> tuple[bytes, Any]:
    method, props, body = channel.basic_get(queue, auto_ack=True)
    assert method is not None, f"nothing in {queue}"
    return body, props


def test_declare_bind_publish_and_delete_as_an_amqp_client_sees_them(mgmt: Mgmt, server: LogbusServer) -> None:
    assert mgmt.call("PUT", "/api/exchanges/%2F/tp-orders", {"type": "topic", "durable": True}).status == 201
    assert mgmt.call("PUT", "/api/exchanges/%2F/tp-orders", {"type": "topic", "durable": True}).status == 204
    assert mgmt.call("PUT", "/api/queues/%2F/tp-billing", {"durable": True,
                                                            "arguments": {"x-max-length": 100}}).status == 201
    made = mgmt.call("POST", "/api/bindings/%2F/e/tp-orders/q/tp-billing", {"routing_key": "order.*"})
    assert made.status == 201, made
    key = made.json()["properties_key"]
    assert key == "order.*" and made.headers["Location"] == "/api/bindings/%2F/e/tp-orders/q/tp-billing/order.%2A"
    assert mgmt.ok("GET", "/api/exchanges/%2F/tp-orders").json()["type"] == "topic"
    [row] = mgmt.ok("GET", "/api/bindings/%2F/e/tp-orders/q/tp-billing").json()
    assert (row["routing_key"], row["properties_key"]) == ("order.*", "order.*")

    conn = amqp(server)
    try:
        ch = conn.channel()
        ch.queue_declare("tp-billing", passive=True)  # there, for an AMQP client
        ch.exchange_declare("tp-orders", "topic", passive=True)
        published = mgmt.ok("POST", "/api/exchanges/%2F/tp-orders/publish", {
            "routing_key": "order.created", "payload": "first", "payload_encoding": "string",
            "properties": {"content_type": "text/plain", "headers": {"source": "console"}, "delivery_mode": 2,
                           "message_id": "m-1"}})
        assert published.json() == {"routed": True}
        body, props = get_body(ch, "tp-billing")
        assert body == b"first"
        assert (props.content_type, props.headers, props.delivery_mode, props.message_id) == (
            "text/plain", {"source": "console"}, 2, "m-1")
        raw = bytes(range(256))
        unrouted = mgmt.ok("POST", "/api/exchanges/%2F/tp-orders/publish", {
            "routing_key": "refund.created", "payload": base64.b64encode(raw).decode(), "payload_encoding": "base64"})
        assert unrouted.json() == {"routed": False}
        mgmt.ok("POST", "/api/exchanges/%2F/tp-orders/publish", {
            "routing_key": "order.paid", "payload": base64.b64encode(raw).decode(), "payload_encoding": "base64"})
        assert get_body(ch, "tp-billing")[0] == raw
        stats = mgmt.ok("GET", "/api/exchanges/%2F/tp-orders").json()["message_stats"]
        assert stats["publish_in"] == 3 and stats["publish_in_details"]["rate"] >= 0  # routed or not: appended

        ch.basic_qos(prefetch_count=7)
        ch.basic_consume("tp-billing", lambda *a: None, consumer_tag="tp-worker")
        [consumer] = [c for c in mgmt.ok("GET", "/api/consumers/%2F").json() if c["consumer_tag"] == "tp-worker"]
        assert consumer["queue"] == {"name": "tp-billing", "vhost": "/"}
        assert (consumer["prefetch_count"], consumer["ack_required"]) == (7, True)
        assert consumer["channel_details"]["number"] == ch.channel_number

        assert mgmt.call("DELETE", f"/api/bindings/%2F/e/tp-orders/q/tp-billing/{q(key)}").status == 204
        assert mgmt.ok("GET", "/api/bindings/%2F/e/tp-orders/q/tp-billing").json() == []
        assert mgmt.call("DELETE", "/api/queues/%2F/tp-billing").status == 204
        conn.process_data_events(time_limit=0)  # the consumer is cancelled by the broker (cancel notify)
        assert mgmt.call("DELETE", "/api/exchanges/%2F/tp-orders").status == 204
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            conn.channel().queue_declare("tp-billing", passive=True)
        assert refused.value.reply_code == 404
    finally:
        if conn.is_open:
            conn.close()
    assert mgmt.call("GET", "/api/exchanges/%2F/tp-orders").status == 404


def test_binding_arguments_and_a_filter_are_named_by_their_key_and_removed_by_it(mgmt: Mgmt) -> None:
    mgmt.ok("PUT", "/api/exchanges/%2F/tp-headers", {"type": "headers"})
    mgmt.ok("PUT", "/api/queues/%2F/tp-hq")
    args = {"x-match": "all", "kind": "invoice"}
    made = mgmt.call("POST", "/api/bindings/%2F/e/tp-headers/q/tp-hq", {"routing_key": "", "arguments": args})
    assert made.status == 201
    key = made.json()["properties_key"]
    assert key.startswith("~")
    filtered = mgmt.call("POST", "/api/bindings/%2F/e/tp-headers/q/tp-hq",
                         {"routing_key": "", "arguments": {"x-filter-sql": "amount > 10"}})
    assert filtered.status == 201
    rows = mgmt.ok("GET", "/api/bindings/%2F/e/tp-headers/q/tp-hq").json()
    assert sorted(r["properties_key"] for r in rows) == sorted([key, filtered.json()["properties_key"]])
    assert mgmt.call("DELETE", f"/api/bindings/%2F/e/tp-headers/q/tp-hq/{q(filtered.json()['properties_key'])}"
                     ).status == 204
    assert mgmt.call("DELETE", f"/api/bindings/%2F/e/tp-headers/q/tp-hq/{q(key)}").status == 204
    assert mgmt.ok("GET", "/api/bindings/%2F/e/tp-headers/q/tp-hq").json() == []
    assert mgmt.call("DELETE", f"/api/bindings/%2F/e/tp-headers/q/tp-hq/{q(key)}").status == 404


def test_changes_ask_the_amqp_permissions_and_a_refused_one_leaves_nothing(mgmt: Mgmt) -> None:
    reader = mgmt.as_user(("reader", "pw"))
    mgmt.ok("PUT", "/api/queues/%2F/tp-guarded")
    assert reader.call("PUT", "/api/exchanges/%2F/tp-nope", {"type": "direct"}).status == 403
    assert mgmt.call("GET", "/api/exchanges/%2F/tp-nope").status == 404
    assert reader.call("PUT", "/api/queues/%2F/tp-nope").status == 403
    assert reader.call("DELETE", "/api/queues/%2F/tp-guarded").status == 403
    assert reader.call("POST", "/api/bindings/%2F/e/amq.direct/q/tp-guarded", {"routing_key": "k"}).status == 403
    assert mgmt.ok("GET", "/api/bindings/%2F/e/amq.direct/q/tp-guarded").json() == []
    assert reader.call("POST", "/api/exchanges/%2F/amq.direct/publish",
                       {"routing_key": "tp-guarded", "payload": "x"}).status == 403
    assert mgmt.ok("GET", "/api/queues/%2F/tp-guarded").json()["messages"] == 0
    # reserved names, unknown names, bad bodies: the protocol's answers, nothing made
    assert mgmt.call("PUT", "/api/exchanges/%2F/amq.mine", {"type": "direct"}).status == 403
    bad_type = mgmt.call("PUT", "/api/exchanges/%2F/tp-bad", {"type": "no-such-type"})
    assert bad_type.status == 400 and "no-such-type" in bad_type.json()["message"], bad_type
    assert mgmt.call("GET", "/api/exchanges/%2F/tp-bad").status == 404
    inequivalent = mgmt.call("PUT", "/api/queues/%2F/tp-guarded", {"arguments": {"x-max-length": 5}})
    assert (inequivalent.status, inequivalent.json()["error"]) == (400, "precondition_failed")  # as RabbitMQ's
    assert mgmt.call("PUT", "/api/exchanges/%2F/tp-x", {"flavour": "direct"}).status == 400
    assert mgmt.call("POST", "/api/exchanges/%2F/no-such/publish", {"routing_key": "", "payload": "x"}).status == 404
    assert mgmt.call("POST", "/api/exchanges/%2F/amq.direct/publish",
                     {"routing_key": "", "payload": "x", "properties": {"priority": "high"}}).status == 400
    assert mgmt.call("POST", "/api/exchanges/%2F/amq.direct/publish",
                     {"routing_key": "", "payload": "x", "properties": {"user_id": "someone"}}).status == 400
    assert mgmt.call("DELETE", "/api/queues/%2F/no-such").status == 404
    assert mgmt.call("DELETE", "/api/exchanges/%2F/no-such").status == 404
    assert mgmt.call("PUT", f"/api/queues/{q('no-vhost')}/x").status == 404


def test_a_queues_counters_come_with_their_rates_differenced_between_reads(mgmt: Mgmt, server: LogbusServer) -> None:
    mgmt.ok("PUT", "/api/queues/%2F/tp-rated")
    first = mgmt.ok("GET", "/api/queues/%2F/tp-rated").json()["message_stats"]
    assert first["publish_details"] == {"rate": 0.0}  # one read: no span yet
    read_at = time.monotonic()
    for i in range(50):
        mgmt.ok("POST", "/api/exchanges/%2F/amq.default/publish", {"routing_key": "tp-rated", "payload": str(i)})
    while time.monotonic() - read_at < 1.2:  # a second apart at least: the next read takes a snapshot
        time.sleep(0.05)
    stats = mgmt.ok("GET", "/api/queues/%2F/tp-rated").json()["message_stats"]
    span = time.monotonic() - read_at
    assert stats["publish"] == 50
    assert 50 / (span + 1.0) <= stats["publish_details"]["rate"] <= 50 / 1.2, (stats, span)
    listed = [q for q in mgmt.ok("GET", "/api/queues/%2F").json() if q["name"] == "tp-rated"]
    assert listed[0]["message_stats"]["ack_details"] == {"rate": 0.0}
    mgmt.ok("DELETE", "/api/queues/%2F/tp-rated")


def test_channels_show_prefetch_unacked_and_confirm_mode_as_the_client_set_them(mgmt: Mgmt,
                                                                               server: LogbusServer) -> None:
    mgmt.ok("PUT", "/api/queues/%2F/tp-channels")
    conn = amqp(server, connection_name="tp-chan")
    try:
        publisher = conn.channel()
        publisher.confirm_delivery()
        for i in range(3):
            publisher.basic_publish("", "tp-channels", str(i).encode())
        worker = conn.channel()
        worker.basic_qos(prefetch_count=9)
        got: list[bytes] = []
        worker.basic_consume("tp-channels", lambda ch, m, p, body: got.append(body))  # never acks
        deadline = time.monotonic() + WAIT
        while len(got) < 3:
            assert time.monotonic() < deadline, got
            conn.process_data_events(time_limit=0.1)
        rows = {c["number"]: c for c in mgmt.ok("GET", "/api/channels").json() if c["connection_name"] == "tp-chan"}
        pub, work = rows[publisher.channel_number], rows[worker.channel_number]
        assert (pub["confirm"], pub["consumer_count"], pub["message_stats"]["publish"]) == (True, 0, 3)
        assert (work["confirm"], work["consumer_count"], work["prefetch_count"]) == (False, 1, 9)
        assert (work["messages_unacknowledged"], work["message_stats"]["deliver_get"]) == (3, 3)
        page = mgmt.ok("GET", "/channels").body.decode()
        assert "Open channels" in page and ">9<" in page
        assert mgmt.as_user(("reader", "pw")).ok("GET", "/api/channels").json() == []  # not its connections
    finally:
        conn.close()
    mgmt.ok("DELETE", "/api/queues/%2F/tp-channels")


def test_a_connections_messages_come_with_their_rates(mgmt: Mgmt, server: LogbusServer) -> None:
    mgmt.ok("PUT", "/api/queues/%2F/tp-conn-rated")
    conn = amqp(server, connection_name="tp-rated-conn")
    try:
        ch = conn.channel()
        ch.confirm_delivery()

        def mine() -> dict[str, Any]:
            [c] = [c for c in mgmt.ok("GET", "/api/connections").json() if c["client_id"] == "tp-rated-conn"]
            return c

        assert mine()["received_details"] == {"rate": 0.0}
        read_at = time.monotonic()
        for i in range(40):
            ch.basic_publish("", "tp-conn-rated", str(i).encode())
        while time.monotonic() - read_at < 1.2:
            time.sleep(0.05)
        c = mine()
        span = time.monotonic() - read_at
        assert c["received"] == 40 and 40 / (span + 1.0) <= c["received_details"]["rate"] <= 40 / 1.2, (c, span)
        assert c["bytes_in_details"]["rate"] > 0
    finally:
        conn.close()
    mgmt.ok("DELETE", "/api/queues/%2F/tp-conn-rated")
