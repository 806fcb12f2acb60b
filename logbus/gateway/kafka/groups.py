"""Kafka the group coordinator: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups.

Each handler translates a decoded request into a call on the ``Streams`` port's group
methods (``join_group``, ``commit_offsets``, ...: the stream service's group coordinator,
core/streams/groups.py, one per broker, shared by every connection) and the result into
the response of the request's version. This broker is the coordinator of every group.

Versions (what kafka-python 3.0.12 and aiokafka send fall inside each range):

===============  ========  ==============================================================
API              versions  notes
===============  ========  ==============================================================
FindCoordinator  0-4       v4: batched ``coordinator_keys``
JoinGroup        0-7       v4+: first join answered MEMBER_ID_REQUIRED with the new id;
                           v5+: ``group_instance_id`` (static members, KIP-345)
SyncGroup        0-5       v5: protocol type/name checked and returned
Heartbeat        0-4
LeaveGroup       0-4       v3+: a batch of members, one error per member
OffsetCommit     2-8       (0-1 are gone from Kafka 4.0 and kafka-python)
OffsetFetch      1-8       v2+: ``topics`` null = every committed partition; v8: groups
ListGroups       0-4       v4: states filter
DescribeGroups   0-5       v3+: authorized operations when asked (operations.py)
DeleteGroups     0-2       an Empty group and its committed offsets
===============  ========  ==============================================================
"""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from ...core.types import Code, JoinGroup, JoinResult, OffsetAndMetadata, SyncResult
from .caller import Caller
from .codec import Request
from .errors import GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, group_error
from .handlers import KafkaHandlers
from .operations import DELETE, DESCRIBE, READ, authorized

log = logging.getLogger(__name__)

NONE = 0
INVALID_REQUEST = 42
UNKNOWN_TOPIC_OR_PARTITION = 3
UNSTABLE_OFFSET_COMMIT = 88
NO_OFFSET = -1
NO_METADATA = ""  # what Kafka answers (and stores for a null) when there is none
KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1
GROUP_TYPE = "classic"

def install(handlers: KafkaHandlers) -> None:
    """Register this module's APIs with ``handlers``."""
    api = _GroupApi(handlers)
    reg = handlers.register
    reg(FindCoordinatorRequest, FindCoordinatorResponse, 0, 4, api.find_coordinator)
    reg(JoinGroupRequest, JoinGroupResponse, 0, 7, api.join_group)
    reg(SyncGroupRequest, SyncGroupResponse, 0, 5, api.sync_group)
    reg(HeartbeatRequest, HeartbeatResponse, 0, 4, api.heartbeat)
    reg(LeaveGroupRequest, LeaveGroupResponse, 0, 4, api.leave_group)
    reg(OffsetCommitRequest, OffsetCommitResponse, 2, 8, api.offset_commit)
    reg(OffsetFetchRequest, OffsetFetchResponse, 1, 8, api.offset_fetch)
    reg(ListGroupsRequest, ListGroupsResponse, 0, 4, api.list_groups)
    reg(DescribeGroupsRequest, DescribeGroupsResponse, 0, 5, api.describe_groups)
    reg(DeleteGroupsRequest, DeleteGroupsResponse, 0, 2, api.delete_groups)


