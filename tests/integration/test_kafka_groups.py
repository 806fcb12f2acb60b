"""Consumer groups against a real ``logbus serve`` with kafka-python: three consumers
share a 6-partition topic, one leaves, one is killed (SIGKILL, no LeaveGroup), the
survivor gets every partition and every message is consumed, with duplicates only
above the killed member's last commit; committed offsets survive a broker restart
(and a kill -9). Then aiokafka's and librdkafka's consumer groups, which negotiate
other versions of the same APIs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import CommitFailedError, RebalanceInProgressError
from kafka.structs import OffsetAndMetadata

from tests.kafka_members import ready_to_join

TOPIC = "rebalance"
PARTITIONS = 6
GROUP = "g-rebalance"
# short timeouts keep the test quick: a killed member is noticed after SESSION_MS
SESSION_MS = 2000
CONSUMER_CONFIG: dict[str, Any] = {
    "group_id": GROUP,
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
    "session_timeout_ms": SESSION_MS,
    "heartbeat_interval_ms": 200,
    "max_poll_interval_ms": 10000,  # also the rebalance timeout
    "request_timeout_ms": 15000,
    "metadata_max_age_ms": 1000,
    "fetch_max_wait_ms": 100,
    "retry_backoff_ms": 50,
}

# A consumer in its own process, so it can be killed -9. It reports as JSON lines:
# its assignment, every record it hands to the application, and every commit once the
# broker acknowledged it (commit after each batch, synchronously).
KILLABLE = r"""
import json, sys
from kafka import KafkaConsumer
config, topic, out = json.loads(sys.argv[1]), sys.argv[2], open(sys.argv[3], "a", buffering=1)
c = KafkaConsumer(topic, **config)
assert c.partitions_for_topic(topic)  # before the first poll: tests/kafka_members.py says why
while True:
    batch = c.poll(timeout_ms=100)
    out.write(json.dumps({"assigned": sorted(tp.partition for tp in c.assignment())}) + "\n")
    for tp, msgs in batch.items():
        for m in msgs:
            out.write(json.dumps({"rec": [m.partition, m.offset, m.value.decode()]}) + "\n")
    if batch:
        c.commit()
        out.write(json.dumps({"commit": {tp.partition: msgs[-1].offset + 1 for tp, msgs in batch.items()}}) + "\n")
