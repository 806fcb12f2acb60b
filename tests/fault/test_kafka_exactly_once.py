"""Exactly once through Kafka transactions with the broker killed (kill -9) several times:
two consume-transform-produce workers (kafka-python, each a read_committed consumer in one
group and a transactional producer that sends its consumed offsets with each transaction,
KIP-447's group metadata included) turn every input record into one output record; every
fourth transaction is aborted after its outputs were appended, and its inputs processed
again. A worker that meets a failure aborts if it can, throws both clients away and
starts again from the group's committed offsets, as Kafka's documentation tells a Kafka
application to. The clients run in a process of their own (tests/fault/eo_clients.py);
this test follows the group's progress over the HTTP API and kills the broker mid-flow.

The checker counts: every input appears exactly once in the read_committed output, the
aborted transactions' outputs are in the log and never read committed, and the group's
committed offsets are the end of the input."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

from tests.fault.eo_clients import INPUTS, TXN_TIMEOUT_MS
from tests.integration.mgmt import basic
from tests.serverproc import REPO_ROOT, LogbusServer, logbus_env

PARTITIONS = 2
KILLS = 3
DEADLINE_S = 240.0


def progress(server: LogbusServer) -> tuple[int, int] | None:
    """(committed offsets, end offsets) of the group on the input, summed; None while the
    broker does not answer (http.client closes a refused socket itself)."""
    host, port = server.host_port("http")
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("GET", "/api/consumer-groups/eo", headers={"Authorization": basic("guest", "guest")})
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            return None
    except OSError:
        return None
    finally:
        conn.close()
    parts = [p for p in json.loads(body)["partitions"] if p["topic"] == "eo-in"]
    return sum(p["committed_offset"] or 0 for p in parts), sum(p["log_end_offset"] for p in parts)


def no_open_transaction(addr: str, report: str) -> None:
    """Wait until no transaction is open on the output (its last stable offset is its end on
    every partition): one a kill left open, whose worker did not come back before the inputs
    were done, holds read_committed readers below it until the broker aborts it, after
    its transaction.timeout.ms (eo_clients.TXN_TIMEOUT_MS), as Kafka does."""
    tps = [TopicPartition("eo-out", p) for p in range(PARTITIONS)]
    committed = KafkaConsumer(bootstrap_servers=addr, isolation_level="read_committed")
    uncommitted = KafkaConsumer(bootstrap_servers=addr, isolation_level="read_uncommitted")
    try:
        deadline = time.monotonic() + TXN_TIMEOUT_MS / 1000 + 60
        while committed.end_offsets(tps) != uncommitted.end_offsets(tps):
            assert time.monotonic() < deadline, f"a transaction stays open on eo-out; {report}"
            time.sleep(0.2)
    finally:
        committed.close()
        uncommitted.close()


def read_all(addr: str, topic: str, isolation: str) -> list[bytes]:
    c = KafkaConsumer(bootstrap_servers=addr, enable_auto_commit=False, isolation_level=isolation,
                      consumer_timeout_ms=3000)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)
        out: list[bytes] = []
        while any(c.position(tp) < ends[tp] for tp in tps):
            got = c.poll(timeout_ms=3000)
            if not got:
                break
            out += [m.value for ms in got.values() for m in ms]
        return out
    finally:
        c.close()


def test_every_input_once_in_the_output_through_kill_9s(logbus_server: Callable[..., LogbusServer],
                                                        tmp_path: Path) -> None:
    server = logbus_server()
    admin = KafkaAdminClient(bootstrap_servers=server.addresses["kafka"])
    try:
        admin.create_topics([NewTopic("eo-in", PARTITIONS, 1), NewTopic("eo-out", PARTITIONS, 1)])
    finally:
        admin.close()
    work = tmp_path / "clients"
    work.mkdir()
    clients = subprocess.Popen([sys.executable, "-m", "tests.fault.eo_clients", server.addresses["kafka"], str(work)],
                               cwd=REPO_ROOT, env=logbus_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    deadline = time.monotonic() + DEADLINE_S
    kills = done = last = inputs = 0
    try:
        while time.monotonic() < deadline and clients.poll() is None:
            seen = progress(server)
            if seen is not None:
                done, inputs = seen
            if kills < KILLS:
                # each kill falls mid-flow: after progress since the last start, inputs still coming
                if done >= last + INPUTS // (2 * (KILLS + 1)) and not os.path.exists(work / "fed"):
                    server.kill()
                    server.restart(same_ports=True)
                    kills += 1
                    last = done
            elif os.path.exists(work / "fed") and seen is not None and done >= inputs:
                break
            time.sleep(0.2)
    finally:
        (work / "stop").touch()
        try:
            out, _ = clients.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            clients.kill()
            out, _ = clients.communicate()
    summary = json.loads(out) if out.strip() else {}
    report = f"committed {done} of {inputs} inputs, kills {kills}; clients: {summary}"
    assert kills == KILLS and summary.get("sent") == INPUTS and done == inputs, report

    addr = server.addresses["kafka"]
    no_open_transaction(addr, report)
    fed = read_all(addr, "eo-in", "read_committed")
    assert len(fed) == inputs and {v.split(b":")[0] for v in fed} == {b"%d" % i for i in range(INPUTS)}, report
    committed = read_all(addr, "eo-out", "read_committed")
    counts = Counter(committed)
    assert set(counts) == {b"out:" + v for v in fed}, report  # nothing missing, nothing made up
    assert max(counts.values()) == 1 and len(committed) == len(fed), report  # nothing twice
    everything = read_all(addr, "eo-out", "read_uncommitted")
    # the aborted transactions' outputs are in the log, and were never read committed
    assert len(everything) > len(committed) and set(everything) == set(committed), report
