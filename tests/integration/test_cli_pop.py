"""`logbus pop ...` and `logbus dlq replay` against a real server (docs/consumption.md).

The server runs with a 20 ms pop backoff and a delivery limit of 2, so a message left to
lapse twice is dead-lettered to ``%DLQ%<group>`` within a fraction of a second."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any, Iterator

import pytest

from tests.integration.mgmt import Mgmt
from tests.serverproc import LogbusServer, module_server, run_logbus


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "cli-pop",
                             args=["--pop-retry-backoff", "20ms", "--pop-max-deliveries", "2"])


def logbus(server: LogbusServer, *args: str) -> subprocess.CompletedProcess[str]:
    return run_logbus(*args, "--server", server.http_url)


def ok(server: LogbusServer, *args: str) -> str:
    result = logbus(server, *args)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def received(server: LogbusServer, group: str, topic: str, *args: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ok(server, "pop", "receive", group, topic, "--json", *args).splitlines()]


def publish(server: LogbusServer, topic: str, values: list[str]) -> None:
    reply = Mgmt(server).call("POST", f"/api/topics/{topic}/messages",
                                         {"messages": [{"value": v} for v in values]})
    assert reply.status == 200, reply


def pop_http(server: LogbusServer, group: str, topic: str, invisible_ms: int) -> list[dict[str, Any]]:
    reply = Mgmt(server).call("POST", f"/api/pop/{group}/{topic}/receive",
                                         {"max": 32, "invisible_ms": invisible_ms})
    assert reply.status == 200, reply
    messages: list[dict[str, Any]] = reply.json()["messages"]
    return messages


def dead_letter(server: LogbusServer, group: str, topic: str, n: int) -> None:
    """Let ``n`` messages of ``topic`` lapse in ``group`` until they are dead-lettered."""
    deliveries = 0
    deadline = time.monotonic() + 10
    while deliveries < 2 * n:
        assert time.monotonic() < deadline, f"only {deliveries} of {2 * n} deliveries"
        deliveries += len(pop_http(server, group, topic, 1))
        time.sleep(0.02)
    time.sleep(0.1)
    assert pop_http(server, group, topic, 1) == []


def replay(server: LogbusServer, group: str, *args: str, expect: int) -> dict[str, Any]:
    """``logbus dlq replay``, again until it moved ``expect`` messages (the dead letters
    are appended to the DLQ topic a moment after their last lapse)."""
    total: dict[str, Any] = {"replayed": 0, "topics": {}}
    deadline = time.monotonic() + 10
    while True:
        got = json.loads(ok(server, "dlq", "replay", group, "--json", *args))
        total["replayed"] += got["replayed"]
        for t, k in got["topics"].items():
            total["topics"][t] = total["topics"].get(t, 0) + k
        if total["replayed"] >= expect or time.monotonic() > deadline:
            return total
        time.sleep(0.1)


def test_receive_ack_nack_invisible_list(server: LogbusServer) -> None:
    ok(server, "topic", "create", "orders")
    assert ok(server, "pop", "receive", "billing", "orders") == "no messages\n"  # the group starts here
    publish(server, "orders", ["first", "second", "third"])
    out = ok(server, "pop", "receive", "billing", "orders", "--max", "2", "--member", "w1").splitlines()
    assert out[0].split() == ["HANDLE", "PARTITION", "OFFSET", "DELIVERIES", "KEY", "VALUE"]
    rows = [line.split() for line in out[1:]]
    assert [r[1:] for r in rows] == [["0", "0", "1", "-", "first"], ["0", "1", "1", "-", "second"]]
    [third] = received(server, "billing", "orders", "--invisible-ms", "60000")
    assert (third["value"], third["offset"], third["deliveries"]) == ("third", 2, 1)

    listed = ok(server, "pop", "list").splitlines()
    assert listed[0].split() == ["POP-GROUP", "TOPIC", "READY", "INVISIBLE", "DEAD-LETTERED", "DLQ", "WAITING"]
    assert ["billing", "orders", "0", "3", "0", "0"] in [line.split() for line in listed[1:]]
    as_json = json.loads(ok(server, "pop", "list", "--json"))
    assert {"pop_group": "billing", "topic": "orders", "ready": 0, "invisible": 3, "dead_lettered": 0,
            "dead_letters_waiting": 0} in as_json

    assert ok(server, "pop", "ack", "billing", "orders", rows[0][0], rows[1][0]) == "acked 2 messages\n"
    assert ok(server, "pop", "invisible", "billing", "orders", third["handle"], "1") == (
        f"{third['handle']} invisible for 1ms\n")
    deadline = time.monotonic() + 10
    again: list[dict[str, Any]] = []
    while not again and time.monotonic() < deadline:
        again = received(server, "billing", "orders")
    assert (again[0]["value"], again[0]["deliveries"]) == ("third", 2)
    assert ok(server, "pop", "nack", "billing", "orders", again[0]["handle"]) == "nacked 1 message\n"


def test_a_stale_handle_is_named_and_fails(server: LogbusServer) -> None:
    ok(server, "topic", "create", "stale")
    received(server, "g", "stale")
    publish(server, "stale", ["x"])
    [m] = received(server, "g", "stale")
    ok(server, "pop", "ack", "g", "stale", m["handle"])
    for args in (("ack", "g", "stale", m["handle"]), ("nack", "g", "stale", m["handle"]),
                 ("invisible", "g", "stale", m["handle"], "1000")):
        result = logbus(server, "pop", *args)
        assert result.returncode == 1, args
        assert result.stderr.startswith(f"logbus: receipt handle '{m['handle']}' names no current lease (")
        assert result.stderr.count("\n") == 1
    partly = logbus(server, "pop", "ack", "g", "stale", m["handle"], "not-a-handle")
    assert partly.returncode == 1 and partly.stdout == "acked 0 of 2 messages\n"
    assert partly.stderr.splitlines()[1] == "logbus: malformed receipt handle 'not-a-handle'"
    unknown = logbus(server, "pop", "ack", "nogroup", "stale", m["handle"])
    assert (unknown.returncode, unknown.stderr) == (1, "logbus: no pop group 'nogroup' on topic 'stale'\n")
    bad = logbus(server, "pop", "receive", "g", "stale", "--invisible-ms", "0")
    assert bad.returncode == 1 and bad.stderr.startswith("logbus: invisible time must be")


def test_replay_brings_dead_letters_back_once(server: LogbusServer) -> None:
    ok(server, "topic", "create", "jobs")
    received(server, "workers", "jobs")
    received(server, "audit", "jobs")  # a second group on the topic
    publish(server, "jobs", ["poison"])
    [seen] = received(server, "audit", "jobs")
    ok(server, "pop", "ack", "audit", "jobs", seen["handle"])
    dead_letter(server, "workers", "jobs", 1)
    deadline = time.monotonic() + 10  # the dead letter is appended a moment after its last lapse
    while True:
        [row] = [g for g in json.loads(ok(server, "pop", "list", "--json")) if g["pop_group"] == "workers"]
        if row["dead_letters_waiting"] or time.monotonic() > deadline:
            break
    assert (row["ready"], row["invisible"], row["dead_lettered"], row["dead_letters_waiting"]) == (0, 0, 1, 1)

    assert replay(server, "workers", expect=1) == {"replayed": 1, "topics": {"jobs": 1}}
    [row] = [g for g in json.loads(ok(server, "pop", "list", "--json")) if g["pop_group"] == "workers"]
    assert row["dead_letters_waiting"] == 0
    [back] = received(server, "workers", "jobs")
    assert (back["value"], back["deliveries"], back["offset"]) == ("poison", 1, 1)  # a new message
    [audit] = received(server, "audit", "jobs")  # every queue reading the topic gets it
    assert audit["value"] == "poison"
    assert ok(server, "dlq", "replay", "workers") == "nothing to replay in %DLQ%workers\n"
    assert received(server, "workers", "jobs", "--invisible-ms", "100") == []  # not twice


def test_replay_of_one_topic_then_the_rest(server: LogbusServer) -> None:
    for t in ("alpha", "beta"):
        ok(server, "topic", "create", t)
        received(server, "mixed", t)
    publish(server, "alpha", ["a1"])
    publish(server, "beta", ["b1", "b2"])
    dead_letter(server, "mixed", "alpha", 1)
    dead_letter(server, "mixed", "beta", 2)
    assert replay(server, "mixed", "--topic", "beta", expect=2) == {"replayed": 2, "topics": {"beta": 2}}
    assert sorted(m["value"] for m in received(server, "mixed", "beta", "--max", "5")) == ["b1", "b2"]
    assert received(server, "mixed", "alpha") == []
    out = ok(server, "dlq", "replay", "mixed")
    assert out == "replayed 1 message of %DLQ%mixed (alpha: 1)\n"
    assert [m["value"] for m in received(server, "mixed", "alpha")] == ["a1"]
    assert ok(server, "dlq", "replay", "mixed", "--topic", "beta") == "nothing to replay in %DLQ%mixed\n"


def test_replay_errors(server: LogbusServer) -> None:
    missing = logbus(server, "dlq", "replay", "nobody")
    assert (missing.returncode, missing.stderr) == (1, "logbus: no pop group 'nobody' and no topic '%DLQ%nobody'\n")
    ok(server, "topic", "create", "quiet")
    received(server, "calm", "quiet")
    assert ok(server, "dlq", "replay", "calm") == "nothing to replay in %DLQ%calm\n"
    topic = logbus(server, "dlq", "replay", "calm", "--topic", "no-such-topic")
    assert (topic.returncode, topic.stderr) == (1, "logbus: unknown topic 'no-such-topic'\n")
    usage = logbus(server, "dlq", "replay", "calm", "--max", "0")
    assert usage.returncode == 2 and "--max" in usage.stderr
