"""The log of a real `logbus serve` says who connected, logged in, was refused and left,
on every protocol (pika, paho, kafka-python, curl), and has one audit line per
management change (HTTP API and Kafka admin requests): who, what, from where."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator

import pika  # type: ignore[import-untyped]
import pika.exceptions  # type: ignore[import-untyped]
import pytest
from kafka import KafkaAdminClient  # type: ignore[import-untyped]
from kafka.admin import NewTopic  # type: ignore[import-untyped]

from tests.integration.mgmt import Mgmt
from tests.integration.mqtt_clients import Paho, unique
from tests.serverproc import LogbusServer, module_server

WAIT = 15


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "connection-log")


def logged(server: LogbusServer, pattern: str) -> list[str]:
    """The log lines matching ``pattern``, once there is at least one (lines are written as
    things happen; a close is logged when the broker notices it)."""
    deadline = time.monotonic() + WAIT
    while True:
        lines = [line for line in server.log_text().splitlines() if re.search(pattern, line)]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_amqp_connections_are_logged_in_and_out(server: LogbusServer) -> None:
    host, port = server.host_port("amqp")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(pika.ConnectionParameters(host, port, credentials=pika.PlainCredentials(
            "guest", "wrong"), connection_attempts=1))
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    conn.close()
    assert logged(server, r"amqp connection \d+ from 127\.0\.0\.1:\d+: login refused for user 'guest': "
                          r"bad user name or password")
    assert logged(server, r"amqp connection \d+ from 127\.0\.0\.1:\d+ accepted")
    assert logged(server, r"amqp connection \d+ from .*: user 'guest' logged in to vhost '/'")
    assert logged(server, r"amqp connection \d+ from .* closed \(closed cleanly\): user 'guest', \d+\.\d s")


def test_a_kicked_connection_says_who_closed_it(server: LogbusServer) -> None:
    cid = unique("kicked")
    paho = Paho(server, cid, version=5)
    mgmt = Mgmt(server)
    conn = next(c for c in mgmt.call("GET", "/api/connections?protocol=mqtt").json() if c["client_id"] == cid)
    assert mgmt.call("DELETE", f"/api/connections/{conn['id']}").status == 204
    assert logged(server, rf"mqtt connection {conn['id']} from .* closed \(closed by an administrator\): "
                          r"user 'guest'")
    paho.close()


def test_json_log_format(tmp_path_factory: pytest.TempPathFactory) -> None:
    """``--log-format json``: every line one JSON object; a connection's lines carry its
    fields (protocol, peer, user, duration, reason)."""
    import json

    for server in module_server(tmp_path_factory, "json-log", args=["--log-format", "json"]):
        paho = Paho(server, unique("json"))
        paho.close()
        lines = logged(server, r'"event": "closed"')
        assert lines, server.log_tail()
        closed = json.loads(lines[0])["connection"]
        assert (closed["protocol"], closed["user"], closed["reason"]) == ("mqtt", "guest", "closed cleanly")
        assert closed["duration_ms"] >= 0 and closed["peer"].startswith("127.0.0.1:")
        assert closed["bytes_in"] > 0 and closed["bytes_out"] >= 4  # CONNECT in; CONNACK (4 bytes) out
        for line in server.log_text().splitlines():
            if line.startswith("--- "):  # the test harness's own header lines
                continue
            record = json.loads(line)
            assert {"time", "level", "logger", "message"} <= record.keys()


def test_mqtt_and_kafka_logins_are_logged(server: LogbusServer) -> None:
    cid = unique("logged")
    paho = Paho(server, cid, version=5, username="guest", password="guest")
    paho.close()
    refused = Paho(server, unique("bad"), version=5, username="guest", password="nope", connect=False)
    try:
        refused.connect()
    finally:
        refused.close()
    assert logged(server, r"mqtt connection \d+ from .*: user 'guest' logged in to vhost '/'")
    assert logged(server, r"mqtt connection \d+ from .*: login refused for user 'guest': bad user name or password")
    kafka = KafkaAdminClient(bootstrap_servers=server.addresses["kafka"], security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="guest", sasl_plain_password="guest")
    try:
        kafka.create_topics([NewTopic("audited-topic", 1, 1)])
    finally:
        kafka.close()
    assert logged(server, r"kafka connection \d+ from .*: user 'guest' logged in \(SASL SCRAM-SHA-256\)")
    assert logged(server, r"logbus\.audit: user 'guest' from 127\.0\.0\.1:\d+: Kafka CreateTopicsRequest "
                          r"topics \['audited-topic'\]")


def test_http_management_changes_are_audited_and_failed_logins_logged(server: LogbusServer) -> None:
    mgmt = Mgmt(server)
    mgmt.add_user("eve", "eve-pw")
    mgmt.ok("POST", "/api/topics", {"name": "http-audited"})  # its own topic: no test runs before it
    mgmt.ok("POST", "/api/topics/http-audited/messages", {"messages": [{"value": "data, not management"}]})
    status = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-u", "eve:wrong",
                             server.http_url + "/api/topics"], capture_output=True, text=True, check=True).stdout
    assert status == "401"
    assert logged(server, r"logbus\.audit: user 'guest' from 127\.0\.0\.1: PUT /api/users/eve -> 201")
    assert logged(server, r"http connection \d+ from .*: login refused for user 'eve': bad user name or password")
    assert not [line for line in server.log_text().splitlines() if "logbus.audit" in line and "messages" in line]
    assert "eve-pw" not in server.log_text()  # no password in any line


def test_failed_logins_from_one_host_are_slowed_down_after_a_burst(server: LogbusServer) -> None:
    """Five failures are answered at once; after that each waits (0.2 s, then twice as long
    each time), on HTTP as on Kafka, and the log says so. A success forgets the failures."""
    url = server.http_url + "/api/whoami"
    assert Mgmt(server).ok("GET", "/api/whoami")  # a success: whatever failed before is forgotten
    for _ in range(7):
        status = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-u", "mallory:guess", url],
                                capture_output=True, text=True, check=True, timeout=30).stdout
        assert status == "401"
    slowed = logged(server, r"login refused for user 'mallory'.*answered after \d\.\d s")
    assert [re.search(r"answered after (\d\.\d) s", line).group(1) for line in slowed][:2] == ["0.2", "0.4"]  # type: ignore[union-attr]
    ok = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-u", "guest:guest", url],
                        capture_output=True, text=True, check=True, timeout=30).stdout
    assert ok == "200"
    before = len(logged(server, r"answered after"))
    subprocess.run(["curl", "-s", "-o", "/dev/null", "-u", "mallory:guess", url], check=True, timeout=30)
    assert len(logged(server, r"answered after")) == before  # forgotten: answered at once again


def test_failed_logins_on_amqp_and_mqtt_are_slowed_down_too(server: LogbusServer) -> None:
    """The count is per host, whatever the protocol: after five failures an AMQP refusal
    (Connection.Close 403) and an MQTT one (CONNACK 0x86) wait too, and say so."""
    assert Mgmt(server).ok("GET", "/api/whoami")  # a success: whatever failed before is forgotten
    host, port = server.host_port("amqp")
    took = []
    for _ in range(6):
        started = time.monotonic()
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(pika.ConnectionParameters(host, port, credentials=pika.PlainCredentials(
                "trudy", "guess"), connection_attempts=1))
        took.append(time.monotonic() - started)
    assert took[-1] >= 0.2  # the sixth: held back 0.2 s (a floor, not a speed; the log says why below)
    refused = Paho(server, unique("trudy"), version=5, username="trudy", password="guess", connect=False)
    try:
        started = time.monotonic()
        _, reason, _ = refused.connect()
        assert reason == 0x86  # Bad User Name or Password
        assert time.monotonic() - started >= 0.4
    finally:
        refused.close()
    slowed = logged(server, r"(amqp|mqtt) connection \d+ from .*: login refused for user 'trudy'.*answered after")
    assert [(re.search(r"(amqp|mqtt) connection", line).group(1),  # type: ignore[union-attr]
             re.search(r"answered after (\d\.\d) s", line).group(1)) for line in slowed] == [  # type: ignore[union-attr]
        ("amqp", "0.2"), ("mqtt", "0.4")]
