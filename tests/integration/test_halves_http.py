"""Half messages over HTTP and Kafka against a real ``logbus serve`` (docs/transactions.md):
a half is in no topic until committed (a Kafka consumer and a pop group see nothing), a
rollback drops it, an unsettled one is checked back through the pop group of its producer
group or at its URL (a producer that answers commit, one that answers rollback, one that
never answers: rolled back after the group's max checks), a Kafka producer sends and
settles halves through the topic ``logbus.halves``, and a half survives kill -9 between
send and commit."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pika
import pytest
from kafka import KafkaProducer
from kafka.errors import TopicAuthorizationFailedError

from tests.integration.mgmt import Mgmt, Reply
from tests.integration.test_kafka_idempotence import consume_values
from tests.serverproc import LogbusServer

WAIT_S = 30.0


def call(server: LogbusServer, method: str, path: str, body: Any = None) -> Reply:
    return Mgmt(server).call(method, path, body)


def send(server: LogbusServer, group: str, topic: str, value: str) -> str:
    r = call(server, "POST", "/api/halves", {"group": group, "topic": topic,
                                              "message": {"key": value, "value": value}})
    assert r.status == 201, r
    half_id: str = r.json()["id"]
    return half_id


def pop(server: LogbusServer, group: str, topic: str, wait_ms: int = 0) -> list[dict[str, Any]]:
    r = call(server, "POST", f"/api/pop/{quote(group, safe='')}/{quote(topic, safe='')}/receive",
             {"max": 10, "wait_ms": wait_ms})
    assert r.status == 200, r
    messages: list[dict[str, Any]] = r.json()["messages"]
    return messages


def ack(server: LogbusServer, group: str, topic: str, handle: str) -> None:
    assert call(server, "POST", f"/api/pop/{quote(group, safe='')}/{quote(topic, safe='')}/ack",
                {"handle": handle}).status == 204


def wait_for(what: Callable[[], Any], message: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        got = what()
        if got:
            return got
        assert time.monotonic() < deadline, message
        time.sleep(0.1)


def test_a_half_is_in_no_topic_until_committed(logbus_server: Callable[..., LogbusServer]) -> None:
    server = logbus_server()
    assert call(server, "POST", "/api/topics", {"name": "orders", "partitions": 1}).status in (200, 201)
    assert pop(server, "billing", "orders") == []  # the pop group reads from now on
    kept, dropped = send(server, "shop", "orders", "kept"), send(server, "shop", "orders", "dropped")
    assert consume_values(server, "orders") == [] and pop(server, "billing", "orders") == []
    listed = call(server, "GET", "/api/halves?group=shop").json()
    assert [(h["id"], h["state"]) for h in listed] == [(kept, "unsettled"), (dropped, "unsettled")]
    r = call(server, "POST", f"/api/halves/{kept}/commit")
    assert r.status == 200 and r.json() == {"id": kept, "state": "committed", "offsets": [0]}
    assert call(server, "POST", f"/api/halves/{dropped}/rollback").json()["state"] == "rolled back"
    assert consume_values(server, "orders") == [b"kept"]
    assert [m["value"] for m in pop(server, "billing", "orders")] == ["kept"]
    assert call(server, "POST", f"/api/halves/{kept}/commit").json()["offsets"] == [0]  # again: same answer
    assert call(server, "POST", f"/api/halves/{dropped}/commit").status == 409  # half_settled
    assert call(server, "GET", "/api/halves/nope").status == 404
    assert call(server, "GET", f"/api/halves/{dropped}").json()["state"] == "rolled back"
    assert consume_values(server, "orders") == [b"kept"]


def test_check_back_commits_rolls_back_or_gives_up(logbus_server: Callable[..., LogbusServer]) -> None:
    server = logbus_server()
    assert call(server, "PUT", "/api/half-groups/shop", {"check_interval_ms": 200, "max_checks": 3}).status == 204
    check = "%CHECK%shop"  # made with the group's settings: its producers' pop group now, before any half
    assert pop(server, "shop-checker", check) == []
    ids = {send(server, "shop", "checked", v): v for v in ("commit me", "roll me back", "never answered")}
    answered: dict[str, int] = {}
    unanswered_checks = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        states = {h: call(server, "GET", f"/api/halves/{h}").json()["state"] for h in ids}
        if all(s != "unsettled" for s in states.values()):
            break
        for m in pop(server, "shop-checker", check, wait_ms=300):
            request = json.loads(m["value"])
            value = ids[request["id"]]
            if value == "commit me":
                call(server, "POST", f"/api/halves/{request['id']}/commit")
            elif value == "roll me back":
                call(server, "POST", f"/api/halves/{request['id']}/rollback")
            else:
                unanswered_checks.append(request["check"])
            answered[value] = answered.get(value, 0) + 1
            ack(server, "shop-checker", check, m["handle"])
        time.sleep(0.05)
    states = {ids[h]: call(server, "GET", f"/api/halves/{h}").json() for h in ids}
    assert {v: s["state"] for v, s in states.items()} == {
        "commit me": "committed", "roll me back": "rolled back", "never answered": "rolled back"}, states
    assert states["never answered"]["reason"] == "unsettled after 3 checks"
    assert sorted(set(unanswered_checks)) == [1, 2, 3]  # asked three times, then given up
    assert consume_values(server, "checked") == [b"commit me"]


def test_a_half_survives_kill_9_and_is_committed_after(logbus_server: Callable[..., LogbusServer]) -> None:
    server = logbus_server()
    half = send(server, "shop", "after-crash", "survivor")
    server.kill()
    server.restart(same_ports=True)
    assert call(server, "GET", f"/api/halves/{half}").json()["state"] == "unsettled"
    assert consume_values(server, "after-crash") == []
    assert call(server, "POST", f"/api/halves/{half}/commit").json()["offsets"] == [0]
    assert consume_values(server, "after-crash") == [b"survivor"]


class CheckBack(ThreadingHTTPServer):
    """The producer group's check-back endpoint: a real HTTP server on a free loopback port
    that answers each check request by the half's key, and keeps what it was asked."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.asked.append(request)
                action = {"commit me": "commit", "roll me back": "rollback"}.get(request["key"], "unknown")
                body = json.dumps({"action": action}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/check"

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join(timeout=10)


def test_check_back_at_the_groups_url(logbus_server: Callable[..., LogbusServer]) -> None:
    server = logbus_server()
    hook = CheckBack()
    try:
        r = call(server, "PUT", "/api/half-groups/web", {"check_interval_ms": 200, "max_checks": 2,
                                                          "check_url": hook.url})
        assert r.status == 204, r
        assert call(server, "GET", "/api/half-groups/web").json()["check_url"] == hook.url
        ids = {send(server, "web", "hooked", v): v for v in ("commit me", "roll me back", "undecided")}
        wait_for(lambda: all(call(server, "GET", f"/api/halves/{h}").json()["state"] != "unsettled" for h in ids),
                 "the check-backs did not settle every half")
        states = {v: call(server, "GET", f"/api/halves/{h}").json() for h, v in ids.items()}
        assert {v: s["state"] for v, s in states.items()} == {
            "commit me": "committed", "roll me back": "rolled back", "undecided": "rolled back"}, states
        assert states["commit me"]["reason"] == "by its producer's check-back"
        assert states["undecided"]["reason"] == "unsettled after 2 checks"
        undecided = sorted(a["check"] for a in hook.asked if a["key"] == "undecided")
        assert undecided == [1, 2]  # asked twice, then given up
        assert consume_values(server, "hooked") == [b"commit me"]
        assert call(server, "PUT", "/api/half-groups/web", {"check_url": "ftp://x"}).status == 400
    finally:
        hook.close()


def test_kafka_producers_send_and_settle_halves_through_the_halves_topic(
        logbus_server: Callable[..., LogbusServer]) -> None:
    """A Kafka producer sends a half as a record of ``logbus.halves`` (headers
    ``logbus.half.group`` and ``logbus.half.topic``; its id is ``<partition>-<offset>``),
    and commits or rolls it back with a record naming that id; a half survives kill -9."""
    server = logbus_server()
    assert call(server, "PUT", "/api/half-groups/kshop", {"max_checks": 15}).status == 204  # makes logbus.halves
    send = [("logbus.half.group", b"kshop"), ("logbus.half.topic", b"korders")]
    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks="all")
    try:
        md = [p.send("logbus.halves", key=k, value=k, headers=send).get(timeout=20) for k in (b"kept", b"dropped")]
    finally:
        p.close()
    kept, dropped = (f"{m.partition}-{m.offset}" for m in md)
    assert call(server, "GET", f"/api/halves/{kept}").json()["state"] == "unsettled"
    assert consume_values(server, "korders") == []
    server.kill()
    server.restart(same_ports=True)
    assert [h["id"] for h in call(server, "GET", "/api/halves?group=kshop").json()] == [kept, dropped]
    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks="all")
    try:
        p.send("logbus.halves", value=b"", headers=[("logbus.half.commit", kept.encode())]).get(timeout=20)
        p.send("logbus.halves", value=b"", headers=[("logbus.half.rollback", dropped.encode())]).get(timeout=20)
    finally:
        p.close()
    wait_for(lambda: call(server, "GET", "/api/halves?group=kshop").json() == [], "the halves were not settled")
    assert consume_values(server, "korders") == [b"kept"]
    assert call(server, "GET", f"/api/halves/{dropped}").json()["state"] == "rolled back"


