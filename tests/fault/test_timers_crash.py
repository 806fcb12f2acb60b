"""Delayed and retrying messages survive a kill -9: their timers are in RocksDB, written
with the tick that scheduled them (before the publish was answered), and released once
when due after the restart (docs/consumption.md)."""

from __future__ import annotations

import time
from typing import Any, Iterator

import pytest

from tests.integration.mgmt import Mgmt, Reply
from tests.serverproc import LogbusServer, ServerFactory


@pytest.fixture
def servers(tmp_path: Any) -> Iterator[ServerFactory]:
    factory = ServerFactory(tmp_path)
    yield factory
    factory.cleanup()


def call(server: LogbusServer, path: str, body: Any) -> Reply:
    reply = Mgmt(server).call("POST", path, body)
    assert reply.status in (200, 201, 204), reply
    return reply


def receive(server: LogbusServer, invisible_ms: int = 60_000) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = call(server, "/api/pop/g/t/receive",
                                          {"max": 10, "invisible_ms": invisible_ms}).json()["messages"]
    return messages


def test_delayed_and_retrying_messages_survive_kill_9(servers: ServerFactory) -> None:
    server = servers.start(args=["--pop-retry-backoff", "1500ms"])
    call(server, "/api/topics", {"name": "t"})
    assert receive(server) == []  # the group starts here
    call(server, "/api/topics/t/messages", {"messages": [{"value": "retry"}]})
    [first] = receive(server, invisible_ms=1)  # lapses at once: scheduled for 1.5 s
    assert first["deliveries"] == 1
    call(server, "/api/topics/t/messages", {"messages": [{"value": "delayed", "delay_ms": 1500}]})
    time.sleep(0.4)  # the lapse is swept (every 100 ms) and its timer written
    assert receive(server) == []
    assert server.kill() == -9
    server.restart(same_ports=True)
    got: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        for m in receive(server):
            assert m["value"] not in got, "released twice"
            got[m["value"]] = m
        time.sleep(0.05)
    assert set(got) == {"retry", "delayed"}
    assert got["retry"]["deliveries"] == 2 and got["retry"]["offset"] == first["offset"]
    assert got["delayed"]["deliveries"] == 1
    time.sleep(0.3)
    assert receive(server) == []  # each released once


def test_a_message_staged_before_its_due_time_is_not_early_after_kill_9(servers: ServerFactory) -> None:
    """Timers are released into queues ahead of their due time (staged entries, journaled
    with the due time): killed then, the broker shows the message neither early nor
    twice after the restart, and on time."""
    server = servers.start()
    call(server, "/api/topics", {"name": "t"})
    assert receive(server) == []  # the group starts here
    sent = time.time()
    call(server, "/api/topics/t/messages", {"messages": [{"value": "later", "delay_ms": 3000}]})
    due = sent + 3.0
    time.sleep(1.6)  # within the release lead (2 s): staged in the group's queue by now
    assert receive(server) == []
    assert server.kill() == -9
    server.restart(same_ports=True)
    got: list[dict[str, Any]] = []
    while time.time() < due + 5 and not got:
        got = receive(server)
        answered = time.time()  # (the request may have left before due, and been served after it)
        if got:
            assert answered >= due - 0.05, "visible before its due time"
            break
        time.sleep(0.02)
    assert [m["value"] for m in got] == ["later"] and got[0]["deliveries"] == 1
    time.sleep(0.3)
    assert receive(server) == []  # once
