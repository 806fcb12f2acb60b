"""Who may do what over the HTTP API, against a real `logbus serve`, with curl: every
endpoint but /healthz asks for a user (401), then the tag (RabbitMQ's management,
policymaker, monitoring, administrator) or the vhost permission the operation needs
(403), the same permissions AMQP, MQTT and Kafka check (docs/security.md). A refused
publish leaves no trace; a user of one vhost cannot reach another by a topic's name."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.integration.mgmt import Mgmt
from tests.serverproc import LogbusServer, module_server

ANONYMOUS, WRONG = None, ("guest", "wrong")
STRANGER = ("stranger", "pw")  # a user with no permission anywhere
READER, WRITER = ("reader", "pw"), ("writer", "pw")  # read-only, write-only on vhost /
WORKER = ("worker", "pw")  # every permission on /, no tag
MANAGER, POLICY, MONITOR = ("manager", "pw"), ("policy", "pw"), ("monitor", "pw")
PROD = ("produser", "pw")  # every permission on vhost prod only
SENSOR = ("sensor", "pw")  # writes amq.topic only with routing keys sensors.*


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "http-security", args=["--pop-max-deliveries", "1",
                                                                      "--pop-retry-backoff", "10ms"])


@pytest.fixture(scope="module")
def mgmt(server: LogbusServer) -> Mgmt:
    m = Mgmt(server)
    m.add_vhost("prod")
    for (name, _), tags in [(STRANGER, ""), (READER, ""), (WRITER, ""), (WORKER, ""), (MANAGER, "management"),
                            (POLICY, "policymaker"), (MONITOR, "monitoring"), (PROD, "management"),
                            (SENSOR, "")]:
        m.add_user(name, "pw", tags)
    m.grant("/", READER[0], configure="", write="", read=".*")
    m.grant("/", WRITER[0], configure="", write=".*", read="")
    for user in (WORKER, MANAGER, POLICY, SENSOR):
        m.grant("/", user[0])
    m.grant("prod", PROD[0])
    m.grant("prod", "guest")  # an administrator too needs a permission in a new vhost, as in RabbitMQ
    m.ok("PUT", "/api/topic-permissions/%2F/sensor", {"exchange": "amq.topic", "write": "^sensors\\.", "read": ".*"})
    for topic in ("orders", "prod@orders", "amq.topic"):
        if m.call("GET", "/api/topics/" + quote(topic, safe="")).status == 404:
            m.ok("POST", "/api/topics", {"name": topic})
    return m


def curl(server: LogbusServer, method: str, path: str, auth: tuple[str, str] | None, body: Any = None,
         ) -> tuple[int, Any]:
    """(status, JSON body or None) of one request made by curl."""
    argv = ["curl", "-sS", "-X", method, "-o", "-", "-w", "\n%{http_code}", "--max-time", "10",
            server.http_url + path]
    if auth is not None:
        argv += ["-u", f"{auth[0]}:{auth[1]}"]
    if body is not None:
        argv += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    text, _, status = out.rpartition("\n")
    return int(status), json.loads(text) if text.strip() else None


def refused(server: LogbusServer, method: str, path: str, auth: tuple[str, str] | None, status: int,
            body: Any = None) -> str:
    got, answer = curl(server, method, path, auth, body)
    assert got == status, (method, path, auth, got, answer)
    assert answer["error"] == ("unauthorized" if status == 401 else "forbidden"), answer
    return str(answer["message"])


def high_watermarks(mgmt: Mgmt, topic: str) -> list[int]:
    info = mgmt.ok("GET", "/api/topics/" + quote(topic, safe="")).json()
    return [p["log_end_offset"] for p in info["partition_detail"]]


def publish_body(*keys: str) -> dict[str, Any]:
    return {"messages": [{"key": k, "value": "v"} for k in keys or ("k",)]}


# -- the matrix: who x (publish, consume, administer) ------------------------------------------


def test_publish(server: LogbusServer, mgmt: Mgmt) -> None:
    path = "/api/topics/orders/messages"
    before = high_watermarks(mgmt, "orders")
    for auth in (ANONYMOUS, WRONG, ("nobody", "pw")):
        refused(server, "POST", path, auth, 401, publish_body())
    for auth in (STRANGER, READER, MONITOR, PROD):
        refused(server, "POST", path, auth, 403, publish_body())
    assert high_watermarks(mgmt, "orders") == before  # a refused publish leaves no trace
    for auth in (WRITER, WORKER):
        status, answer = curl(server, "POST", path, auth, publish_body())
        assert status == 200 and len(answer["offsets"]) == 1, answer


def start_group(mgmt: Mgmt, group: str, topic: str) -> None:
    """A pop group begins at the topic's end: its first receive (an administrator's) makes it."""
    mgmt.ok("POST", f"/api/pop/{group}/{quote(topic, safe='')}/receive", {"max": 1})


def test_pop(server: LogbusServer, mgmt: Mgmt) -> None:
    start_group(mgmt, "billing", "orders")
    mgmt.ok("POST", "/api/topics/orders/messages", publish_body("a", "b"))
    path = "/api/pop/billing/orders/receive"
    body = {"max": 32, "invisible_ms": 60_000}
    for auth in (ANONYMOUS, WRONG):
        refused(server, "POST", path, auth, 401, body)
    for auth in (STRANGER, WRITER, MONITOR, PROD):
        refused(server, "POST", path, auth, 403, body)
    status, answer = curl(server, "POST", path, READER, body)
    assert status == 200 and answer["messages"], answer  # nothing was taken by the refused ones
    handles = [m["handle"] for m in answer["messages"]]
    refused(server, "POST", "/api/pop/billing/orders/ack", WRITER, 403, {"handles": handles})
    status, acked = curl(server, "POST", "/api/pop/billing/orders/ack", READER, {"handles": handles})
    assert (status, acked["acked"]) == (200, len(handles)), acked


def settings_of(limits: dict[str, Any]) -> dict[str, Any]:
    """The limits as set, without the live figures (memory in use, disk free) beside them."""
    return {k: v for k, v in limits.items() if k not in ("memory_used_bytes", "disk_free_bytes", "alarms")}


def test_administration(server: LogbusServer, mgmt: Mgmt) -> None:
    limits = mgmt.ok("GET", "/api/limits").json()
    change = {"disk_free_limit": 10**15}  # what an intruder would set to block every publisher
    for auth in (ANONYMOUS, WRONG):
        refused(server, "PUT", "/api/limits", auth, 401, change)
    for auth in (WORKER, MANAGER, MONITOR):
        assert refused(server, "PUT", "/api/limits", auth, 403, change) == "Not administrator user"
    assert settings_of(mgmt.ok("GET", "/api/limits").json()) == settings_of(limits)  # unchanged
    assert curl(server, "GET", "/api/limits", MONITOR)[0] == 200
    assert refused(server, "GET", "/api/limits", MANAGER, 403) == "Not monitor user"
    for auth in (WORKER, MONITOR, MANAGER):
        refused(server, "PUT", "/api/users/intruder", auth, 403, {"password": "x", "tags": "administrator"})
    assert mgmt.call("GET", "/api/users/intruder").status == 404


def test_topics_need_the_management_tag_and_configure(server: LogbusServer, mgmt: Mgmt) -> None:
    create = {"name": "made-by-hand", "partitions": 1}
    refused(server, "POST", "/api/topics", ANONYMOUS, 401, create)
    assert refused(server, "POST", "/api/topics", WORKER, 403, create) == "Not management user"
    refused(server, "POST", "/api/topics", MONITOR, 403, create)  # tagged, without configure on /
    refused(server, "POST", "/api/topics", PROD, 403, create)  # configure on prod, not on /
    assert mgmt.call("GET", "/api/topics/made-by-hand").status == 404
    assert curl(server, "POST", "/api/topics", MANAGER, create)[0] == 201
    alter = {"config": {"retention.ms": 60_000}}
    assert refused(server, "PUT", "/api/topics/made-by-hand", MANAGER, 403, alter) == "Not policymaker user"
    assert curl(server, "PUT", "/api/topics/made-by-hand", POLICY, alter)[0] == 200
    refused(server, "DELETE", "/api/topics/made-by-hand", MONITOR, 403)
    refused(server, "DELETE", "/api/topics/__amqp_default", WORKER, 403)
    assert curl(server, "DELETE", "/api/topics/made-by-hand", MANAGER)[0] == 204


def test_listings_show_what_the_user_may_see(server: LogbusServer, mgmt: Mgmt) -> None:
    start_group(mgmt, "prodgroup", "prod@orders")
    start_group(mgmt, "rootgroup", "orders")
    _, prod_topics = curl(server, "GET", "/api/topics", PROD)
    assert {t["name"] for t in prod_topics} == {"prod@orders"}
    _, all_topics = curl(server, "GET", "/api/topics", MONITOR)
    assert {"orders", "prod@orders", "amq.topic"} <= {t["name"] for t in all_topics}
    _, groups = curl(server, "GET", "/api/pop", PROD)
    assert {(g["pop_group"], g["topic"]) for g in groups} >= {("prodgroup", "prod@orders")}
    assert all(g["topic"] == "prod@orders" for g in groups), groups
    assert [v["name"] for v in curl(server, "GET", "/api/vhosts", PROD)[1]] == ["prod"]
    refused(server, "GET", "/api/topics/orders", PROD, 403)
    refused(server, "GET", "/api/topics", WORKER, 403)  # no management tag
    assert curl(server, "GET", "/api/whoami", PROD) == (200, {"name": "produser", "tags": ["management"]})
    refused(server, "GET", "/api/whoami", ANONYMOUS, 401)


# -- one permission model ------------------------------------------------------------------


def test_a_topic_name_does_not_reach_into_another_vhost(server: LogbusServer, mgmt: Mgmt) -> None:
    """The issue's thief: full permissions on / gave another vhost's messages by naming
    its topic (prod@orders). Now prod's topics need prod's permissions."""
    start_group(mgmt, "prodworker", "prod@orders")
    mgmt.ok("POST", "/api/topics/prod%40orders/messages", publish_body("secret"))
    before = high_watermarks(mgmt, "prod@orders")
    refused(server, "POST", "/api/pop/thief/prod%40orders/receive", WORKER, 403, {"max": 32})
    refused(server, "POST", "/api/topics/prod%40orders/messages", WORKER, 403, publish_body())
    assert high_watermarks(mgmt, "prod@orders") == before
    status, answer = curl(server, "POST", "/api/pop/prodworker/prod%40orders/receive", PROD, {"max": 32})
    assert status == 200 and answer["messages"], answer
    refused(server, "POST", "/api/topics/orders/messages", PROD, 403, publish_body())


def test_topic_permissions_bind_the_record_key(server: LogbusServer, mgmt: Mgmt) -> None:
    """A publish to amq.topic's topic is checked as AMQP checks a routing key (the
    record key is the routing key): sensors.* yes, alarm.fire no, and one refused key
    refuses the whole request."""
    path = "/api/topics/amq.topic/messages"
    before = high_watermarks(mgmt, "amq.topic")
    assert "alarm.fire" in refused(server, "POST", path, SENSOR, 403, publish_body("alarm.fire"))
    refused(server, "POST", path, SENSOR, 403, publish_body("sensors.a", "alarm.fire"))
    assert high_watermarks(mgmt, "amq.topic") == before
    status, answer = curl(server, "POST", path, SENSOR, publish_body("sensors.a", "sensors.b"))
    assert status == 200 and len(answer["offsets"]) == 2, answer


def test_a_dlq_replay_needs_write_on_the_topics_it_goes_back_to(server: LogbusServer, mgmt: Mgmt) -> None:
    """--pop-max-deliveries 1: a nack dead-letters at once. The reader may read the group's
    dead letters but not write them back to orders: refused, nothing replayed; the worker
    may."""
    start_group(mgmt, "replayers", "orders")
    mgmt.ok("POST", "/api/topics/orders/messages", publish_body("dead"))
    got = mgmt.ok("POST", "/api/pop/replayers/orders/receive", {"max": 32}).json()["messages"]
    assert got
    mgmt.ok("POST", "/api/pop/replayers/orders/nack", {"handles": [m["handle"] for m in got]})
    deadline = time.monotonic() + 10
    while mgmt.call("GET", "/api/topics/%25DLQ%25replayers").status == 404 \
            or not any(high_watermarks(mgmt, "%DLQ%replayers")):
        assert time.monotonic() < deadline, "the nacked message never reached %DLQ%replayers"
        time.sleep(0.02)
    refused(server, "POST", "/api/pop/replayers/dlq/replay", ANONYMOUS, 401, {})
    refused(server, "POST", "/api/pop/replayers/dlq/replay", WRITER, 403, {})  # may not read the DLQ
    assert "orders" in refused(server, "POST", "/api/pop/replayers/dlq/replay", READER, 403, {})
    status, answer = curl(server, "POST", "/api/pop/replayers/dlq/replay", WORKER, {})
    assert status == 200 and answer["replayed"] == len(got), answer


def test_metrics_can_ask_for_a_monitoring_user(logbus_server: Any) -> None:
    server = logbus_server(args=["--http-metrics-auth", "true"], listeners={"amqp": "off", "mqtt": "off",
                                                                           "kafka": "off"})
    mgmt = Mgmt(server)
    mgmt.add_user("plain", "pw")
    mgmt.add_user("watcher", "pw", "monitoring")
    for auth, status in ((ANONYMOUS, 401), (WRONG, 401), (("plain", "pw"), 403)):
        argv = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", server.http_url + "/metrics"]
        if auth is not None:
            argv += ["-u", f"{auth[0]}:{auth[1]}"]
        assert subprocess.run(argv, capture_output=True, text=True, check=True).stdout == str(status)
    ok = subprocess.run(["curl", "-sf", "-u", "watcher:pw", server.http_url + "/metrics"], capture_output=True,
                        text=True, check=True)
    assert "logbus_" in ok.stdout
    health = subprocess.run(["curl", "-sf", server.http_url + "/healthz"], capture_output=True, text=True, check=True)
    assert json.loads(health.stdout) == {"status": "ok"}
