"""The Kafka gateway's group APIs (gateway/kafka/groups.py) over the real group coordinator,
joined to kafka-python's encoders in memory, every registered version."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from logbus.core.access.doors import Doors
from logbus.core.access.auth import Access
from logbus.core.log.topic_config import TopicConfig
from logbus.core.metrics import Metrics
from logbus.core.streams.service import StreamService
from logbus.core.topics import TopicService
from logbus.gateway.kafka.caller import Caller
from logbus.gateway.kafka.errors import group_error
from logbus.core.streams.groups import Code, OffsetAndMetadata
from tests.unit.group_helpers import G, REBALANCE_MS, SESSION_MS


class GroupsStreams(StreamService):
    """The real stream service (its group methods are the coordinator's), with no log:
    topic "t" has 2 partitions."""

    def partition_count(self, topic: str) -> int | None:
        return 2 if topic == "t" else None


class GroupsDoors:
    """The broker's access check (the real one) over the user store in memory: guest may
    do anything in "/"."""

    def __init__(self) -> None:
        self.access = Access()
        self.access.seed("guest", "guest")

    authorize = Doors.authorize
    authorize_topic = Doors.authorize_topic


def gateway() -> tuple[Any, Clock]:
    from logbus.gateway.kafka import groups as kafka_groups
    from logbus.gateway.kafka.handlers import KafkaHandlers

    clock = Clock()
    streams = GroupsStreams(clock, Metrics(), topic_defaults=TopicConfig())
    doors = GroupsDoors()
    handlers = KafkaHandlers(doors, streams, TopicService(TopicConfig(), streams.forget_topic),  # type: ignore[arg-type]
                             doors.access, clock)
    kafka_groups.install(handlers)
    kafka_groups.install(handlers)  # idempotent: one coordinator per handlers
    return handlers, clock


def call(handlers: Any, request: Any, version: int) -> Any:
    """Encode ``request`` as kafka-python does, answer it, decode the answer as kafka-python does."""
    from logbus.gateway.kafka.codec import encode_response, parse_request

    request.with_header(correlation_id=9, client_id="cli")
    req = parse_request(bytes(request.encode(header=True)), handlers.supported)
    box: list[Any] = []
    res = handlers.handle(req, Caller(("127.0.0.1", 9092), "guest"))
    if isinstance(res, Deferred):
        res.addCallback(box.append)
    else:
        box.append(res)
    assert box, "no answer"
    return req.response_class.decode(encode_response(req, box[0])[4:], version=version, header=True)


@pytest.mark.parametrize("v", range(8))
def test_gateway_group_lifecycle_in_every_version(v: int) -> None:
    from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
    from kafka.protocol.consumer import (
        HeartbeatRequest,
        JoinGroupRequest,
        LeaveGroupRequest,
        OffsetCommitRequest,
        OffsetFetchRequest,
        SyncGroupRequest,
    )
    from kafka.protocol.metadata import FindCoordinatorRequest

    h, _ = gateway()
    fv = min(v, 4)
    fc = call(h, FindCoordinatorRequest(key=G, key_type=0, coordinator_keys=[G], version=fv), fv)
    found = fc.coordinators[0] if fv >= 4 else fc
    assert (found.error_code, found.node_id, found.host, found.port) == (0, 0, "127.0.0.1", 9092)

    P = JoinGroupRequest.JoinGroupRequestProtocol

    def join(member_id: str) -> Any:
        return call(h, JoinGroupRequest(
            group_id=G, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
            member_id=member_id, group_instance_id=None, protocol_type="consumer",
            protocols=[P(name="range", metadata=b"md")], version=v), v)

    r = join("")
    if v >= 4:
        assert r.error_code == group_error(Code.MEMBER_ID_REQUIRED) == 79 and r.member_id.startswith("cli-")
        r = join(r.member_id)
    assert (r.error_code, r.generation_id, r.leader) == (0, 1, r.member_id)
    assert [(m.member_id, m.metadata) for m in r.members] == [(r.member_id, b"md")]
    me = r.member_id

    sv = min(v, 5)
    A = SyncGroupRequest.SyncGroupRequestAssignment
    s = call(h, SyncGroupRequest(group_id=G, generation_id=1, member_id=me, group_instance_id=None,
                                 protocol_type="consumer", protocol_name="range",
                                 assignments=[A(member_id=me, assignment=b"plan")], version=sv), sv)
    assert (s.error_code, s.assignment) == (0, b"plan")
    hv = min(v, 4)
    hb = call(h, HeartbeatRequest(group_id=G, generation_id=7, member_id=me, group_instance_id=None,
                                  version=hv), hv)
    assert hb.error_code == group_error(Code.ILLEGAL_GENERATION) == 22

    cv = min(max(v, 2), 8)
    CT = OffsetCommitRequest.OffsetCommitRequestTopic
    CP = CT.OffsetCommitRequestPartition
    oc = call(h, OffsetCommitRequest(
        group_id=G, generation_id_or_member_epoch=1, member_id=me, group_instance_id=None,
        retention_time_ms=-1, topics=[CT(name="t", partitions=[
            CP(partition_index=1, committed_offset=42, committed_leader_epoch=-1, committed_metadata="m"),
            CP(partition_index=5, committed_offset=1, committed_leader_epoch=-1, committed_metadata=None)])],
        version=cv), cv)
    assert [(p.partition_index, p.error_code) for p in oc.topics[0].partitions] == [
        (1, 0), (5, group_error(Code.UNKNOWN_TOPIC_OR_PARTITION))]

    ov = min(max(v, 1), 7)
    FT = OffsetFetchRequest.OffsetFetchRequestTopic
    of = call(h, OffsetFetchRequest(group_id=G, topics=[FT(name="t", partition_indexes=[0, 1])],
                                    require_stable=False, version=ov), ov)
    assert [(p.partition_index, p.committed_offset, p.metadata) for p in of.topics[0].partitions] == [
        (0, -1, ""), (1, 42, "m")]
    if v == 7:  # v8: several groups, null topics = everything committed
        GR = OffsetFetchRequest.OffsetFetchRequestGroup
        of8 = call(h, OffsetFetchRequest(groups=[GR(group_id=G, topics=None)], require_stable=False,
                                         version=8), 8)
        parts = of8.groups[0].topics[0].partitions
        assert [(p.partition_index, p.committed_offset) for p in parts] == [(1, 42)]

    lv = min(v, 4)
    lg = call(h, ListGroupsRequest(states_filter=["stable"], version=lv), lv)
    assert [(g.group_id, g.protocol_type) for g in lg.groups] == [(G, "consumer")]
    dv = min(v, 5)
    dg = call(h, DescribeGroupsRequest(groups=[G, "other"], include_authorized_operations=False,
                                       version=dv), dv)
    assert [(g.group_id, g.group_state, g.protocol_data) for g in dg.groups] == [
        (G, "Stable", "range"), ("other", "Dead", "")]
    assert [(m.member_id, m.member_assignment) for m in dg.groups[0].members] == [(me, b"plan")]

    lv = min(v, 4)
    if lv < 3:
        lr = call(h, LeaveGroupRequest(group_id=G, member_id=me, version=lv), lv)
        assert lr.error_code == 0
    else:
        MI = LeaveGroupRequest.MemberIdentity
        lr = call(h, LeaveGroupRequest(group_id=G, members=[MI(member_id=me, group_instance_id=None),
                                                             MI(member_id="x", group_instance_id=None)],
                                       version=lv), lv)
        assert [(m.member_id, m.error_code) for m in lr.members] == [(me, 0), ("x", group_error(Code.UNKNOWN_MEMBER_ID))]
    assert call(h, ListGroupsRequest(states_filter=["stable"], version=4), 4).groups == []


def test_gateway_advertises_its_group_versions() -> None:
    h, _ = gateway()
    assert {k: v[2:] for k, v in h.supported.items() if k in (8, 9, 10, 11, 12, 13, 14, 15, 16)} == {
        10: (0, 4), 11: (0, 7), 14: (0, 5), 12: (0, 4), 13: (0, 4), 8: (2, 8), 9: (1, 8), 16: (0, 4), 15: (0, 5)}


def test_gateway_find_coordinator_for_unknown_key_types_and_list_filters() -> None:
    from kafka.protocol.admin import ListGroupsRequest
    from kafka.protocol.metadata import FindCoordinatorRequest

    h, _ = gateway()
    bad = call(h, FindCoordinatorRequest(key_type=2, coordinator_keys=["a", "b"], version=4), 4)
    assert [(c.key, c.error_code, c.node_id) for c in bad.coordinators] == [("a", 42, -1), ("b", 42, -1)]
    txn = call(h, FindCoordinatorRequest(key="tx", key_type=1, version=3), 3)
    assert (txn.error_code, txn.node_id) == (0, 0)
    coord = h.streams.groups
    assert coord.commit_offsets("simple", -1, "", {("t", 0): OffsetAndMetadata(1)})[0] is Code.NONE
    listed = call(h, ListGroupsRequest(states_filter=[], version=4), 4).groups
    assert [(g.group_id, g.group_state, g.protocol_type) for g in listed] == [("simple", "Empty", "")]
    assert call(h, ListGroupsRequest(states_filter=["Stable"], version=4), 4).groups == []