def test_a_kafka_half_needs_write_on_its_target_topic(logbus_server: Callable[..., LogbusServer]) -> None:
    server = logbus_server()
    assert call(server, "PUT", "/api/half-groups/kshop", {}).status == 204
    Mgmt(server).grant("/", "guest", configure=".*", write=r"^(logbus\.halves|open)$", read=".*")
    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks="all", retries=0)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            p.send("logbus.halves", value=b"x", headers=[("logbus.half.group", b"kshop"),
                                                        ("logbus.half.topic", b"secret")]).get(timeout=20)
        p.send("logbus.halves", value=b"y", headers=[("logbus.half.group", b"kshop"),
                                                    ("logbus.half.topic", b"open")]).get(timeout=20)
    finally:
        p.close()
    assert [h["topic"] for h in call(server, "GET", "/api/halves?group=kshop").json()] == ["open"]


def test_amqp_producers_send_and_settle_halves_through_the_halves_exchange(
        logbus_server: Callable[..., LogbusServer]) -> None:
    """An AMQP producer publishes a half to the exchange ``logbus.halves`` (text headers
    ``logbus.half.group``, ``logbus.half.topic`` and its id ``logbus.half.id``), and settles
    it with a publish there naming the id; the committed message reaches the queues bound to
    the target's exchange, with its routing key. The target needs write permission too."""
    server = logbus_server()
    assert call(server, "PUT", "/api/half-groups/ashop", {}).status == 204
    host, port = server.host_port("amqp")
    params = pika.ConnectionParameters(host=host, port=port, credentials=pika.PlainCredentials("guest", "guest"),
                                       connection_attempts=1)
    connection = pika.BlockingConnection(params)
    try:
        ch = connection.channel()
        ch.confirm_delivery()
        ch.exchange_declare("logbus.halves", "topic", durable=True)
        ch.exchange_declare("aorders", "topic", durable=True)
        ch.queue_declare("aq", durable=True)
        ch.queue_bind("aq", "aorders", "#")

        def publish(routing_key: str, body: bytes, headers: dict[str, str]) -> None:
            ch.basic_publish("logbus.halves", routing_key, body, pika.BasicProperties(headers=headers))

        for half_id, body in (("h-1", b"kept"), ("h-2", b"dropped")):
            publish("eu.1", body, {"logbus.half.group": "ashop", "logbus.half.topic": "aorders",
                                   "logbus.half.id": half_id})
        assert [h["id"] for h in call(server, "GET", "/api/halves?group=ashop").json()] == ["h-1", "h-2"]
        assert ch.basic_get("aq", auto_ack=True)[0] is None  # nothing before the commit
        publish("", b"", {"logbus.half.commit": "h-1"})
        publish("", b"", {"logbus.half.rollback": "h-2"})
        got = wait_for(lambda: ch.basic_get("aq", auto_ack=True), "the committed half did not reach the queue")
        method, _, body = got
        assert (method.exchange, method.routing_key, body) == ("aorders", "eu.1", b"kept")
        assert ch.basic_get("aq", auto_ack=True)[0] is None
        assert call(server, "GET", "/api/halves/h-2").json()["state"] == "rolled back"
    finally:
        connection.close()
    Mgmt(server).grant("/", "guest", configure=".*", write=r"^(logbus\.halves|aorders)$", read=".*")
    connection = pika.BlockingConnection(params)
    try:
        ch = connection.channel()
        ch.confirm_delivery()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.basic_publish("logbus.halves", "k", b"x", pika.BasicProperties(headers={
                "logbus.half.group": "ashop", "logbus.half.topic": "secret", "logbus.half.id": "h-3"}))
        assert refused.value.reply_code == 403
    finally:
        if connection.is_open:
            connection.close()
    assert [h["id"] for h in call(server, "GET", "/api/halves?group=ashop").json()] == []