class _GroupApi:
    def __init__(self, handlers: KafkaHandlers) -> None:
        self.handlers = handlers
        self.streams = handlers.streams

    def _may(self, caller: Caller, op: int, group: str) -> bool:
        """May the caller's user do ``op`` on ``group`` (access.py: read on queue ``group``)?"""
        return self.handlers.access.group(caller.user, op, group)

    # -- FindCoordinator -----------------------------------------------------------------

    def find_coordinator(self, req: Request, caller: Caller) -> Any:
        body = req.body
        host, port = caller.advertised
        node = self.handlers.node_id
        known = body.key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION)
        if known:  # Kafka creates its internal topic for these coordinators now
            self.streams.coordinator_asked("__consumer_offsets" if body.key_type == KEY_TYPE_GROUP
                                           else "__transaction_state")

        def answer(key: str) -> tuple[int, str | None]:
            if not known:
                return INVALID_REQUEST, f"unknown key type {body.key_type}"
            if body.key_type == KEY_TYPE_GROUP and not self._may(caller, DESCRIBE, key):
                return GROUP_AUTHORIZATION_FAILED, f"not authorized to describe group {key!r}"
            return NONE, None

        if req.api_version < 4:
            code, message = answer(body.key)
            ok = code == NONE
            return FindCoordinatorResponse(
                throttle_time_ms=0, error_code=code, error_message=message,
                node_id=node if ok else -1, host=host if ok else "", port=port if ok else -1,
            )
        C = FindCoordinatorResponse.Coordinator
        coordinators = []
        for key in body.coordinator_keys:
            code, message = answer(key)
            ok = code == NONE
            coordinators.append(C(key=key, node_id=node if ok else -1, host=host if ok else "",
                                  port=port if ok else -1, error_code=code, error_message=message))
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)

    # -- JoinGroup / SyncGroup -----------------------------------------------------------

    def join_group(self, req: Request, caller: Caller) -> Any:
        body, v = req.body, req.api_version
        if not self._may(caller, READ, body.group_id):
            return JoinGroupResponse(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                                     protocol_type=None, protocol_name=None if v >= 7 else "", leader="",
                                     skip_assignment=False, member_id=body.member_id or "", members=[])
        join = JoinGroup(
            group_id=body.group_id,
            member_id=body.member_id or "",
            client_id=req.client_id or "",
            session_timeout_ms=body.session_timeout_ms,
            rebalance_timeout_ms=body.rebalance_timeout_ms if v >= 1 else -1,
            protocol_type=body.protocol_type,
            protocols=tuple((p.name, bytes(p.metadata)) for p in body.protocols),
            require_known_member_id=v >= 4,
            group_instance_id=body.group_instance_id if v >= 5 else None,
        )
        M = JoinGroupResponse.JoinGroupResponseMember

        def build(r: JoinResult) -> Any:
            instances = dict(r.instance_ids)
            if r.error is not Code.NONE and r.error is not Code.MEMBER_ID_REQUIRED:
                log.debug("JoinGroup %s by %s: %s", join.group_id, join.member_id, r.error.name)
            return JoinGroupResponse(
                throttle_time_ms=0,
                error_code=group_error(r.error),
                generation_id=r.generation_id,
                protocol_type=r.protocol_type,
                protocol_name=r.protocol_name if r.protocol_name is not None or v >= 7 else "",
                leader=r.leader,
                skip_assignment=False,
                member_id=r.member_id,
                members=[M(member_id=mid, group_instance_id=instances.get(mid), metadata=md)
                         for mid, md in r.members],
            )

        return self.streams.join_group(join).addCallback(build)

    def sync_group(self, req: Request, caller: Caller) -> Any:
        body, v = req.body, req.api_version
        if not self._may(caller, READ, body.group_id):
            return SyncGroupResponse(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED, protocol_type=None,
                                     protocol_name=None, assignment=b"")
        assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
        d = self.streams.sync_group(
            body.group_id, body.generation_id, body.member_id, assignments,
            protocol_type=body.protocol_type if v >= 5 else None,
            protocol_name=body.protocol_name if v >= 5 else None,
            instance_id=body.group_instance_id if v >= 3 else None,
        )

        def build(r: SyncResult) -> Any:
            return SyncGroupResponse(
                throttle_time_ms=0, error_code=group_error(r.error), protocol_type=r.protocol_type,
                protocol_name=r.protocol_name, assignment=r.assignment,
            )

        return d.addCallback(build)

    # -- Heartbeat / LeaveGroup ----------------------------------------------------------

    def heartbeat(self, req: Request, caller: Caller) -> Any:
        body = req.body
        if not self._may(caller, READ, body.group_id):
            return HeartbeatResponse(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED)
        instance = body.group_instance_id if req.api_version >= 3 else None
        code = self.streams.heartbeat(body.group_id, body.generation_id, body.member_id, instance)
        return HeartbeatResponse(throttle_time_ms=0, error_code=group_error(code))

    def leave_group(self, req: Request, caller: Caller) -> Any:
        body = req.body
        if not self._may(caller, READ, body.group_id):
            return LeaveGroupResponse(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED, members=[])
        if req.api_version < 3:
            (code,) = self.streams.leave_group(body.group_id, [body.member_id])
            return LeaveGroupResponse(throttle_time_ms=0, error_code=group_error(code))
        identities = list(body.members)
        codes = self.streams.leave_group(body.group_id, [m.member_id for m in identities],
                                 [m.group_instance_id for m in identities])
        R = LeaveGroupResponse.MemberResponse
        members = [
            R(member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=group_error(code))
            for m, code in zip(identities, codes)
        ]
        return LeaveGroupResponse(throttle_time_ms=0, error_code=NONE, members=members)

    # -- OffsetCommit / OffsetFetch ------------------------------------------------------

    def _partition_exists(self, topic: str, partition: int) -> bool:
        count = self.streams.partition_count(topic)
        return count is not None and 0 <= partition < count

    def offset_commit(self, req: Request, caller: Caller) -> Any:
        body = req.body
        group_ok = self._may(caller, READ, body.group_id)
        refused = {t.name for t in body.topics if not self.handlers.access.topic(caller.user, READ, t.name)}
        offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        for t in body.topics:
            for p in t.partitions:
                if group_ok and t.name not in refused and self._partition_exists(t.name, p.partition_index):
                    offsets[(t.name, p.partition_index)] = OffsetAndMetadata(
                        p.committed_offset,
                        p.committed_metadata if p.committed_metadata is not None else NO_METADATA,
                        p.committed_leader_epoch,
                    )
        code, codes = self.streams.commit_offsets(
            body.group_id, body.generation_id_or_member_epoch, body.member_id or "", offsets,
            body.group_instance_id if req.api_version >= 7 else None,
        ) if group_ok else (Code.NONE, {})
        T = OffsetCommitResponse.OffsetCommitResponseTopic
        P = T.OffsetCommitResponsePartition
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if not group_ok:
                    c = GROUP_AUTHORIZATION_FAILED
                elif t.name in refused:
                    c = TOPIC_AUTHORIZATION_FAILED
                elif tp not in offsets:
                    c = UNKNOWN_TOPIC_OR_PARTITION
                elif code is not Code.NONE:
                    c = group_error(code)
                else:
                    c = group_error(codes[tp])
                parts.append(P(partition_index=p.partition_index, error_code=c))
            topics.append(T(name=t.name, partitions=parts))
        return OffsetCommitResponse(throttle_time_ms=0, topics=topics)

    def offset_fetch(self, req: Request, caller: Caller) -> Any:
        body, v = req.body, req.api_version
        if v >= 8:
            G = OffsetFetchResponse.OffsetFetchResponseGroup
            GT = G.OffsetFetchResponseTopics
            GP = GT.OffsetFetchResponsePartitions
            groups = []
            for g in body.groups:
                if not self._may(caller, DESCRIBE, g.group_id):
                    groups.append(G(group_id=g.group_id, topics=[], error_code=GROUP_AUTHORIZATION_FAILED))
                    continue
                wanted = None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics]
                topics = [
                    GT(name=name, partitions=[GP(**fields) for fields in parts])
                    for name, parts in self._fetch(caller, g.group_id, wanted, body.require_stable)
                ]
                groups.append(G(group_id=g.group_id, topics=topics, error_code=NONE))
            return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
        T = OffsetFetchResponse.OffsetFetchResponseTopic
        P = T.OffsetFetchResponsePartition
        if not self._may(caller, DESCRIBE, body.group_id):
            return OffsetFetchResponse(throttle_time_ms=0, topics=[], error_code=GROUP_AUTHORIZATION_FAILED)
        wanted = None if body.topics is None else [(t.name, t.partition_indexes) for t in body.topics]
        topics = [
            T(name=name, partitions=[P(**fields) for fields in parts])
            for name, parts in self._fetch(caller, body.group_id, wanted, v >= 7 and body.require_stable)
        ]
        return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=NONE)

    def _fetch(
        self, caller: Caller, group_id: str, wanted: list[tuple[str, list[int]]] | None, stable: bool = False,
    ) -> list[tuple[str, list[dict[str, Any]]]]:
        """[(topic, [partition fields])] in request order (or topic order for null): a
        topic the caller may not describe is TOPIC_AUTHORIZATION_FAILED when named, left
        out when every topic is asked for (as Kafka). ``stable`` (require_stable): an
        offset an open transaction holds is UNSTABLE_OFFSET_COMMIT."""
        def may(topic: str) -> bool:
            return self.handlers.access.topic(caller.user, DESCRIBE, topic)

        tps = None if wanted is None else [(name, p) for name, parts in wanted for p in parts if may(name)]
        found = self.streams.fetch_offsets(group_id, tps)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        if wanted is not None:
            for name, parts in wanted:
                by_topic.setdefault(name, [] if may(name) else [
                    {"partition_index": p, "committed_offset": NO_OFFSET, "committed_leader_epoch": -1,
                     "metadata": NO_METADATA, "error_code": TOPIC_AUTHORIZATION_FAILED} for p in parts])
        for (topic, partition), om in found.items():
            if wanted is None and not may(topic):
                continue
            unstable = stable and self.streams.offsets_unstable(group_id, (topic, partition))
            by_topic.setdefault(topic, []).append({
                "partition_index": partition,
                "committed_offset": om.offset if om is not None and not unstable else NO_OFFSET,
                "committed_leader_epoch": om.leader_epoch if om is not None else -1,
                "metadata": om.metadata if om is not None else NO_METADATA,
                "error_code": UNSTABLE_OFFSET_COMMIT if unstable else NONE,
            })
        return list(by_topic.items())

    # -- ListGroups / DescribeGroups -----------------------------------------------------

    def list_groups(self, req: Request, caller: Caller) -> Any:
        body = req.body
        states = {s.lower() for s in body.states_filter} if req.api_version >= 4 else set()
        L = ListGroupsResponse.ListedGroup
        groups = [
            L(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state, group_type=GROUP_TYPE)
            for g in self.streams.list_groups()
            if (not states or g.state.lower() in states) and self._may(caller, DESCRIBE, g.group_id)
        ]
        return ListGroupsResponse(throttle_time_ms=0, error_code=NONE, groups=groups)

    def describe_groups(self, req: Request, caller: Caller) -> Any:
        D = DescribeGroupsResponse.DescribedGroup
        DM = D.DescribedGroupMember
        asked = req.api_version >= 3 and req.body.include_authorized_operations
        out = []
        for group_id in req.body.groups:
            if not self._may(caller, DESCRIBE, group_id):
                out.append(D(error_code=GROUP_AUTHORIZATION_FAILED, error_message=None, group_id=group_id,
                             group_state="", protocol_type="", protocol_data="", members=[],
                             authorized_operations=authorized(frozenset(), asked)))
                continue
            operations = authorized(self.handlers.access.group_operations(caller.user, group_id), asked)
            g = self.streams.describe_group(group_id)
            if g is None:  # Kafka describes an unknown group as Dead, without an error
                out.append(D(error_code=NONE, error_message=None, group_id=group_id, group_state="Dead",
                             protocol_type="", protocol_data="", members=[],
                             authorized_operations=operations))
                continue
            members = [
                DM(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                   client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                for m in g.members
            ]
            out.append(D(error_code=NONE, error_message=None, group_id=g.group_id, group_state=g.state,
                         protocol_type=g.protocol_type, protocol_data=g.protocol_name, members=members,
                         authorized_operations=operations))
        return DescribeGroupsResponse(throttle_time_ms=0, groups=out)

    def delete_groups(self, req: Request, caller: Caller) -> Any:
        R = DeleteGroupsResponse.DeletableGroupResult
        results = [R(group_id=g, error_code=group_error(self.streams.delete_group(g)) if self._may(caller, DELETE, g)
                     else GROUP_AUTHORIZATION_FAILED) for g in req.body.groups_names]
        return DeleteGroupsResponse(throttle_time_ms=0, results=results)
