"""Group administration and static membership against a real ``logbus serve``:
DescribeGroups/Metadata authorized operations (KIP-430), DeleteGroups, and
``group.instance.id`` (KIP-345), with kafka-python, aiokafka and confluent-kafka."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from tests.integration.test_kafka_admin import admin_client
from tests.kafka_members import ready_to_join
from tests.kafka_wire import Wire
from tests.serverproc import LogbusServer, ServerFactory

# Apache Kafka with no authorizer answers every operation the resource type supports
# (AuthHelper.authorizedOperations, AclEntry.supportedOperations).
GROUP_OPERATIONS = {"READ", "DESCRIBE", "DELETE"}
TOPIC_OPERATIONS = {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
CLUSTER_OPERATIONS = {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
                      "ALTER", "DESCRIBE"}
FENCED_INSTANCE_ID = 82


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    factory = ServerFactory(Path(tmp_path_factory.mktemp("kafka_groups_admin")))
    try:
        yield factory.start()
    finally:
        factory.cleanup()


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def produce(server: LogbusServer, topic: str, partitions: int, n: int) -> None:
    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks="all")
    try:
        for i in range(n):
            p.send(topic, value=b"v%d" % i, partition=i % partitions)
        p.flush()
    finally:
        p.close()


def create_topics(server: LogbusServer, topics: Any) -> None:
    admin = admin_client(server)
    try:
        admin.create_topics(topics)
    finally:
        admin.close()


def commit(server: LogbusServer, group: str, topic: str, offset: int) -> None:
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], group_id=group, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.commit({tp: OffsetAndMetadata(offset, "", -1)})
    finally:
        c.close()


def group_consumer(server: LogbusServer, group: str, topic: str, **config: Any) -> KafkaConsumer:
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], group_id=group, enable_auto_commit=False,
                      session_timeout_ms=10_000, heartbeat_interval_ms=500, **config)
    c.subscribe([topic])
    return ready_to_join(c)


def poll_until_assigned(c: KafkaConsumer, timeout: float = 20.0) -> set[TopicPartition]:
    deadline = time.monotonic() + timeout
    while not c.assignment():
        assert time.monotonic() < deadline, "no assignment"
        c.poll(timeout_ms=200)
    return set(c.assignment())


# -- authorized operations -----------------------------------------------------------------


def test_describe_groups_answers_authorized_operations(server: LogbusServer) -> None:
    """kafka-python always asks (include_authorized_operations=True) and decodes the
    bitfield into ACLOperation names: INT32_MIN there crashed it."""
    create_topics(server, ["described"])
    c = group_consumer(server, "described-group", "described")
    admin = admin_client(server)
    try:
        poll_until_assigned(c)
        (group,) = admin.describe_groups(["described-group"]).values()
        assert group["error"] is None and group["group_state"] == "Stable"
        assert set(group["authorized_operations"]) == GROUP_OPERATIONS
        assert len(group["members"]) == 1
    finally:
        admin.close()
        c.close()


def test_authorized_operations_bits_only_when_asked(server: LogbusServer) -> None:
    """The exact bits (READ 3, DELETE 6, DESCRIBE 8), and INT32_MIN (kafka-python: None)
    when DescribeGroups v3+ does not ask; aiokafka (which decodes v3 answers with its v2
    schema) still parses the answer."""
    from aiokafka.admin import AIOKafkaAdminClient

    commit(server, "aio-described", "described", 1)
    with Wire(server) as wire:
        for include, expected in ((True, {3, 6, 8}), (False, None)):
            req = DescribeGroupsRequest(groups=["aio-described"], include_authorized_operations=include)
            (group,) = wire.call(req, DescribeGroupsResponse, 5).groups
            assert group.group_state == "Empty" and group.authorized_operations == expected

    async def describe() -> Any:
        admin = AIOKafkaAdminClient(bootstrap_servers=server.addresses["kafka"])
        await admin.start()
        try:
            (response,) = await admin.describe_consumer_groups(["aio-described"],
                                                               include_authorized_operations=True)
            return response
        finally:
            await admin.close()

    (group,) = asyncio.run(describe()).groups
    assert group[:3] == (0, "aio-described", "Empty")


def test_metadata_answers_authorized_operations(server: LogbusServer) -> None:
    admin = admin_client(server)
    try:
        admin.create_topics(["meta-ops"])
        (topic,) = admin.describe_topics(["meta-ops"])
        assert set(topic["authorized_operations"]) == TOPIC_OPERATIONS
        cluster = admin.describe_cluster()
        assert set(cluster["authorized_operations"]) == CLUSTER_OPERATIONS
    finally:
        admin.close()


# -- DeleteGroups ------------------------------------------------------------------------------


def test_delete_groups(server: LogbusServer) -> None:
    admin = admin_client(server)
    admin.create_topics(["deleting"])
    produce(server, "deleting", 1, 3)
    commit(server, "idle", "deleting", 2)
    busy = group_consumer(server, "busy", "deleting")
    try:
        poll_until_assigned(busy)
        result = admin.delete_groups(["idle", "busy", "never-seen"])
        assert result == {"idle": "OK", "busy": "NonEmptyGroupError", "never-seen": "GroupIdNotFoundError"}
        assert admin.list_group_offsets("idle") == {"idle": {}}
        (idle,) = admin.describe_groups(["idle"]).values()
        assert idle["group_state"] == "Dead"
        assert "idle" not in {g[0] if isinstance(g, tuple) else g["group_id"] for g in admin.list_groups()}
        (busy_desc,) = admin.describe_groups(["busy"]).values()
        assert busy_desc["group_state"] == "Stable"
    finally:
        busy.close()
        admin.close()
    # a consumer of the deleted group starts over (no committed offset)
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], group_id="idle", enable_auto_commit=False)
    try:
        assert c.committed(TopicPartition("deleting", 0)) is None
    finally:
        c.close()


def test_librdkafka_delete_groups(server: LogbusServer) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    create_topics(server, ["rd-deleting"])
    commit(server, "rd-idle", "rd-deleting", 1)
    a = AdminClient({"bootstrap.servers": server.addresses["kafka"]})
    a.delete_consumer_groups(["rd-idle"], request_timeout=10)["rd-idle"].result(timeout=10)
    with pytest.raises(KafkaException, match="GROUP_ID_NOT_FOUND"):
        a.delete_consumer_groups(["rd-idle"], request_timeout=10)["rd-idle"].result(timeout=10)


# -- static membership (KIP-345) --------------------------------------------------------------


class StaticMember(ConsumerRebalanceListener):
    """A static group member polled by its own thread (a rebalance needs every member to
    poll), counting the rebalances it goes through."""

    def __init__(self, server: LogbusServer, group: str, instance: str) -> None:
        self.consumer = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], group_id=group,
                                      enable_auto_commit=False, session_timeout_ms=10_000,
                                      heartbeat_interval_ms=500, group_instance_id=instance)
        self.consumer.subscribe(["static"], listener=self)
        ready_to_join(self.consumer)  # tests/kafka_members.py: kafka-python's rejoin race
        self.assigned: set[int] = set()
        self.rebalances = 0
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=instance, daemon=True)
        self._thread.start()

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.rebalances += 1

    def on_partitions_assigned(self, assigned: Any) -> None:
        pass

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.consumer.poll(timeout_ms=100)
                self.assigned = {tp.partition for tp in self.consumer.assignment()}
        except Exception as e:  # noqa: BLE001  (reported by stop())
            self.error = e

    def stop(self) -> None:
        """Stop polling and close: a static member sends no LeaveGroup."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "member did not stop"
        self.consumer.close()
        assert self.error is None, f"member failed: {self.error!r}"