def test_check_back_of_halves_sent_by_kafka_and_amqp_producers(logbus_server: Callable[..., LogbusServer]) -> None:
    """Halves a Kafka and an AMQP producer sent, left unsettled by them, are checked back at
    the group's URL: one committed, one rolled back, one never answered (rolled back)."""
    server = logbus_server()
    hook = CheckBack()
    try:
        assert call(server, "PUT", "/api/half-groups/mixed", {"check_interval_ms": 200, "max_checks": 2,
                                                             "check_url": hook.url}).status == 204
        p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks="all")
        try:
            sent = [p.send("logbus.halves", key=key, value=key, headers=[
                ("logbus.half.group", b"mixed"), ("logbus.half.topic", b"mixed-out")]).get(timeout=20)
                for key in (b"commit me", b"undecided")]
        finally:
            p.close()
        ids = [f"{m.partition}-{m.offset}" for m in sent]
        host, port = server.host_port("amqp")
        connection = pika.BlockingConnection(pika.ConnectionParameters(
            host=host, port=port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1))
        try:
            ch = connection.channel()
            ch.confirm_delivery()
            ch.exchange_declare("logbus.halves", "topic", durable=True)
            ch.basic_publish("logbus.halves", "roll me back", b"roll me back", pika.BasicProperties(headers={
                "logbus.half.group": "mixed", "logbus.half.topic": "mixed-out", "logbus.half.id": "amqp-1"}))
        finally:
            connection.close()
        ids.append("amqp-1")
        wait_for(lambda: all(call(server, "GET", f"/api/halves/{h}").json()["state"] != "unsettled" for h in ids),
                 "the check-backs did not settle every half")
        assert [call(server, "GET", f"/api/halves/{h}").json()["state"] for h in ids] == [
            "committed", "rolled back", "rolled back"]
        assert consume_values(server, "mixed-out") == [b"commit me"]
    finally:
        hook.close()


