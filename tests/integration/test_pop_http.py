"""Pop consumption over HTTP against a real `logbus serve` (docs/consumption.md): members
of one group share a topic's messages, a second group gets every message, an invisible
time that lapses brings the message back with its delivery count, the last lapse puts it
in ``%DLQ%<group>`` where a Kafka consumer reads it (as ``logbus-dlq-<group>``), bad receipts and arguments
are clear errors that settle nothing, and delayed messages reach pop groups when due.
The server runs with a short pop backoff (``--pop-retry-backoff 50ms``) so sixteen
lapses take seconds."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Iterator

import pytest
from kafka import KafkaConsumer, TopicPartition

from logbus.core.envelope_pb2 import Envelope
from tests.integration.mgmt import Mgmt, Reply
from tests.serverproc import LogbusServer, module_server

BACKOFF_MS = 50


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "pop-http", args=["--pop-retry-backoff", f"{BACKOFF_MS}ms",
                                                                 "--default-flush", "none"])


def call(server: LogbusServer, method: str, path: str, body: Any = None) -> Reply:
    return Mgmt(server).call(method, path, body)


def create(server: LogbusServer, topic: str) -> None:
    assert call(server, "POST", "/api/topics", {"name": topic}).status == 201


def publish(server: LogbusServer, topic: str, values: list[str], **extra: Any) -> list[int]:
    reply = call(server, "POST", f"/api/topics/{topic}/messages",
                 {"messages": [{"value": v, **extra} for v in values]})
    assert reply.status == 200, reply
    offsets: list[int] = reply.json()["offsets"]
    return offsets


def receive(server: LogbusServer, group: str, topic: str, n: int = 32, invisible_ms: int = 30_000,
            member: str = "m") -> list[dict[str, Any]]:
    reply = call(server, "POST", f"/api/pop/{group}/{topic}/receive",
                 {"max": n, "invisible_ms": invisible_ms, "member": member})
    assert reply.status == 200, reply
    messages: list[dict[str, Any]] = reply.json()["messages"]
    return messages


def ack(server: LogbusServer, group: str, topic: str, handles: list[str]) -> dict[str, Any]:
    reply = call(server, "POST", f"/api/pop/{group}/{topic}/ack", {"handles": handles})
    assert reply.status == 200, reply
    result: dict[str, Any] = reply.json()
    return result


def wait_for(server: LogbusServer, group: str, topic: str, n: int, timeout: float = 10.0,
             invisible_ms: int = 30_000) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += receive(server, group, topic, n - len(got), invisible_ms)
        if len(got) < n:
            time.sleep(0.02)
    return got


def test_members_share_a_group_and_a_second_group_gets_everything(server: LogbusServer) -> None:
    create(server, "orders")
    assert receive(server, "billing", "orders") == []  # the groups start here
    assert receive(server, "audit", "orders") == []
    publish(server, "orders", [f"o{i}" for i in range(10)])
    first = receive(server, "billing", "orders", 4, member="a")
    second = receive(server, "billing", "orders", 10, member="b")
    assert [m["value"] for m in first] == ["o0", "o1", "o2", "o3"]
    assert [m["value"] for m in second] == [f"o{i}" for i in range(4, 10)]  # each message to one member
    assert receive(server, "billing", "orders", 10, member="c") == []  # all invisible now
    audit = receive(server, "audit", "orders", 32)
    assert sorted(m["value"] for m in audit) == sorted(f"o{i}" for i in range(10))  # every message again
    assert all(m["deliveries"] == 1 and m["topic"] == "orders" for m in first + second + audit)
    assert ack(server, "billing", "orders", [m["handle"] for m in first + second]) == {"acked": 10, "failed": []}
    again = ack(server, "billing", "orders", [first[0]["handle"]])  # twice: stale, settles nothing
    assert again["acked"] == 0 and again["failed"][0]["error"] == "stale_receipt"
    groups = {(g["pop_group"], g["topic"]): g for g in call(server, "GET", "/api/pop").json()}
    assert groups[("billing", "orders")]["ready"] == 0 and groups[("billing", "orders")]["invisible"] == 0
    assert groups[("audit", "orders")]["invisible"] == 10


def test_a_lapsed_invisible_time_brings_the_message_back_counted(server: LogbusServer) -> None:
    create(server, "jobs")
    receive(server, "workers", "jobs")
    publish(server, "jobs", ["j"])
    [first] = receive(server, "workers", "jobs", 1, invisible_ms=100)
    assert first["deliveries"] == 1
    time.sleep(0.3)  # lapsed (100 ms), then the 50 ms backoff
    [back] = wait_for(server, "workers", "jobs", 1)
    assert (back["value"], back["deliveries"], back["offset"]) == ("j", 2, first["offset"])
    stale = call(server, "POST", "/api/pop/workers/jobs/ack", {"handle": first["handle"]})
    assert stale.status == 409 and stale.json()["error"] == "stale_receipt"
    assert call(server, "POST", "/api/pop/workers/jobs/ack", {"handle": back["handle"]}).status == 204


def test_change_invisible_time_extends_and_shortens(server: LogbusServer) -> None:
    create(server, "long")
    receive(server, "g", "long")
    publish(server, "long", ["x"])
    [m] = receive(server, "g", "long", 1, invisible_ms=200)
    r = call(server, "POST", "/api/pop/g/long/invisible", {"handle": m["handle"], "invisible_ms": 60_000})
    assert r.status == 204
    time.sleep(0.4)
    assert receive(server, "g", "long") == []  # extended: still invisible
    r = call(server, "POST", "/api/pop/g/long/invisible", {"handle": m["handle"], "invisible_ms": 1})
    assert r.status == 204
    [back] = wait_for(server, "g", "long", 1)
    assert back["deliveries"] == 2


def test_sixteen_lapses_land_it_in_the_dlq_topic_for_kafka(server: LogbusServer) -> None:
    create(server, "flaky")
    receive(server, "proc", "flaky")
    [offset] = publish(server, "flaky", ["poison"])
    for delivery in range(1, 17):
        [m] = wait_for(server, "proc", "flaky", 1, invisible_ms=1)
        assert m["deliveries"] == delivery
    time.sleep(0.2)
    assert receive(server, "proc", "flaky") == []  # dead-lettered after the 16th
    # Kafka clients refuse '%' in topic names before sending (kafka-python's
    # ensure_valid_topic_name): the Kafka gateway shows %DLQ%proc as logbus-dlq-proc
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False,
                      consumer_timeout_ms=3000)
    try:
        assert "logbus-dlq-proc" in c.topics()
        tp = TopicPartition("logbus-dlq-proc", 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        records = list(c)
    finally:
        c.close()
    assert [(r.topic, r.value) for r in records] == [("logbus-dlq-proc", b"poison")]
    envelope = dict(records[0].headers)["logbus.envelope"]
    dl = Envelope.FromString(envelope).dead_letter
    assert (dl.topic, dl.partition, dl.offset, dl.reason, dl.delivery_count, dl.queue) == (
        "flaky", 0, offset, "delivery_limit", 16, "proc")


def test_bad_input_is_a_clear_error_and_settles_nothing(server: LogbusServer) -> None:
    create(server, "safe")
    receive(server, "g", "safe")
    publish(server, "safe", ["keep"])
    [m] = receive(server, "g", "safe", 1, invisible_ms=60_000)

    def error(path: str, body: Any) -> tuple[int, str]:
        reply = call(server, "POST", path, body)
        return reply.status, reply.json()["error"]

    assert error("/api/pop/g/safe/ack", {"handle": "not-a-handle"}) == (400, "invalid_request")
    seq, delivery, partition, offset = m["handle"].split(".")
    assert error("/api/pop/g/safe/ack", {"handle": f"{seq}.{int(delivery) + 1}.{partition}.{offset}"}) == (
        409, "stale_receipt")
    assert error("/api/pop/g/safe/ack", {"handle": f"{seq}.{delivery}.{partition}.{int(offset) + 7}"}) == (
        409, "stale_receipt")
    assert error("/api/pop/g/safe/receive", {"invisible_ms": -5}) == (400, "invalid_request")
    assert error("/api/pop/g/safe/receive", {"invisible_ms": 10**12}) == (400, "invalid_request")
    assert error("/api/pop/g/safe/receive", {"max": 0}) == (400, "invalid_request")
    assert error("/api/pop/g/safe/invisible", {"handle": m["handle"], "invisible_ms": -1}) == (
        400, "invalid_request")
    assert error("/api/pop/g/nosuchtopic/receive", {}) == (404, "unknown_topic")
    assert error("/api/pop/nosuchgroup/safe/ack", {"handle": m["handle"]}) == (404, "unknown_group")
    assert error("/api/pop/bad%2Fname/safe/receive", {}) == (400, "invalid_request")
    assert error("/api/topics/safe/messages", {"messages": [{"value": "v", "delay_ms": -1}]}) == (
        400, "invalid_request")
    assert error("/api/topics/safe/messages", {"messages": [{"value": "v", "delay_ms": 41 * 86_400_000}]}) == (
        400, "invalid_request")
    # nothing was settled or lost: the lease still acks
    assert call(server, "POST", "/api/pop/g/safe/ack", {"handle": m["handle"]}).status == 204


def test_a_delayed_message_reaches_the_group_when_due(server: LogbusServer) -> None:
    create(server, "later")
    receive(server, "g", "later")
    sent = time.monotonic()
    publish(server, "later", ["soon"], delay_ms=500)
    assert receive(server, "g", "later") == []
    [m] = wait_for(server, "g", "later", 1)
    assert m["value"] == "soon" and time.monotonic() - sent >= 0.5
    assert json.loads(json.dumps(m))["deliveries"] == 1


def test_a_receive_waits_for_the_first_message(server: LogbusServer) -> None:
    create(server, "poll")
    receive(server, "g", "poll")
    done: dict[str, Any] = {}

    def long_poll() -> None:
        started = time.monotonic()
        reply = call(server, "POST", "/api/pop/g/poll/receive", {"max": 10, "wait_ms": 5000})
        done["took"], done["reply"] = time.monotonic() - started, reply

    waiting = threading.Thread(target=long_poll)
    waiting.start()
    time.sleep(0.3)
    publish(server, "poll", ["a", "b"])
    waiting.join(10)
    reply = done["reply"]
    assert reply.status == 200
    assert [m["value"] for m in reply.json()["messages"]] == ["a", "b"]
    assert 0.3 <= done["took"] < 3.0
    started = time.monotonic()
    empty = call(server, "POST", "/api/pop/g/poll/receive", {"wait_ms": 300})
    assert empty.json()["messages"] == [] and time.monotonic() - started >= 0.3
    bad = call(server, "POST", "/api/pop/g/poll/receive", {"wait_ms": 10**6})
    assert (bad.status, bad.json()["error"]) == (400, "invalid_request")


def test_a_message_with_a_ttl_expires_in_the_group(server: LogbusServer) -> None:
    create(server, "fleeting")
    receive(server, "g", "fleeting")
    call(server, "POST", "/api/topics/fleeting/messages",
         {"messages": [{"value": "gone", "ttl_ms": 200}, {"value": "kept"}]})
    time.sleep(0.4)
    assert [m["value"] for m in receive(server, "g", "fleeting")] == ["kept"]