"""


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def produce(server: Any, topic: str, values: list[str]) -> None:
    p = KafkaProducer(
        bootstrap_servers=server.addresses["kafka"], acks="all", linger_ms=5, enable_idempotence=False
    )
    try:
        futures = [p.send(topic, key=v.encode(), value=v.encode()) for v in values]
        p.flush()
        for f in futures:
            f.get(timeout=10)
    finally:
        p.close()


class ThreadConsumer:
    """A group member polled by its own thread (a rebalance needs every member to poll)."""

    def __init__(self, server: Any, name: str) -> None:
        self.name = name
        self.consumer = ready_to_join(KafkaConsumer(TOPIC, bootstrap_servers=server.addresses["kafka"],
                                                    client_id=name, **CONSUMER_CONFIG))
        self.records: list[tuple[int, int, str]] = []
        self.uncommitted: set[tuple[int, int]] = set()  # a rebalance beat the commit
        self.assigned: set[int] = set()
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self.consumer.poll(timeout_ms=100)
                self.assigned = {tp.partition for tp in self.consumer.assignment()}
                got = [(m.partition, m.offset, m.value.decode()) for msgs in batch.values() for m in msgs]
                self.records += got
                if got:
                    try:
                        self.consumer.commit()
                    except (CommitFailedError, RebalanceInProgressError):
                        self.uncommitted.update((p, off) for p, off, _ in got)
        except Exception as e:  # noqa: BLE001  (reported by stop())
            self.error = e

    def stop(self) -> None:
        """Stop polling and close (commits nothing more, sends LeaveGroup)."""
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), f"{self.name} did not stop"
        self.consumer.close()
        assert self.error is None, f"{self.name} failed: {self.error!r}"


class ProcessConsumer:
    def __init__(self, server: Any, name: str, out: Path) -> None:
        self.name = name
        self.out = out
        config = dict(CONSUMER_CONFIG, bootstrap_servers=server.addresses["kafka"], client_id=name)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", KILLABLE, json.dumps(config), TOPIC, str(out)],
            stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )

    def events(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        lines = self.out.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    @property
    def assigned(self) -> set[int]:
        last = [e["assigned"] for e in self.events() if "assigned" in e]
        return set(last[-1]) if last else set()

    @property
    def records(self) -> list[tuple[int, int, str]]:
        return [tuple(e["rec"]) for e in self.events() if "rec" in e]  # type: ignore[misc]

    def committed(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for e in self.events():
            for p, off in e.get("commit", {}).items():
                out[int(p)] = off
        return out

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


def test_three_consumers_rebalance_on_leave_and_kill(logbus_server: Any, tmp_path: Path) -> None:
    server = logbus_server(args=["--default-partitions", str(PARTITIONS)])
    produce(server, TOPIC, [f"a{i}" for i in range(60)])  # creates the topic

    leaver = ThreadConsumer(server, "leaver")
    victim = ProcessConsumer(server, "victim", tmp_path / "victim.jsonl")
    survivor = ThreadConsumer(server, "survivor")
    members: list[Any] = [leaver, victim, survivor]
    try:
        # all three share the topic: every partition owned by exactly one member
        def balanced() -> bool:
            sets = [m.assigned for m in members]
            return all(sets) and sum(map(len, sets)) == PARTITIONS and set().union(*sets) == set(range(PARTITIONS))

        wait_for(balanced, 30, "three members to share the partitions")
        produce(server, TOPIC, [f"b{i}" for i in range(240)])
        wait_for(lambda: len({r[2] for m in members for r in m.records}) == 300, 20, "300 records consumed")
        owners = {m.name: m.assigned for m in members}
        for m in members:  # the second batch went to the partitions' owners only
            assert {p for p, _, v in m.records if v.startswith("b")} <= m.assigned, owners

        leaver.stop()  # LeaveGroup: the others rebalance at once
        wait_for(lambda: victim.assigned | survivor.assigned == set(range(PARTITIONS))
                 and not victim.assigned & survivor.assigned, 20, "two members to share the partitions")
        produce(server, TOPIC, [f"c{i}" for i in range(120)])
        wait_for(lambda: len({r[2] for m in members for r in m.records}) == 420, 20, "420 records consumed")

        victim_records_at_kill = len(victim.records)
        victim.kill()  # no LeaveGroup: the survivor takes over once the session times out
        produce(server, TOPIC, [f"d{i}" for i in range(120)])
        wait_for(lambda: survivor.assigned == set(range(PARTITIONS)), 3 * SESSION_MS / 1000 + 15,
                 "the survivor to own every partition")
        wait_for(lambda: len({r[2] for m in members for r in m.records}) == 540, 20, "540 records consumed")
        assert len(victim.records) == victim_records_at_kill
    finally:
        survivor.stop()
        if victim.proc.poll() is None:
            victim.kill()

    # every message consumed; a message seen twice must be one whose commit never
    # happened: above the victim's last commit in its partition (consumed, then the
    # victim was killed), or in a batch whose commit lost a race with a rebalance
    seen: dict[tuple[int, int], list[str]] = {}
    for m in members:
        for p, off, value in m.records:
            seen.setdefault((p, off), []).append(value)
    assert len({v for vals in seen.values() for v in vals}) == 540
    assert sum(len(vals) for vals in seen.values()) >= 540
    committed = victim.committed()
    uncommitted = {(p, off) for p, off, _ in victim.records if off >= committed.get(p, 0)}
    uncommitted |= leaver.uncommitted | survivor.uncommitted
    for (p, off), vals in seen.items():
        assert len(set(vals)) == 1, (p, off, vals)  # one record per offset
        if len(vals) > 1:
            assert (p, off) in uncommitted, (p, off, vals)
    assert survivor.error is None and leaver.error is None


def test_committed_offsets_survive_restart(logbus_server: Any) -> None:
    server = logbus_server()
    topic, group = "durable-offsets", "g-durable"
    produce(server, topic, [f"v{i}" for i in range(100)])
    tp = TopicPartition(topic, 0)

    def consumer() -> KafkaConsumer:
        return ready_to_join(KafkaConsumer(topic, bootstrap_servers=server.addresses["kafka"], consumer_timeout_ms=2000,
                                           **dict(CONSUMER_CONFIG, group_id=group)))

    c = consumer()
    try:
        got = [m.value for m in c]
        assert got == [f"v{i}".encode() for i in range(100)]
        c.commit({tp: OffsetAndMetadata(70, "after seventy", -1)})
        assert c.committed(tp) == 70
    finally:
        c.close()

    assert server.stop() == 0
    server.restart()
    admin = KafkaAdminClient(bootstrap_servers=server.addresses["kafka"])
    try:  # the admin view after the restart: the group is Empty, its commit is there
        assert [(g["group_id"], g["group_state"]) for g in admin.list_groups()] == [(group, "Empty")]
        assert admin.list_group_offsets({group: None}) == {group: {tp: OffsetAndMetadata(70, "after seventy", -1)}}
    finally:
        admin.close()
    produce(server, topic, [f"w{i}" for i in range(10)])
    c = consumer()
    try:
        assert c.committed(tp) == 70
        got = [m.value for m in c]  # resumes from the commit, not from the start
        assert got == [f"v{i}".encode() for i in range(70, 100)] + [f"w{i}".encode() for i in range(10)]
        c.commit()
    finally:
        c.close()
    server.kill()  # commits are synced: even a crash keeps them
    server.restart()
    c = consumer()
    try:
        assert c.committed(tp) == 110
        assert list(c) == []
    finally:
        c.close()


def test_aiokafka_consumer_group_commits_and_resumes(logbus_server: Any) -> None:
    """aiokafka speaks older versions (JoinGroup v5, SyncGroup v3, OffsetCommit v3, ...)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer

    server = logbus_server(args=["--default-partitions", "2"])
    topic, group = "aio", "g-aio"
    produce(server, topic, [f"x{i}" for i in range(40)])

    async def consume(expected: int) -> list[bytes]:
        c = AIOKafkaConsumer(topic, bootstrap_servers=server.addresses["kafka"], group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=SESSION_MS, heartbeat_interval_ms=200)
        await c.start()
        try:
            got: list[bytes] = []
            while len(got) < expected:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=200), 20)
                got += [m.value for msgs in batch.values() for m in msgs]
            await c.commit()
            await asyncio.sleep(0.3)
            extra = await c.getmany(timeout_ms=300)
            assert not extra
            return got
        finally:
            await c.stop()

    first = asyncio.run(consume(40))
    assert sorted(first) == sorted(f"x{i}".encode() for i in range(40))
    produce(server, topic, [f"y{i}" for i in range(10)])
    second = asyncio.run(consume(10))  # resumes from the group's commits
    assert sorted(second) == sorted(f"y{i}".encode() for i in range(10))