def test_static_member_rejoins_without_rebalancing_the_others(server: LogbusServer) -> None:
    """A static member that goes away without LeaveGroup (kafka-python's static members
    never send one) and comes back with the same group.instance.id within its session
    timeout gets its partitions back; the other member is not rebalanced."""
    admin = admin_client(server)
    admin.create_topics({"static": {"num_partitions": 2}})
    group = "static-group"
    a = StaticMember(server, group, "a")
    b = StaticMember(server, group, "b")
    a2 = None
    try:
        wait_for(lambda: len(a.assigned) == 1 and len(b.assigned) == 1, 30,
                 "two static members with a partition each")
        a_parts, b_parts = a.assigned, b.assigned
        (before,) = admin.describe_groups([group]).values()
        a_member = next(m["member_id"] for m in before["members"] if m["group_instance_id"] == "a")
        b_rebalances = b.rebalances

        a.stop()
        a2 = StaticMember(server, group, "a")
        wait_for(lambda: a2 is not None and a2.assigned == a_parts, 20, "the restarted member's partitions")
        time.sleep(2)  # b heartbeats every 0.5 s: a rebalance would have reached it now
        assert b.assigned == b_parts and b.rebalances == b_rebalances

        (after,) = admin.describe_groups([group]).values()
        assert after["group_state"] == "Stable"
        assert sorted(m["group_instance_id"] for m in after["members"]) == ["a", "b"]
        new_member = next(m["member_id"] for m in after["members"] if m["group_instance_id"] == "a")
        assert new_member != a_member
    finally:
        for m in (a, a2, b):
            if m is not None:
                m.stop()
        admin.close()


