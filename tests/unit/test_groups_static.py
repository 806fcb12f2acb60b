"""The group coordinator's static members (KIP-345: ``group.instance.id``), driven by a
fake clock, no sockets: a restarted member takes its old place, the old member id is
fenced, LeaveGroup by instance id."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from logbus.core.streams.groups import (
    Code,
    GroupCoordinator,
    GroupState,
    JoinGroup,
    OffsetAndMetadata,
)
from tests.unit.group_helpers import G, SESSION_MS, join_req, make, value


def static_req(instance: str, member_id: str = "", **kw: Any) -> JoinGroup:
    return replace(join_req(member_id, client="c-" + instance, **kw), group_instance_id=instance)


def stable_static_group(c: GroupCoordinator) -> tuple[str, str, int]:
    """Static members a (leader) and b, Stable; returns (a's id, b's id, generation)."""
    ra = value(c.join(static_req("a")))  # a static member gets its id at once
    assert ra.error is Code.NONE and ra.member_id.startswith("a-")
    assert ra.instance_ids == ((ra.member_id, "a"),)
    value(c.sync(G, ra.generation_id, ra.member_id, {ra.member_id: b"a1"}, instance_id="a"))
    join_b = c.join(static_req("b"))
    assert not join_b.called  # a must rejoin first
    assert c.heartbeat(G, ra.generation_id, ra.member_id, "a") is Code.REBALANCE_IN_PROGRESS
    again = c.join(static_req("a", ra.member_id))
    a, b = value(again), value(join_b)
    assert a.generation_id == b.generation_id and dict(a.instance_ids) == {a.member_id: "a", b.member_id: "b"}
    sync_b = c.sync(G, b.generation_id, b.member_id, {}, instance_id="b")
    value(c.sync(G, a.generation_id, a.member_id, {a.member_id: b"pa", b.member_id: b"pb"}, instance_id="a"))
    assert value(sync_b).assignment == b"pb"
    return a.member_id, b.member_id, a.generation_id


@pytest.mark.parametrize("restarted", ["a", "b"])
def test_a_static_member_that_restarts_keeps_its_assignment_without_a_rebalance(restarted: str) -> None:
    c, clock = make()
    a, b, gen = stable_static_group(c)
    old = a if restarted == "a" else b
    r = value(c.join(static_req(restarted)))
    assert r.error is Code.NONE and r.member_id not in (a, b) and r.generation_id == gen
    assert r.leader == a and r.members == ()  # the leader as it was: nobody assigns again
    assert c.groups[G].state is GroupState.STABLE and c.groups[G].static_members[restarted] == r.member_id
    mine = b"pa" if restarted == "a" else b"pb"
    assert value(c.sync(G, gen, r.member_id, {}, instance_id=restarted)).assignment == mine
    other = b if restarted == "a" else a
    assert c.heartbeat(G, gen, other, "b" if restarted == "a" else "a") is Code.NONE  # not rebalanced
    # the old member id is fenced wherever the instance is named
    assert c.heartbeat(G, gen, old, restarted) is Code.FENCED_INSTANCE_ID
    assert value(c.sync(G, gen, old, {}, instance_id=restarted)).error is Code.FENCED_INSTANCE_ID
    assert value(c.join(static_req(restarted, old))).error is Code.FENCED_INSTANCE_ID
    assert c.commit_offsets(G, gen, old, {("t", 0): OffsetAndMetadata(1)}, restarted)[0] is Code.FENCED_INSTANCE_ID
    assert c.leave(G, [old], [restarted]) == [Code.FENCED_INSTANCE_ID]
    if restarted == "a":
        assert c.groups[G].leader_id == r.member_id
    # static members' sessions expire as dynamic members' do
    clock.advance(SESSION_MS / 1000 + 1)
    assert G not in c.groups  # no members and no offsets left: Dead


def test_a_static_member_replaced_while_completing_a_rebalance_rebalances_the_group() -> None:
    c, _ = make()
    ra = value(c.join(static_req("a")))
    join_b = c.join(static_req("b"))
    value(c.join(static_req("a", ra.member_id)))
    b = value(join_b)
    assert c.groups[G].state is GroupState.COMPLETING_REBALANCE
    pending_sync = c.sync(G, b.generation_id, b.member_id, {}, instance_id="b")
    again = c.join(static_req("b"))  # b restarted before the leader's sync
    assert value(pending_sync).error is Code.FENCED_INSTANCE_ID
    assert c.groups[G].state is GroupState.PREPARING_REBALANCE and not again.called


def test_leave_a_static_member_by_its_instance_id() -> None:
    c, _ = make()
    a, b, _ = stable_static_group(c)
    assert c.leave(G, ["", ""], ["b", "nobody"]) == [Code.NONE, Code.UNKNOWN_MEMBER_ID]
    assert list(c.groups[G].members) == [a] and c.groups[G].static_members == {"a": a}
