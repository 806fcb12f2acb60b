"""The group coordinator (logbus.core.streams.groups) under Hypothesis: clients, static ones
too, doing anything in any order keep the group's invariants, every transition is in
``TRANSITIONS``, and every request is answered."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred

from logbus.core.streams.groups import (
    TRANSITIONS,
    Code,
    GroupState,
    JoinResult,
    OffsetAndMetadata,
    SyncResult,
)
from tests.unit.group_helpers import G, REBALANCE_MS, join_req, make


class Client:
    def __init__(self, name: str, instance: str | None = None) -> None:
        self.name = name
        self.instance = instance  # a static member (KIP-345)
        self.member_id = ""
        self.generation = -1
        self.members: tuple[tuple[str, bytes], ...] = ()
        self.synced = -1  # the generation whose assignment this client has
        self.deferreds: list[Deferred[Any]] = []


OPS = st.lists(
    st.tuples(st.sampled_from(["act"] * 8 + ["join", "sync", "heartbeat", "leave", "advance", "commit",
                                             "restart", "restart", "delete"]),
              st.integers(0, 3), st.sampled_from([0.1, 1.0, 4.0, 11.0])),
    min_size=5, max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
@example([("act", 2, 0.1)] * 8 + [("restart", 2, 0.1)] + [("act", 2, 0.1)] * 2)  # replaced while Stable
@example([("act", 2, 0.1), ("act", 3, 0.1)] * 8 + [("restart", 3, 0.1)] + [("act", 3, 0.1), ("act", 2, 0.1)] * 4)
def test_random_clients_keep_the_invariants(ops: list[tuple[str, int, float]]) -> None:
    c, clock = make()
    clients = [Client("c0"), Client("c1"), Client("c2", "s2"), Client("c3", "s3")]  # two static members
    history: list[tuple[GroupState, GroupState, int]] = []
    real_transition = c._transition

    def transition(group: Any, new: GroupState) -> None:
        history.append((group.state, new, group.generation_id))
        real_transition(group, new)

    c._transition = transition  # type: ignore[method-assign]

    def on_join(result: JoinResult, cl: Client, sent: str) -> JoinResult:
        if cl.member_id != sent:  # answered after the client restarted: not for it any more
            return result
        if result.error is Code.FENCED_INSTANCE_ID:
            cl.member_id, cl.generation = "", -1
        elif result.error in (Code.NONE, Code.MEMBER_ID_REQUIRED):
            cl.member_id = result.member_id
        if result.error is Code.NONE:
            cl.generation, cl.members = result.generation_id, result.members
        elif result.error is Code.UNKNOWN_MEMBER_ID:
            cl.member_id, cl.generation = "", -1
        return result

    def on_sync(result: SyncResult, cl: Client, sent: str) -> SyncResult:
        if cl.member_id != sent:
            return result
        if result.error is Code.FENCED_INSTANCE_ID:
            cl.member_id, cl.generation = "", -1
        elif result.error is Code.NONE:
            cl.synced = cl.generation
        else:
            cl.generation = -1 if result.error is not Code.UNKNOWN_MEMBER_ID else cl.generation
            if result.error is Code.UNKNOWN_MEMBER_ID:
                cl.member_id, cl.generation = "", -1
        return result

    for op, i, dt in ops:
        cl = clients[i]
        if op == "act":  # what a well-behaved client does next
            waiting = any(not d.called for d in cl.deferreds)
            if waiting:
                op = "advance"
            elif cl.generation < 0 or cl.synced != cl.generation:
                op = "join" if cl.generation < 0 else "sync"
            elif c.heartbeat(G, cl.generation, cl.member_id, cl.instance) is not Code.NONE:
                op = "join"
            else:
                op, dt = "advance", 0.1
        if op == "join":
            req = replace(join_req(cl.member_id, client=cl.name), group_instance_id=cl.instance)
            g = c.groups.get(G)
            if not cl.member_id and g is not None and cl.instance in g.static_members:
                event(f"static member replaced in {g.state.value}")
            cl.deferreds.append(c.join(req).addCallback(on_join, cl, cl.member_id))
        elif op == "sync":
            plan = {m: b"a-" + m.encode() for m, _ in cl.members}
            d = c.sync(G, cl.generation, cl.member_id, plan, instance_id=cl.instance)
            cl.deferreds.append(d.addCallback(on_sync, cl, cl.member_id))
        elif op == "heartbeat":
            c.heartbeat(G, cl.generation, cl.member_id, cl.instance)
        elif op == "leave":
            c.leave(G, [cl.member_id], [cl.instance])
        elif op == "commit":
            c.commit_offsets(G, cl.generation, cl.member_id, {("t", i): OffsetAndMetadata(1)}, cl.instance)
        elif op == "restart":  # the client process restarts: it forgets its member id
            cl.member_id, cl.generation, cl.synced, cl.members = "", -1, -1, ()
        elif op == "delete":
            assert c.delete_group(G) in (Code.NONE, Code.NON_EMPTY_GROUP, Code.GROUP_ID_NOT_FOUND)
        else:
            clock.advance(dt)
        group = c.groups.get(G)
        if group is None:
            continue
        leaders = [m for m in group.members if m == group.leader_id]
        assert len(leaders) == (1 if group.members else 0)
        assert group.static_members == {
            m.group_instance_id: mid for mid, m in group.members.items() if m.group_instance_id is not None}
        assert all(m.member_id == mid for mid, m in group.members.items())
        if group.state is GroupState.STABLE:
            assert all(m.assignment for m in group.members.values())
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            assert not group.members

    # every transition allowed; each completed rebalance is exactly one generation later
    # (a Dead group, one with no members and no offsets, is forgotten: a new one starts at 0)
    assert all(old in TRANSITIONS[new] for old, new, _ in history)
    completed: list[int] = []
    for old, new, gen in history:
        if new is GroupState.DEAD:
            completed.append(-1)
        elif old is GroupState.PREPARING_REBALANCE:
            # (recorded as the transition happens: the new generation)
            assert gen == (completed[-1] + 1 if completed and completed[-1] >= 0 else 1)
            completed.append(gen)
    completed = [g for g in completed if g >= 0]
    event(f"rebalances completed: {min(len(completed), 3)}+")
    event(f"reached Stable: {any(new is GroupState.STABLE for _, new, _ in history)}")
    # silence: every member's session ends, every request is answered
    for _ in range(10):
        clock.advance(REBALANCE_MS / 1000)
    assert all(d.called for cl in clients for d in cl.deferreds)
    assert G not in c.groups or not c.groups[G].members
