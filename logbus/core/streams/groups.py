"""The stream model's group coordinator: consumer-group membership (Kafka's classic
group protocol) and committed offsets. No sockets and no wire format here: the Kafka
gateway decodes requests, calls these methods and encodes what they return.

Theory of operation
===================

A group is a small state machine (``TRANSITIONS`` lists every allowed move; any other
is a bug and raises ``IllegalTransition``)::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
      ^                 ^        |                                          |
      |                 |        +--nobody rejoined--> Empty                | leader's SyncGroup
      |                 +--join, leave, expiry--------------------------<---+
      |                 +--leader rejoins, new protocols, leave, expiry-- Stable <--+
    (Dead: the group object is gone: no members and no committed offsets)

- **Join.** A member without an id gets ``client_id-uuid``. From JoinGroup v4 on
  (``require_known_member_id``) that first join is answered at once with
  MEMBER_ID_REQUIRED and the new id; the id is *pending* until the member joins again
  with it (or its session timeout passes). A join that needs a rebalance moves the
  group to PreparingRebalance; every join's answer (a Deferred) waits until every
  known member has rejoined and no pending member is left, or the largest rebalance
  timeout passes: then members that did not rejoin are dropped, the generation goes
  up by one, the protocol is chosen by vote among those every member supports, and
  every waiting join is answered; the leader (the longest-standing member) gets the
  members' metadata.
- **Sync.** Followers' SyncGroup answers wait for the leader's, which carries the
  assignments; then the group is Stable. A member that does not sync within the
  rebalance timeout is dropped (and the group rebalances).
- **Liveness.** Every member has a session timer, reset by each heartbeat, join,
  sync and commit. When it fires (and the member is not waiting on a join or sync),
  the member is removed and the group rebalances. Heartbeats answer
  REBALANCE_IN_PROGRESS while the group is preparing a rebalance, so members rejoin.
- **Static members** (KIP-345: JoinGroup v5+ with ``group.instance.id``) get their
  member id at once. One that joins again without its member id (it restarted) takes
  over its old place, assignment included, under a new member id; a Stable group whose
  protocol stays is not rebalanced. The old member id is then FENCED_INSTANCE_ID in
  every request that names the instance. LeaveGroup may name a static member by its
  instance id alone.
- **Offsets.** OffsetCommit is checked against the member and generation like Kafka
  does (``Group.check_commit``), and all offsets of one request are written in ONE
  RocksDB WriteBatch (core/streams/group_offsets.py), synced before the answer; ``load()`` reads
  them back at start. DeleteGroups deletes an Empty group with its offsets.

Time comes from the injected ``clock`` (a reactor, or ``twisted.internet.task.Clock``
in tests): ``clock.seconds()`` and ``clock.callLater()``. Every Deferred handed out is
fired exactly once, so a Kafka connection's ordered responses never stall behind one.

Differences from Apache Kafka: no initial rebalance delay; group membership is not
persisted (after a restart groups hold only their offsets, and members rejoin, static
ones included).

**Offset expiry** (Kafka's ``offsets.retention.minutes``, ``expire_offsets``): a group
with no members loses all its committed offsets once the retention has passed since
the later of its last commit and the moment it became Empty; it is then Dead and gone.
Kafka counts from the moment it became Empty, or for a group that never had members
per offset from its commit; membership is not stored here, so after a restart a group
counts from its last commit. A consumer of such a group starts again from its
``auto.offset.reset`` position.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from twisted.internet.defer import Deferred, succeed

from .group_model import (  # noqa: F401  (the model is part of this module's API)
    _RETRIABLE,
    DEFAULT_MAX_METADATA_BYTES,
    DEFAULT_MAX_SESSION_TIMEOUT_MS,
    DEFAULT_MIN_SESSION_TIMEOUT_MS,
    NO_GENERATION,
    TRANSITIONS,
    UNKNOWN_MEMBER,
    Code,
    Group,
    GroupDescription,
    GroupListing,
    GroupState,
    IllegalTransition,
    JoinGroup,
    JoinResult,
    Member,
    MemberDescription,
    OffsetAndMetadata,
    S,
    SyncResult,
    TopicPartition,
)
from ..errors import StorageError
from ..log.batch import now_ms
from .group_offsets import delete_offsets, load_offsets, write_offsets
from .group_rebalance import GroupRebalance, _cancel
from ..state import StateStore

log = logging.getLogger(__name__)


class GroupCoordinator(GroupRebalance):
    """Every consumer group of one broker: the requests of the group protocol, on the
    rebalance machinery of core/streams/group_rebalance.py. ``store`` None keeps offsets
    in memory only."""

    def __init__(
        self,
        clock: Any,
        store: StateStore | None = None,
        *,
        min_session_timeout_ms: int = DEFAULT_MIN_SESSION_TIMEOUT_MS,
        max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
        max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
        sync_commits: bool = True,
    ) -> None:
        self.clock = clock
        self.store = store
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.max_metadata_bytes = max_metadata_bytes
        self.sync_commits = sync_commits
        self.groups: dict[str, Group] = {}

    # -- start and stop ----------------------------------------------------------------

    def open(self, store: StateStore | None) -> int:
        """Start over on ``store`` (a broker that was started after this coordinator was
        built, or restarted): forget every group, then ``load()``."""
        self.shutdown()
        self.store = store
        return self.load()

    def load(self) -> int:
        """Read every committed offset from the store; return how many."""
        if self.store is None:
            return 0
        n = 0
        for group_id, tp, om in load_offsets(self.store):
            group = self.groups.get(group_id) or self.groups.setdefault(group_id, Group(group_id))
            group.offsets[tp] = om
            n += 1
        return n

    def shutdown(self) -> None:
        """Cancel every timer and answer every waiting request with
        COORDINATOR_NOT_AVAILABLE (clients look for the coordinator again)."""
        for group in list(self.groups.values()):
            for m in list(group.members.values()):
                self._fire_join(m, JoinResult(Code.COORDINATOR_NOT_AVAILABLE, m.member_id))
                self._fire_sync(m, SyncResult(Code.COORDINATOR_NOT_AVAILABLE))
                _cancel(m.expiry)
            for call in group.pending.values():
                _cancel(call)
            _cancel(group.join_timer)
            _cancel(group.sync_timer)
        self.groups.clear()

    def forget_topic(self, topic: str) -> int:
        """Drop every group's committed offsets of a deleted topic (as Kafka does),
        here and in the store; return how many."""
        gone: list[tuple[str, TopicPartition]] = []
        for group in list(self.groups.values()):
            for tp in [tp for tp in group.offsets if tp[0] == topic]:
                del group.offsets[tp]
                gone.append((group.group_id, tp))
            self._maybe_forget(group)
        if self.store is not None:
            delete_offsets(self.store, gone, sync=self.sync_commits)
        return len(gone)

    def expire_offsets(self, retention_ms: int, now: int | None = None) -> int:
        """Delete the committed offsets of every group with no members (and none
        pending) whose last commit and last becoming Empty are both ``retention_ms`` or
        more before ``now`` (epoch ms; default: the wall clock, as commit times are), in
        one WriteBatch; such a group is Dead and forgotten. Returns how many offsets."""
        now = now_ms() if now is None else now
        gone: list[tuple[str, TopicPartition]] = []
        for group in list(self.groups.values()):
            if group.members or group.pending or group.state is not S.EMPTY or not group.offsets:
                continue
            last = max(group.empty_since_ms, max(om.commit_timestamp_ms for om in group.offsets.values()))
            if now - last < retention_ms:
                continue
            gone += [(group.group_id, tp) for tp in group.offsets]
            log.info("group %s: %d committed offsets expired (no members, nothing committed for %d ms)",
                     group.group_id, len(group.offsets), now - last)
            group.offsets.clear()
            self._maybe_forget(group)
        if gone and self.store is not None:
            delete_offsets(self.store, gone, sync=self.sync_commits)
        return len(gone)

    def delete_group(self, group_id: str) -> Code:
        """DeleteGroups: an Empty group is deleted with its committed offsets (it is
        Dead); one with members is NON_EMPTY_GROUP; an unknown one GROUP_ID_NOT_FOUND."""
        if not _valid_group_id(group_id):
            return Code.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            return Code.GROUP_ID_NOT_FOUND
        if group.members:
            return Code.NON_EMPTY_GROUP
        if self.store is not None:
            try:
                delete_offsets(self.store, [(group_id, tp) for tp in group.offsets], sync=self.sync_commits)
            except StorageError as e:  # nothing deleted: the client may ask again
                log.warning("group %s not deleted, its offsets could not be: %s", group_id, e)
                return Code.COORDINATOR_NOT_AVAILABLE
        for call in group.pending.values():
            _cancel(call)
        group.pending.clear()
        group.offsets.clear()
        self._transition(group, S.DEAD)
        del self.groups[group_id]
        log.info("group %s: deleted", group_id)
        return Code.NONE

    # -- JoinGroup ---------------------------------------------------------------------

    def join(self, req: JoinGroup) -> Deferred[JoinResult]:
        if not _valid_group_id(req.group_id):
            return succeed(JoinResult(Code.INVALID_GROUP_ID, req.member_id))
        if not self.min_session_timeout_ms <= req.session_timeout_ms <= self.max_session_timeout_ms:
            return succeed(JoinResult(Code.INVALID_SESSION_TIMEOUT, req.member_id))
        group = self.groups.get(req.group_id)
        if req.member_id != UNKNOWN_MEMBER:
            if group is None:
                return succeed(JoinResult(Code.UNKNOWN_MEMBER_ID, req.member_id))
            if req.member_id not in group.pending:
                code = group.check_member(req.member_id, req.group_instance_id)
                if code is not Code.NONE:
                    return succeed(JoinResult(code, req.member_id))
        if group is None:
            group = self.groups[req.group_id] = Group(req.group_id)
        names = [name for name, _ in req.protocols]
        others = group.members.keys() - {req.member_id}
        if others or req.member_id not in group.members:
            ok = group.supports(req.protocol_type, names)
        else:  # the only member may change protocols freely
            ok = bool(req.protocol_type) and bool(names)
        if not ok:
            self._maybe_forget(group)
            return succeed(JoinResult(Code.INCONSISTENT_GROUP_PROTOCOL, req.member_id))

        if req.member_id == UNKNOWN_MEMBER and req.group_instance_id is not None:
            member_id = f"{req.group_instance_id}-{uuid.uuid4()}"
            old_id = group.static_members.get(req.group_instance_id)
            if old_id is not None:
                return self._replace_static_member(group, old_id, member_id, req)
            return self._add_member(group, member_id, req)
        if req.member_id == UNKNOWN_MEMBER:
            member_id = f"{req.client_id}-{uuid.uuid4()}"
            if req.require_known_member_id:
                timeout = req.session_timeout_ms / 1000.0
                group.pending[member_id] = self.clock.callLater(timeout, self._expire_pending, group, member_id)
                return succeed(JoinResult(Code.MEMBER_ID_REQUIRED, member_id))
            return self._add_member(group, member_id, req)
        if req.member_id in group.pending:
            _cancel(group.pending.pop(req.member_id))
            return self._add_member(group, req.member_id, req)

        member = group.members[req.member_id]
        d: Deferred[JoinResult] = Deferred()
        same = member.protocols == req.protocols and member.protocol_type == req.protocol_type
        if group.state is S.PREPARING_REBALANCE:
            self._update_member(group, member, req, d)
            self._try_complete_join(group)
        elif group.state is S.COMPLETING_REBALANCE and same:
            # the join answer was lost: answer again with the current generation
            self._touch(group, member)
            d.callback(self._join_result(group, member))
        elif group.state is S.STABLE and same and member.member_id != group.leader_id:
            self._touch(group, member)
            d.callback(self._join_result(group, member))
        else:  # the leader rejoining, changed metadata, or a join during CompletingRebalance
            self._update_member(group, member, req, d)
            self._prepare_rebalance(group, f"member {member.member_id} rejoined")
            self._try_complete_join(group)
        return d

    def _add_member(self, group: Group, member_id: str, req: JoinGroup) -> Deferred[JoinResult]:
        d: Deferred[JoinResult] = Deferred()
        member = Member(
            member_id, req.client_id, req.client_host, req.session_timeout_ms,
            req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms,
            req.protocol_type, req.protocols, group_instance_id=req.group_instance_id, join_waiter=d,
        )
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        if req.group_instance_id is not None:
            group.static_members[req.group_instance_id] = member_id
        if group.leader_id is None:
            group.leader_id = member_id
        self._touch(group, member)
        if group.state is not S.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member_id} joined")
        self._try_complete_join(group)
        return d

    def _replace_static_member(self, group: Group, old_id: str, new_id: str, req: JoinGroup) -> Deferred[JoinResult]:
        """A static member joins again without its member id: it takes over the old
        member's place (join order, leadership, assignment). In a Stable group whose
        protocol stays, it is answered at once with the current generation and the leader
        as it was (so a replaced leader does not assign again, as Kafka does)."""
        member = group.members[old_id]
        self._fire_join(member, JoinResult(Code.FENCED_INSTANCE_ID, old_id))
        self._fire_sync(member, SyncResult(Code.FENCED_INSTANCE_ID))
        leader_before = group.leader_id or ""
        group.members = {(new_id if mid == old_id else mid): m for mid, m in group.members.items()}
        member.member_id = new_id
        assert req.group_instance_id is not None
        group.static_members[req.group_instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        log.info("group %s: static member %s (instance %s) replaced by %s",
                 group.group_id, old_id, req.group_instance_id, new_id)
        d: Deferred[JoinResult] = Deferred()
        self._update_member(group, member, req, d)
        if group.state is S.STABLE and group.protocol_name == group.select_protocol():
            self._fire_join(member, JoinResult(
                Code.NONE, new_id, group.generation_id, group.protocol_type, group.protocol_name, leader_before,
            ))
        elif group.state is S.PREPARING_REBALANCE:
            self._try_complete_join(group)
        else:
            self._prepare_rebalance(group, f"static member {new_id} rejoined with other protocols")
            self._try_complete_join(group)
        return d

    def _update_member(self, group: Group, member: Member, req: JoinGroup, d: Deferred[JoinResult]) -> None:
        member.protocols = req.protocols
        member.protocol_type = req.protocol_type
        member.client_id = req.client_id
        member.session_timeout_ms = req.session_timeout_ms
        if req.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        # a second join while one waits: the older request is answered (the client
        # retries), never dropped, so the connection's ordered responses do not stall
        self._fire_join(member, JoinResult(Code.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_waiter = d
        self._touch(group, member)

    # -- SyncGroup ---------------------------------------------------------------------

    def sync(
        self, group_id: str, generation_id: int, member_id: str,
        assignments: Mapping[str, bytes], protocol_type: str | None = None,
        protocol_name: str | None = None, instance_id: str | None = None,
    ) -> Deferred[SyncResult]:
        group = self.groups.get(group_id)
        if group is None:
            return succeed(SyncResult(Code.UNKNOWN_MEMBER_ID))
        code = group.check_member(member_id, instance_id)
        if code is not Code.NONE:
            return succeed(SyncResult(code))
        if generation_id != group.generation_id:
            return succeed(SyncResult(Code.ILLEGAL_GENERATION))
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return succeed(SyncResult(Code.INCONSISTENT_GROUP_PROTOCOL))
        member = group.members[member_id]
        if group.state is S.PREPARING_REBALANCE:
            return succeed(SyncResult(Code.REBALANCE_IN_PROGRESS))
        group.pending_sync.discard(member_id)
        self._touch(group, member)
        if group.state is S.STABLE:
            return succeed(self._sync_result(group, member))
        assert group.state is S.COMPLETING_REBALANCE, group.state
        d: Deferred[SyncResult] = Deferred()
        self._fire_sync(member, SyncResult(Code.REBALANCE_IN_PROGRESS))  # a resent sync
        member.sync_waiter = d
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = bytes(assignments.get(m.member_id, b""))
            self._transition(group, S.STABLE)
            if not group.pending_sync:
                group.sync_timer = _cancel(group.sync_timer)
            log.info("group %s: generation %d is stable", group.group_id, group.generation_id)
            for m in list(group.members.values()):
                if m.sync_waiter is not None:
                    self._fire_sync(m, self._sync_result(group, m))
        return d

    def _sync_result(self, group: Group, member: Member) -> SyncResult:
        return SyncResult(Code.NONE, member.assignment, group.protocol_type, group.protocol_name)

    # -- Heartbeat, LeaveGroup --------------------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None = None) -> Code:
        group = self.groups.get(group_id)
        if group is None:
            return Code.UNKNOWN_MEMBER_ID
        code = group.check_member(member_id, instance_id)
        if code is not Code.NONE:
            return code
        if generation_id != group.generation_id:
            return Code.ILLEGAL_GENERATION
        self._touch(group, group.members[member_id])
        if group.state is S.PREPARING_REBALANCE:
            return Code.REBALANCE_IN_PROGRESS
        return Code.NONE

    def leave(self, group_id: str, member_ids: Sequence[str],
              instance_ids: Sequence[str | None] | None = None) -> list[Code]:
        """One code per member, in order. LeaveGroup v3+ names members by member id and
        group.instance.id; a static member may be named by its instance id alone."""
        group = self.groups.get(group_id)
        codes: list[Code] = []
        for member_id, instance_id in zip(member_ids, instance_ids or [None] * len(member_ids)):
            if group is None:
                codes.append(Code.UNKNOWN_MEMBER_ID)
                continue
            if member_id == UNKNOWN_MEMBER and instance_id is not None:
                member_id = group.static_members.get(instance_id, UNKNOWN_MEMBER)
            if member_id in group.pending:
                _cancel(group.pending.pop(member_id))
                codes.append(Code.NONE)
                self._try_complete_join(group)
                continue
            code = group.check_member(member_id, instance_id)
            if code is Code.NONE:
                log.info("group %s: member %s left", group.group_id, member_id)
                self._remove_and_rebalance(group, group.members[member_id], "left the group")
            codes.append(code)
        if group is not None:
            self._maybe_forget(group)
        return codes

    # -- OffsetCommit / OffsetFetch ----------------------------------------------------

    def commit_offsets(
        self, group_id: str, generation_id: int, member_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata], instance_id: str | None = None,
    ) -> tuple[Code, dict[TopicPartition, Code]]:
        """(the request's code, the per-partition codes). A request-level error applies
        to every partition (Kafka reports it per partition)."""
        if not _valid_group_id(group_id):
            return Code.INVALID_GROUP_ID, {}
        group = self.groups.get(group_id)
        if group is None:  # only a "simple" consumer (no group management) may commit
            code = Code.NONE if generation_id < 0 else Code.ILLEGAL_GENERATION
        else:
            code = group.check_commit(generation_id, member_id, instance_id)
        if code is not Code.NONE:
            return code, {}
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        if member_id in group.members:
            self._touch(group, group.members[member_id])
        codes: dict[TopicPartition, Code] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        now = now_ms()
        for tp, om in offsets.items():
            if om.metadata is not None and len(om.metadata.encode("utf-8")) > self.max_metadata_bytes:
                codes[tp] = Code.OFFSET_METADATA_TOO_LARGE
            else:
                accepted[tp] = OffsetAndMetadata(om.offset, om.metadata, om.leader_epoch, now)
                codes[tp] = Code.NONE
        if accepted and self.store is not None:
            try:
                write_offsets(self.store, group_id, accepted, sync=self.sync_commits)
            except Exception as e:  # a full disk (StorageError) or worse: not committed, the client retries
                if isinstance(e, StorageError):
                    log.warning("group %s: %d committed offsets not stored: %s", group_id, len(accepted), e)
                else:
                    log.exception("group %s: storing %d committed offsets failed", group_id, len(accepted))
                self._maybe_forget(group)
                return Code.COORDINATOR_NOT_AVAILABLE, {}
        group.offsets.update(accepted)
        self._maybe_forget(group)  # a simple commit of nothing leaves no group behind
        return Code.NONE, codes

    def check_member(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> Code:
        """A transactional offset commit's member and generation (KIP-447), as OffsetCommit
        checks them: a zombie consumer's offsets are refused."""
        group = self.groups.get(group_id)
        if group is None:
            return Code.NONE if generation_id < 0 and not member_id else Code.ILLEGAL_GENERATION
        return group.check_commit(generation_id, member_id, instance_id)

    def apply_offsets(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """A committed transaction's offsets of ``group_id`` (TxnOffsetCommit's), stored
        as a commit of the group (raises when the store refuses)."""
        now = now_ms()
        accepted = {tp: OffsetAndMetadata(om.offset, om.metadata, om.leader_epoch, now) for tp, om in offsets.items()}
        if not accepted:
            return
        if self.store is not None:
            write_offsets(self.store, group_id, accepted, sync=self.sync_commits)
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        group.offsets.update(accepted)

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None,
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The committed offsets of ``partitions`` (None: every committed one); a
        partition without a commit maps to None."""
        group = self.groups.get(group_id)
        stored = group.offsets if group is not None else {}
        if partitions is None:
            return dict(sorted(stored.items()))
        return {tp: stored.get(tp) for tp in partitions}

    # -- ListGroups / DescribeGroups ---------------------------------------------------

    def list_groups(self) -> list[GroupListing]:
        return [
            GroupListing(g.group_id, g.protocol_type or "", g.state.value)
            for g in sorted(self.groups.values(), key=lambda g: g.group_id)
            if g.state is not S.DEAD
        ]

    def describe(self, group_id: str) -> GroupDescription | None:
        """None: no such group (Kafka describes it as Dead)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        return group.describe()


def _valid_group_id(group_id: str) -> bool:
    return bool(group_id) and "\x00" not in group_id
