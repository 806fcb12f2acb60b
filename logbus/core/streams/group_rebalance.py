"""What moves a consumer group between requests: the base class of the group coordinator
(core/streams/groups.py, whose header has the theory of operation). Here are the state
transitions (checked against ``group_model.TRANSITIONS``), preparing and completing a
rebalance, the join, sync, session and pending-member timers and what happens when they
fire, removing members, answering their waiting joins and syncs, and forgetting a group
that is Dead. No request enters here: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
offset requests are ``GroupCoordinator``'s.
"""

from __future__ import annotations

import logging
from typing import Any

from .group_model import (
    TRANSITIONS,
    Code,
    Group,
    GroupState,
    IllegalTransition,
    JoinResult,
    Member,
    S,
    SyncResult,
)
from ..log.batch import now_ms

log = logging.getLogger(__name__)


class GroupRebalance:
    """The rebalance machinery of every group in ``groups``, timed by ``clock``."""

    clock: Any
    groups: dict[str, Group]

    # -- rebalance ---------------------------------------------------------------------

    def _transition(self, group: Group, new: GroupState) -> None:
        if group.state not in TRANSITIONS[new]:
            raise IllegalTransition(f"group {group.group_id}: {group.state.value} -> {new.value}")
        if new is S.EMPTY:
            group.empty_since_ms = now_ms()  # its offsets' retention counts from here
        group.state = new

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state is S.PREPARING_REBALANCE:
            return
        log.info("group %s: preparing to rebalance (generation %d): %s",
                 group.group_id, group.generation_id, reason)
        if group.state is S.COMPLETING_REBALANCE:
            for m in list(group.members.values()):
                m.assignment = b""
                self._fire_sync(m, SyncResult(Code.REBALANCE_IN_PROGRESS))
        group.pending_sync.clear()
        group.sync_timer = _cancel(group.sync_timer)
        self._transition(group, S.PREPARING_REBALANCE)
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0) / 1000.0
        group.join_timer = self.clock.callLater(timeout, self._join_timeout, group)

    def _join_timeout(self, group: Group) -> None:
        group.join_timer = None
        if group.state is S.PREPARING_REBALANCE:
            self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        if group.state is S.PREPARING_REBALANCE and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        group.join_timer = _cancel(group.join_timer)
        for m in [m for m in group.members.values() if m.join_waiter is None]:
            log.info("group %s: member %s did not rejoin in time", group.group_id, m.member_id)
            self._remove(group, m)
        group.generation_id += 1
        if not group.members:  # (the protocol type stays, as in Kafka)
            group.protocol_name = None
            self._transition(group, S.EMPTY)
            log.info("group %s: generation %d is empty", group.group_id, group.generation_id)
            self._maybe_forget(group)
            return
        group.protocol_name = group.select_protocol()
        self._transition(group, S.COMPLETING_REBALANCE)
        group.pending_sync = set(group.members)
        timeout = max(m.rebalance_timeout_ms for m in group.members.values()) / 1000.0
        group.sync_timer = self.clock.callLater(timeout, self._sync_timeout, group, group.generation_id)
        log.info("group %s: generation %d with %d members, leader %s, protocol %s",
                 group.group_id, group.generation_id, len(group.members), group.leader_id,
                 group.protocol_name)
        results = [(m, self._join_result(group, m)) for m in group.members.values()]
        for m, _ in results:
            m.assignment = b""
            self._touch(group, m)
        for m, result in results:
            self._fire_join(m, result)

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        leader = member.member_id == group.leader_id
        members = tuple(
            (m.member_id, m.metadata_for(group.protocol_name)) for m in group.members.values()
        ) if leader else ()
        instance_ids = tuple(
            (m.member_id, m.group_instance_id) for m in group.members.values() if m.group_instance_id is not None
        ) if leader else ()
        return JoinResult(
            Code.NONE, member.member_id, group.generation_id, group.protocol_type,
            group.protocol_name, group.leader_id or "", members, instance_ids,
        )

    def _sync_timeout(self, group: Group, generation_id: int) -> None:
        group.sync_timer = None
        if generation_id != group.generation_id or group.state not in (S.COMPLETING_REBALANCE, S.STABLE):
            return
        late = [group.members[m] for m in group.pending_sync if m in group.members]
        group.pending_sync.clear()
        if not late:
            return
        for m in late:
            log.info("group %s: member %s did not sync in time", group.group_id, m.member_id)
            self._remove(group, m)
        self._prepare_rebalance(group, "members did not sync in time")
        self._try_complete_join(group)

    # -- sessions, leaving members, waiting requests -----------------------------------

    def _touch(self, group: Group, member: Member) -> None:
        """(Re)start the member's session timer."""
        timeout = member.session_timeout_ms / 1000.0
        if member.expiry is not None and member.expiry.active():
            member.expiry.reset(timeout)
        else:
            member.expiry = self.clock.callLater(timeout, self._expire, group, member)

    def _expire(self, group: Group, member: Member) -> None:
        member.expiry = None
        if group.members.get(member.member_id) is not member:
            return
        if member.join_waiter is not None or member.sync_waiter is not None:
            self._touch(group, member)  # bounded by the rebalance and sync timeouts instead
            return
        log.info("group %s: member %s's session expired", group.group_id, member.member_id)
        self._remove_and_rebalance(group, member, "session expired")
        self._maybe_forget(group)

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if group.pending.pop(member_id, None) is None:
            return
        log.info("group %s: pending member %s did not join in time", group.group_id, member_id)
        self._try_complete_join(group)
        self._maybe_forget(group)

    def _remove_and_rebalance(self, group: Group, member: Member, reason: str) -> None:
        self._remove(group, member)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} {reason}")
        self._try_complete_join(group)

    def _remove(self, group: Group, member: Member) -> None:
        del group.members[member.member_id]
        if member.group_instance_id is not None and group.static_members.get(member.group_instance_id) == member.member_id:
            del group.static_members[member.group_instance_id]
        group.pending_sync.discard(member.member_id)
        member.expiry = _cancel(member.expiry)
        self._fire_join(member, JoinResult(Code.UNKNOWN_MEMBER_ID, member.member_id))
        self._fire_sync(member, SyncResult(Code.UNKNOWN_MEMBER_ID))
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), None)

    def _maybe_forget(self, group: Group) -> None:
        """An Empty group with no pending members and no offsets is Dead: drop it."""
        if (group.state is S.EMPTY and not group.members and not group.pending
                and not group.offsets and self.groups.get(group.group_id) is group):
            self._transition(group, S.DEAD)
            del self.groups[group.group_id]

    @staticmethod
    def _fire_join(member: Member, result: JoinResult) -> None:
        d, member.join_waiter = member.join_waiter, None
        if d is not None:
            d.callback(result)

    @staticmethod
    def _fire_sync(member: Member, result: SyncResult) -> None:
        d, member.sync_waiter = member.sync_waiter, None
        if d is not None:
            d.callback(result)


def _cancel(call: Any) -> Any:
    """Cancel a DelayedCall if it is still pending; return None (for ``x = _cancel(x)``)."""
    if call is not None and call.active():
        call.cancel()
    return None