def test_an_amqp_half_survives_kill_9_and_is_committed_after(logbus_server: Callable[..., LogbusServer]) -> None:
    server = logbus_server()
    assert call(server, "PUT", "/api/half-groups/ashop", {}).status == 204

    def channel() -> tuple[Any, Any]:
        host, port = server.host_port("amqp")
        connection = pika.BlockingConnection(pika.ConnectionParameters(
            host=host, port=port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1))
        ch = connection.channel()
        ch.confirm_delivery()
        return connection, ch

    connection, ch = channel()
    try:
        ch.exchange_declare("logbus.halves", "topic", durable=True)
        ch.exchange_declare("crash-orders", "topic", durable=True)
        ch.queue_declare("crash-q", durable=True)
        ch.queue_bind("crash-q", "crash-orders", "#")
        ch.basic_publish("logbus.halves", "eu.9", b"survivor", pika.BasicProperties(headers={
            "logbus.half.group": "ashop", "logbus.half.topic": "crash-orders", "logbus.half.id": "c-1"}))
    finally:
        connection.close()  # confirmed: stored
    server.kill()
    server.restart(same_ports=True)
    assert call(server, "GET", "/api/halves/c-1").json()["state"] == "unsettled"
    connection, ch = channel()
    try:
        assert ch.basic_get("crash-q", auto_ack=True)[0] is None
        ch.basic_publish("logbus.halves", "", b"", pika.BasicProperties(headers={"logbus.half.commit": "c-1"}))
        method, _, body = wait_for(lambda: ch.basic_get("crash-q", auto_ack=True), "the half was not published")
        assert (method.exchange, method.routing_key, body) == ("crash-orders", "eu.9", b"survivor")
    finally:
        connection.close()