def _join(wire: Wire, group: str, member_id: str, instance: str | None) -> Any:
    P = JoinGroupRequest.JoinGroupRequestProtocol
    req = JoinGroupRequest(group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                           member_id=member_id, group_instance_id=instance, protocol_type="consumer",
                           protocols=[P(name="range", metadata=b"m")])
    return wire.call(req, JoinGroupResponse, 5)


def _sync(wire: Wire, group: str, generation: int, member_id: str, instance: str | None,
          assignments: dict[str, bytes]) -> Any:
    A = SyncGroupRequest.SyncGroupRequestAssignment
    req = SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id,
                           group_instance_id=instance,
                           assignments=[A(member_id=m, assignment=a) for m, a in assignments.items()])
    return wire.call(req, SyncGroupResponse, 3)


def test_fenced_instance_id_and_leave_by_instance(server: LogbusServer) -> None:
    """The wire details: a static member gets its id at once (no MEMBER_ID_REQUIRED); the
    same instance joining again takes over with a new member id, keeping the generation and
    the assignment; the old member id is then FENCED_INSTANCE_ID; LeaveGroup v3 removes a
    member by its instance id."""
    with Wire(server) as wire:
        _fenced_and_leave(server, wire, "fenced")


def _fenced_and_leave(server: LogbusServer, wire: Wire, group: str) -> None:
    first = _join(wire, group, "", "inst")
    assert first.error_code == 0 and first.member_id.startswith("inst-")
    assert first.leader == first.member_id
    assert [(m.member_id, m.group_instance_id) for m in first.members] == [(first.member_id, "inst")]
    synced = _sync(wire, group, first.generation_id, first.member_id, "inst", {first.member_id: b"mine"})
    assert synced.error_code == 0 and synced.assignment == b"mine"

    second = _join(wire, group, "", "inst")
    assert second.error_code == 0 and second.member_id != first.member_id
    assert second.generation_id == first.generation_id
    again = _sync(wire, group, second.generation_id, second.member_id, "inst", {})
    assert again.error_code == 0 and again.assignment == b"mine"

    hb = HeartbeatRequest(group_id=group, generation_id=first.generation_id, member_id=first.member_id,
                          group_instance_id="inst")
    assert wire.call(hb, HeartbeatResponse, 3).error_code == FENCED_INSTANCE_ID
    assert _join(wire, group, first.member_id, "inst").error_code == FENCED_INSTANCE_ID
    hb = HeartbeatRequest(group_id=group, generation_id=second.generation_id, member_id=second.member_id,
                          group_instance_id="inst")
    assert wire.call(hb, HeartbeatResponse, 3).error_code == 0

    M = LeaveGroupRequest.MemberIdentity
    leave = LeaveGroupRequest(group_id=group, members=[M(member_id="", group_instance_id="inst"),
                                                       M(member_id="", group_instance_id="nobody")])
    left = wire.call(leave, LeaveGroupResponse, 3)
    assert [(m.group_instance_id, m.error_code) for m in left.members] == [("inst", 0), ("nobody", 25)]
    admin = admin_client(server)
    try:
        (described,) = admin.describe_groups([group]).values()
        assert described["group_state"] in ("Empty", "Dead") and described["members"] == []
    finally:
        admin.close()
