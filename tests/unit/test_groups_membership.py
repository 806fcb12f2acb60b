"""The group coordinator (logbus.core.streams.groups) driven by a fake clock, no sockets:
JoinGroup and SyncGroup, rebalances and their timeouts, heartbeats, session expiry,
LeaveGroup, pending member ids, the protocol vote, shutdown."""

from __future__ import annotations

from logbus.core.streams.groups import Code, GroupState, JoinResult
from tests.unit.group_helpers import (
    G,
    REBALANCE_MS,
    SESSION_MS,
    join_req,
    make,
    new_member,
    stable_group,
    value,
)


def test_first_join_asks_for_a_member_id_then_a_lone_member_is_stable() -> None:
    c, _ = make()
    mid, d = new_member(c, "app")
    r = value(d)
    assert r == JoinResult(Code.NONE, mid, 1, "consumer", "range", mid, ((mid, b"meta"),))
    assert c.groups[G].state is GroupState.COMPLETING_REBALANCE
    assert c.heartbeat(G, 1, mid) is Code.NONE  # heartbeats are fine while completing
    assert value(c.sync(G, 1, mid, {mid: b"mine"})).assignment == b"mine"
    assert c.groups[G].state is GroupState.STABLE
    desc = c.describe(G)
    assert desc is not None and desc.state == "Stable" and desc.protocol_name == "range"
    assert [(m.member_id, m.metadata, m.assignment) for m in desc.members] == [(mid, b"meta", b"mine")]


def test_join_before_v4_gets_its_member_id_at_once() -> None:
    c, _ = make()
    r = value(c.join(join_req(client="old", v4=False)))
    assert r.error is Code.NONE and r.member_id.startswith("old-") and r.leader == r.member_id


def test_a_second_member_waits_for_the_first_to_rejoin_and_followers_wait_for_the_leader() -> None:
    c, _ = make()
    (a,), gen = stable_group(c, 1)
    b, join_b = new_member(c, "b")
    assert not join_b.called and c.groups[G].state is GroupState.PREPARING_REBALANCE
    assert c.heartbeat(G, gen, a) is Code.REBALANCE_IN_PROGRESS
    join_a = c.join(join_req(a))
    ra, rb = value(join_a), value(join_b)
    assert ra.generation_id == rb.generation_id == gen + 1
    assert ra.leader == rb.leader == a
    assert [m for m, _ in ra.members] == [a, b] and rb.members == ()
    sync_b = c.sync(G, gen + 1, b, {})
    assert not sync_b.called
    assert value(c.sync(G, gen + 1, a, {a: b"1", b: b"2"})).assignment == b"1"
    assert value(sync_b).assignment == b"2"
    # a follower resending the same join in Stable is answered at once, no rebalance
    again = value(c.join(join_req(b)))
    assert again.generation_id == gen + 1 and again.members == ()
    assert c.groups[G].state is GroupState.STABLE


def test_members_that_do_not_rejoin_in_time_are_dropped() -> None:
    c, clock = make()
    (a, b), gen = stable_group(c, 2)
    cid, join_c = new_member(c, "x")
    join_a = c.join(join_req(a))
    for _ in range(4):  # b is alive (it heartbeats) but does not rejoin
        clock.advance(REBALANCE_MS / 4000 - 0.01)
        assert c.heartbeat(G, gen, b) is Code.REBALANCE_IN_PROGRESS
    assert not join_a.called
    clock.advance(0.05)
    assert value(join_a).generation_id == value(join_c).generation_id == gen + 1
    assert [m for m, _ in value(join_a).members] == [a, cid]
    assert c.heartbeat(G, gen, b) is Code.UNKNOWN_MEMBER_ID


def test_session_expiry_removes_a_silent_member_and_rebalances() -> None:
    c, clock = make()
    (a, b), gen = stable_group(c, 2)
    for _ in range(9):
        clock.advance(1.5)
        assert c.heartbeat(G, gen, a) is Code.NONE or c.groups[G].state is GroupState.PREPARING_REBALANCE
    assert b not in c.groups[G].members
    assert c.heartbeat(G, gen, a) is Code.REBALANCE_IN_PROGRESS
    r = value(c.join(join_req(a)))
    assert r.generation_id == gen + 1 and [m for m, _ in r.members] == [a]


def test_a_leader_that_never_syncs_is_dropped_after_the_rebalance_timeout() -> None:
    c, clock = make()
    a, join_a = new_member(c, "a")
    assert value(join_a).generation_id == 1
    b, join_b = new_member(c, "b")
    assert value(c.join(join_req(a))).generation_id == value(join_b).generation_id == 2
    gen = 2
    resent = value(c.join(join_req(b)))  # a lost join answer, asked again: same generation
    assert (resent.error, resent.generation_id, c.groups[G].state) == (
        Code.NONE, gen, GroupState.COMPLETING_REBALANCE)
    waiting = c.sync(G, gen, b, {})
    for _ in range(3):  # b heartbeats while it waits; the leader is silent
        clock.advance(REBALANCE_MS / 3000)
        c.heartbeat(G, gen, b)
    assert value(waiting).error is Code.REBALANCE_IN_PROGRESS
    assert list(c.groups[G].members) == [b] and c.groups[G].leader_id == b
    r = value(c.join(join_req(b)))
    assert (r.generation_id, r.leader) == (gen + 1, b)