def test_librdkafka_consumer_group_shares_then_takes_over(logbus_server: Any) -> None:
    """librdkafka (confluent-kafka) negotiates its own versions (JoinGroup v7, OffsetCommit v8, ...)."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    server = logbus_server(args=["--default-partitions", "4"])
    topic = "rdk"
    admin = KafkaAdminClient(bootstrap_servers=server.addresses["kafka"])
    admin.create_topics([NewTopic(topic, 4, 1)])
    admin.close()

    def consumer() -> Consumer:
        c = Consumer({"bootstrap.servers": server.addresses["kafka"], "group.id": "g-rdk",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 200, "log_level": 3})
        c.subscribe([topic])
        return c

    def drain(cs: list[Consumer], n: int) -> list[list[tuple[int, str]]]:
        got: list[list[tuple[int, str]]] = [[] for _ in cs]
        deadline = time.monotonic() + 20
        while sum(map(len, got)) < n and time.monotonic() < deadline:
            for i, c in enumerate(cs):
                m = c.poll(0.1)
                if m is not None and m.error() is None:
                    got[i].append((m.partition(), m.value().decode()))
                    c.commit(m, asynchronous=False)
        return got

    a, b = consumer(), consumer()
    try:
        # both members hold partitions before anything is produced, so no record is read
        # by a member that then loses its partition in a rebalance
        deadline = time.monotonic() + 20
        while not (a.assignment() and b.assignment()) and time.monotonic() < deadline:
            for c in (a, b):
                m = c.poll(0.1)
                assert m is None or m.error() is not None, "a record before anything was produced"
        produce(server, topic, [f"r{i}" for i in range(100)])
        got = drain([a, b], 100)
        assert sorted(v for g in got for _, v in g) == sorted(f"r{i}" for i in range(100))
        parts = [{tp.partition for tp in c.assignment()} for c in (a, b)]
        assert parts[0] and parts[1] and not parts[0] & parts[1] and parts[0] | parts[1] == set(range(4))
        assert all({p for p, _ in g} <= owned for g, owned in zip(got, parts))
        a.close()  # LeaveGroup: b takes every partition, from the committed offsets
        produce(server, topic, [f"s{i}" for i in range(40)])
        rest = drain([b], 40)[0]
        assert sorted(v for _, v in rest) == sorted(f"s{i}" for i in range(40))
        assert {tp.partition for tp in b.assignment()} == set(range(4))
        committed = b.committed([CTP(topic, p) for p in range(4)], timeout=10)
        assert sum(tp.offset for tp in committed) == 140
    finally:
        for c in (a, b):
            try:
                c.close()
            except RuntimeError:  # already closed
                pass
