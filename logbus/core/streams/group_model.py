"""The data of the group coordinator (core/streams/groups.py): error codes, group states and
their allowed transitions, the typed requests and results it takes and returns, and the
member and group records it keeps. No behaviour beyond small queries on a group."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred



class Code(enum.Enum):
    """Results of the group coordinator. The group protocol is Kafka's, so the names are
    Kafka's ``Errors``; the Kafka gateway maps them to Kafka's error numbers
    (gateway/kafka/errors.py ``GROUP_ERROR_CODES``)."""

    NONE = "none"
    UNKNOWN_TOPIC_OR_PARTITION = "unknown_topic_or_partition"
    OFFSET_METADATA_TOO_LARGE = "offset_metadata_too_large"
    COORDINATOR_LOAD_IN_PROGRESS = "coordinator_load_in_progress"
    COORDINATOR_NOT_AVAILABLE = "coordinator_not_available"
    NOT_COORDINATOR = "not_coordinator"
    ILLEGAL_GENERATION = "illegal_generation"
    INCONSISTENT_GROUP_PROTOCOL = "inconsistent_group_protocol"
    INVALID_GROUP_ID = "invalid_group_id"
    UNKNOWN_MEMBER_ID = "unknown_member_id"
    INVALID_SESSION_TIMEOUT = "invalid_session_timeout"
    REBALANCE_IN_PROGRESS = "rebalance_in_progress"
    NON_EMPTY_GROUP = "non_empty_group"
    GROUP_ID_NOT_FOUND = "group_id_not_found"
    MEMBER_ID_REQUIRED = "member_id_required"
    FENCED_INSTANCE_ID = "fenced_instance_id"
    # the transaction coordinator's (core/streams/transactions.py)
    INVALID_PRODUCER_EPOCH = "invalid_producer_epoch"
    INVALID_TXN_STATE = "invalid_txn_state"
    INVALID_PRODUCER_ID_MAPPING = "invalid_producer_id_mapping"
    INVALID_TRANSACTION_TIMEOUT = "invalid_transaction_timeout"
    CONCURRENT_TRANSACTIONS = "concurrent_transactions"
    UNSTABLE_OFFSET_COMMIT = "unstable_offset_commit"
    PRODUCER_FENCED = "producer_fenced"

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE


_RETRIABLE = frozenset({
    Code.UNKNOWN_TOPIC_OR_PARTITION, Code.COORDINATOR_LOAD_IN_PROGRESS,
    Code.COORDINATOR_NOT_AVAILABLE, Code.NOT_COORDINATOR, Code.REBALANCE_IN_PROGRESS,
    Code.CONCURRENT_TRANSACTIONS, Code.UNSTABLE_OFFSET_COMMIT,
})


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
# new state -> the states it may be entered from (Kafka's GroupState.validPreviousStates)
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.PREPARING_REBALANCE: frozenset({S.EMPTY, S.STABLE, S.COMPLETING_REBALANCE}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.DEAD: frozenset({S.EMPTY, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.STABLE, S.DEAD}),
}


class IllegalTransition(RuntimeError):
    """A bug in the coordinator: a move ``TRANSITIONS`` does not allow."""


NO_GENERATION = -1
UNKNOWN_MEMBER = ""
DEFAULT_MIN_SESSION_TIMEOUT_MS = 1_000  # Kafka: 6000; short sessions help tests and fast failover
DEFAULT_MAX_SESSION_TIMEOUT_MS = 1_800_000
DEFAULT_MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes


# -- inputs and results ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroup:
    group_id: str
    member_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), in preference order
    require_known_member_id: bool = True  # JoinGroup v4+
    client_host: str = ""
    group_instance_id: str | None = None  # a static member (KIP-345), JoinGroup v5+


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: Code
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, bytes], ...] = ()  # the leader's copy: (member id, metadata)
    instance_ids: tuple[tuple[str, str], ...] = ()  # the leader's copy: (member id, instance id) of static members


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: Code
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str | None = ""
    leader_epoch: int = -1
    commit_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


TopicPartition = tuple[str, int]


# -- the model -----------------------------------------------------------------------


@dataclass(eq=False)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    group_instance_id: str | None = None
    join_waiter: Deferred[JoinResult] | None = None
    sync_waiter: Deferred[SyncResult] | None = None
    expiry: Any = None  # IDelayedCall

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # insertion order: join order
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending: dict[str, Any] = field(default_factory=dict)  # MEMBER_ID_REQUIRED ids -> expiry
    pending_sync: set[str] = field(default_factory=set)
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    empty_since_ms: int = 0  # epoch ms when it last became Empty (0: never had members here)
    join_timer: Any = None
    sync_timer: Any = None

    def check_member(self, member_id: str, instance_id: str | None) -> Code:
        """Kafka's validateCurrentMember: a static member's instance id must map to
        ``member_id`` (else it was replaced: FENCED_INSTANCE_ID), and the member must exist."""
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is None:
                return Code.UNKNOWN_MEMBER_ID
            return Code.NONE if current == member_id else Code.FENCED_INSTANCE_ID
        return Code.NONE if member_id in self.members else Code.UNKNOWN_MEMBER_ID

    def check_commit(self, generation_id: int, member_id: str, instance_id: str | None) -> Code:
        """OffsetCommit's checks of the member and generation, as Kafka's (a commit with
        generation < 0 and no member id is a "simple" one, allowed while nobody is a member)."""
        if generation_id < 0 and member_id == UNKNOWN_MEMBER:
            return Code.NONE if not self.members else Code.UNKNOWN_MEMBER_ID
        if instance_id is not None and self.static_members.get(instance_id, member_id) != member_id:
            return Code.FENCED_INSTANCE_ID
        if self.state is GroupState.COMPLETING_REBALANCE and member_id in self.members:
            return (Code.REBALANCE_IN_PROGRESS if generation_id == self.generation_id
                    else Code.ILLEGAL_GENERATION)
        if member_id not in self.members:
            return Code.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return Code.ILLEGAL_GENERATION
        return Code.NONE

    def describe(self) -> GroupDescription:
        """Members' metadata and assignments are given only while the group is Stable."""
        stable = self.state is GroupState.STABLE
        members = tuple(
            MemberDescription(
                m.member_id, m.client_id, m.client_host,
                m.metadata_for(self.protocol_name) if stable else b"",
                m.assignment if stable else b"",
                m.group_instance_id,
            )
            for m in self.members.values()
        )
        return GroupDescription(
            self.group_id, self.state.value, self.protocol_type or "",
            (self.protocol_name or "") if stable else "", members,
        )

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_waiter is not None for m in self.members.values())

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, names: Iterable[str]) -> bool:
        names = set(names)
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[next(name for name, _ in m.protocols if name in candidates)] += 1
        # most votes; ties go to the leader's preference order
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        order = {name: i for i, (name, _) in enumerate(leader.protocols)}
        return max(votes, key=lambda n: (votes[n], -order.get(n, len(order))))