def test_heartbeat_and_sync_errors() -> None:
    c, _ = make()
    assert c.heartbeat("nope", 1, "x") is Code.UNKNOWN_MEMBER_ID
    (a, b), gen = stable_group(c, 2)
    assert c.heartbeat(G, gen, "stranger") is Code.UNKNOWN_MEMBER_ID
    assert c.heartbeat(G, gen - 1, a) is Code.ILLEGAL_GENERATION
    assert value(c.sync(G, gen - 1, a, {})).error is Code.ILLEGAL_GENERATION
    assert value(c.sync(G, gen, "stranger", {})).error is Code.UNKNOWN_MEMBER_ID
    assert value(c.sync(G, gen, a, {}, "consumer", "roundrobin")).error is Code.INCONSISTENT_GROUP_PROTOCOL
    c.join(join_req(a))  # the leader rejoins: a rebalance
    assert value(c.sync(G, gen, b, {})).error is Code.REBALANCE_IN_PROGRESS
    value(c.join(join_req(b)))
    waiting = c.sync(G, gen + 1, b, {})
    assert not waiting.called
    assert c.leave(G, [a]) == [Code.NONE]  # the leader leaves before syncing
    assert value(waiting).error is Code.REBALANCE_IN_PROGRESS
    assert value(c.join(join_req(b))).leader == b


def test_leave_in_batches_and_an_empty_group_without_offsets_disappears() -> None:
    c, _ = make()
    (a, b, x), _ = stable_group(c, 3)
    assert c.leave(G, [a, "stranger", b]) == [Code.NONE, Code.UNKNOWN_MEMBER_ID, Code.NONE]
    assert c.groups[G].leader_id == x
    assert c.leave("nope", [a]) == [Code.UNKNOWN_MEMBER_ID]
    assert c.leave(G, [x]) == [Code.NONE]
    assert G not in c.groups and c.list_groups() == [] and c.describe(G) is None


def test_a_pending_member_id_blocks_the_rebalance_until_it_expires() -> None:
    c, clock = make()
    (a,), gen = stable_group(c, 1)
    pending = value(c.join(join_req(client="slow"))).member_id
    join_a = c.join(join_req(a))  # the leader rejoins: a rebalance, which waits for "slow"
    assert not join_a.called
    clock.advance(SESSION_MS / 1000 + 0.01)
    assert value(join_a).generation_id == gen + 1 and value(join_a).members == ((a, b"meta"),)
    assert value(c.join(join_req(pending))).error is Code.UNKNOWN_MEMBER_ID


def test_protocol_checks_and_the_vote() -> None:
    c, _ = make()
    assert value(c.join(join_req(group=""))).error is Code.INVALID_GROUP_ID
    assert value(c.join(join_req(session=10))).error is Code.INVALID_SESSION_TIMEOUT
    assert value(c.join(join_req("made-up"))).error is Code.UNKNOWN_MEMBER_ID
    assert value(c.join(join_req(protocols=()))).error is Code.INCONSISTENT_GROUP_PROTOCOL
    assert G not in c.groups
    a, ja = new_member(c, "a", protocols=(("range", b"1"), ("rr", b"2")))
    value(ja)
    assert value(c.join(join_req(protocol_type="connect"))).error is Code.INCONSISTENT_GROUP_PROTOCOL
    assert value(c.join(join_req(protocols=(("sticky", b""),)))).error is Code.INCONSISTENT_GROUP_PROTOCOL
    b, _ = new_member(c, "b", protocols=(("rr", b"3"), ("range", b"4")))
    x, _ = new_member(c, "x", protocols=(("rr", b"5"),))
    ra = value(c.join(join_req(a, protocols=(("range", b"1"), ("rr", b"2")))))
    assert ra.protocol_name == "rr" and dict(ra.members) == {a: b"2", b: b"3", x: b"5"}


def test_a_second_join_answers_the_first_so_no_response_stalls() -> None:
    c, _ = make()
    (a, b), gen = stable_group(c, 2)
    first = c.join(join_req(a))
    second = c.join(join_req(a))
    assert value(first).error is Code.REBALANCE_IN_PROGRESS and not second.called
    c.join(join_req(b))
    assert value(second).generation_id == gen + 1


def test_shutdown_answers_every_waiting_request() -> None:
    c, _ = make()
    (a, _), _ = stable_group(c, 2)
    waiting = c.join(join_req(a))
    c.shutdown()
    assert value(waiting).error is Code.COORDINATOR_NOT_AVAILABLE and c.groups == {}
