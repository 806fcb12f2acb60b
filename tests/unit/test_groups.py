"""The group coordinator (logbus.core.streams.groups) driven by a fake clock, no sockets; the
committed-offset keys (logbus.core.state); and the Kafka gateway's group APIs joined
to kafka-python's encoders in memory, every registered version."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from logbus.core.broker import Broker
from logbus.gateway.kafka.errors import group_error
from logbus.core.streams.groups import (
    TRANSITIONS,
    Code,
    GroupCoordinator,
    GroupState,
    JoinGroup,
    JoinResult,
    OffsetAndMetadata,
    SyncResult,
)
from logbus.core.state import (
    StateStore,
    group_offset_key,
    group_offsets_prefix,
    parse_group_offset_key,
)

G = "g"
SESSION_MS = 10_000
REBALANCE_MS = 20_000
PROTOCOLS = (("range", b"meta"),)


def make(store: StateStore | None = None) -> tuple[GroupCoordinator, Clock]:
    clock = Clock()
    return GroupCoordinator(clock, store), clock


def join_req(member_id: str = "", *, client: str = "c", group: str = G, session: int = SESSION_MS,
             rebalance: int = REBALANCE_MS, protocols: tuple[tuple[str, bytes], ...] = PROTOCOLS,
             protocol_type: str = "consumer", v4: bool = True) -> JoinGroup:
    return JoinGroup(group, member_id, client, session, rebalance, protocol_type, protocols, v4)


def value(d: Deferred[Any]) -> Any:
    assert d.called, "the Deferred has not fired"
    return d.result


def new_member(c: GroupCoordinator, client: str = "c", **kw: Any) -> tuple[str, Deferred[JoinResult]]:
    """The two-step v4+ first join: MEMBER_ID_REQUIRED, then the join with the id."""
    first = value(c.join(join_req(client=client, **kw)))
    assert first.error is Code.MEMBER_ID_REQUIRED and first.member_id.startswith(client + "-")
    return first.member_id, c.join(join_req(first.member_id, client=client, **kw))


def stable_group(c: GroupCoordinator, n: int) -> tuple[list[str], int]:
    """n members in a Stable group (member 0 leads); returns (member ids, generation)."""
    ids: list[str] = []
    joins: list[Deferred[JoinResult]] = []
    for i in range(n):
        mid, d = new_member(c, f"c{i}")
        ids.append(mid)
        # the earlier members learn of the rebalance by heartbeat and rejoin
        joins = [c.join(join_req(m, client=f"c{k}")) for k, m in enumerate(ids[:-1])] + [d]
    results = [value(d) for d in joins]
    gen = results[0].generation_id
    assert all(r.error is Code.NONE and r.generation_id == gen for r in results)
    syncs = [c.sync(G, gen, m, {}) for m in ids[1:]]
    assert not any(d.called for d in syncs)
    leader = value(c.sync(G, gen, ids[0], {m: b"a-" + m.encode() for m in ids}))
    assert leader == SyncResult(Code.NONE, b"a-" + ids[0].encode(), "consumer", "range")
    for m, d in zip(ids[1:], syncs):
        assert value(d).assignment == b"a-" + m.encode()
    assert c.groups[G].state is GroupState.STABLE
    return ids, gen


# -- JoinGroup / SyncGroup --------------------------------------------------------------


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


# -- offsets ---------------------------------------------------------------------------


def test_commit_generation_checks() -> None:
    c, _ = make()
    off = {("t", 0): OffsetAndMetadata(5, "m")}
    assert c.commit_offsets("simple", -1, "", off) == (Code.NONE, {("t", 0): Code.NONE})
    assert c.commit_offsets("fresh", 3, "someone", off)[0] is Code.ILLEGAL_GENERATION
    (a, b), gen = stable_group(c, 2)
    assert c.commit_offsets(G, -1, "", off)[0] is Code.UNKNOWN_MEMBER_ID  # members only
    assert c.commit_offsets(G, gen, "stranger", off)[0] is Code.UNKNOWN_MEMBER_ID
    assert c.commit_offsets(G, gen - 1, a, off)[0] is Code.ILLEGAL_GENERATION
    assert c.commit_offsets(G, gen, a, off)[0] is Code.NONE
    c.join(join_req(a))  # PreparingRebalance: members may still commit their generation
    assert c.commit_offsets(G, gen, b, {("t", 1): OffsetAndMetadata(7)})[0] is Code.NONE
    value(c.join(join_req(b)))  # CompletingRebalance
    assert c.commit_offsets(G, gen + 1, b, off)[0] is Code.REBALANCE_IN_PROGRESS
    big = {("t", 2): OffsetAndMetadata(1, "x" * 5000), ("t", 3): OffsetAndMetadata(2)}
    c.sync(G, gen + 1, a, {})
    code, codes = c.commit_offsets(G, gen + 1, a, big)
    assert code is Code.NONE and codes == {("t", 2): Code.OFFSET_METADATA_TOO_LARGE, ("t", 3): Code.NONE}
    fetched = c.fetch_offsets(G, [("t", 0), ("t", 2), ("t", 3), ("u", 0)])
    assert {tp: (o.offset if o else None) for tp, o in fetched.items()} == {
        ("t", 0): 5, ("t", 2): None, ("t", 3): 2, ("u", 0): None}
    assert [tp for tp in c.fetch_offsets(G, None)] == [("t", 0), ("t", 1), ("t", 3)]
    assert c.fetch_offsets("nope", None) == {}


def test_offsets_are_one_synced_batch_and_survive_a_reopen(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    batches: list[dict[str, Any]] = []
    real_batch = store.batch

    def counting_batch(**kw: Any) -> Any:
        batches.append(kw)
        return real_batch(**kw)

    store.batch = counting_batch  # type: ignore[method-assign]
    c, _ = make(store)
    offsets = {("t", 0): OffsetAndMetadata(10, "ten", 3), ("t", 11): OffsetAndMetadata(20, None),
               ("u", 2): OffsetAndMetadata(30, "")}
    assert c.commit_offsets("grp", -1, "", offsets)[0] is Code.NONE
    assert batches == [{"sync": True}]
    keys = [k for k, _ in store.scan_prefix("offsets", group_offsets_prefix("grp"))]
    assert keys == [group_offset_key("grp", "t", 0), group_offset_key("grp", "t", 11),
                    group_offset_key("grp", "u", 2)]
    store.close()

    store = StateStore(tmp_path / "state")
    try:
        c2, _ = make(store)
        assert c2.load() == 3
        got = c2.fetch_offsets("grp", None)
        assert {tp: (o.offset, o.metadata, o.leader_epoch) for tp, o in got.items() if o} == {
            ("t", 0): (10, "ten", 3), ("t", 11): (20, None, -1), ("u", 2): (30, "", -1)}
        assert [(g.group_id, g.state) for g in c2.list_groups()] == [("grp", "Empty")]
        # a member of the old generation is told to rejoin, not allowed to commit
        assert c2.commit_offsets("grp", 4, "old-member", offsets)[0] is Code.UNKNOWN_MEMBER_ID
    finally:
        store.close()


def test_offsets_of_a_deleted_topic_are_forgotten(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    try:
        c, _ = make(store)
        c.commit_offsets("g1", -1, "", {("gone", 0): OffsetAndMetadata(1), ("kept", 0): OffsetAndMetadata(2)})
        c.commit_offsets("g2", -1, "", {("gone", 3): OffsetAndMetadata(4)})
        assert c.forget_topic("gone") == 2
        assert [g.group_id for g in c.list_groups()] == ["g1"]  # g2 had nothing else: gone
        c2, _ = make(store)
        assert c2.load() == 1
        assert set(c2.fetch_offsets("g1", None)) == {("kept", 0)}
    finally:
        store.close()


def test_offset_keys_are_injective_and_scan_per_group() -> None:
    k = group_offset_key("g", "t", 258)
    assert parse_group_offset_key(k) == ("g", "t", 258)
    assert group_offset_key("ab", "c", 0) != group_offset_key("a", "bc", 0)
    assert not group_offset_key("g2", "t", 0).startswith(group_offsets_prefix("g"))
    assert group_offset_key("g", "t", 1) < group_offset_key("g", "t", 256)
    with pytest.raises(ValueError):
        group_offset_key("g\x00", "t", 0)
    with pytest.raises(ValueError):
        parse_group_offset_key(b"topic\x00t\x00")


@given(st.text(min_size=1).filter(lambda s: "\x00" not in s),
       st.text(min_size=1).filter(lambda s: "\x00" not in s), st.integers(0, 2**31 - 1))
def test_offset_keys_round_trip(group: str, topic: str, partition: int) -> None:
    assert parse_group_offset_key(group_offset_key(group, topic, partition)) == (group, topic, partition)


# -- static membership (KIP-345) and DeleteGroups -------------------------------------------


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


def test_delete_group() -> None:
    c, _ = make()
    assert c.delete_group("nope") is Code.GROUP_ID_NOT_FOUND
    assert c.delete_group("") is Code.INVALID_GROUP_ID
    ids, gen = stable_group(c, 1)
    assert c.delete_group(G) is Code.NON_EMPTY_GROUP
    c.commit_offsets(G, gen, ids[0], {("t", 0): OffsetAndMetadata(5)})
    c.leave(G, ids)
    assert c.groups[G].state is GroupState.EMPTY and c.fetch_offsets(G, None)
    assert c.delete_group(G) is Code.NONE
    assert G not in c.groups and c.fetch_offsets(G, None) == {}


def test_deleted_group_offsets_are_gone_from_the_store(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    try:
        c, _ = make(store)
        c.commit_offsets(G, -1, "", {("t", 0): OffsetAndMetadata(3)})
        c.commit_offsets("kept", -1, "", {("t", 0): OffsetAndMetadata(4)})
        assert c.delete_group(G) is Code.NONE
        again, _ = make(store)
        assert again.load() == 1 and list(again.groups) == ["kept"]
    finally:
        store.close()


# -- Hypothesis: clients doing anything in any order keep the invariants ----------------


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


# -- the Kafka gateway's group APIs, every registered version, in memory ----------------


class GroupsBroker:
    """The broker's group methods (the real ones) over a coordinator, with no log: topic
    "t" has 2 partitions."""

    def __init__(self, clock: Clock) -> None:
        self.groups = GroupCoordinator(clock)

    def partition_count(self, topic: str) -> int | None:
        return 2 if topic == "t" else None

    join_group = Broker.join_group
    sync_group = Broker.sync_group
    heartbeat = Broker.heartbeat
    leave_group = Broker.leave_group
    commit_offsets = Broker.commit_offsets
    fetch_offsets = Broker.fetch_offsets
    list_groups = Broker.list_groups
    describe_group = Broker.describe_group
    delete_group = Broker.delete_group


def gateway() -> tuple[Any, Clock]:
    from logbus.gateway.kafka import groups as kafka_groups
    from logbus.gateway.kafka.handlers import KafkaHandlers

    clock = Clock()
    handlers = KafkaHandlers(GroupsBroker(clock), clock)  # type: ignore[arg-type]
    kafka_groups.install(handlers)
    kafka_groups.install(handlers)  # idempotent: one coordinator per handlers
    return handlers, clock


def call(handlers: Any, request: Any, version: int) -> Any:
    """Encode ``request`` as kafka-python does, answer it, decode the answer as kafka-python does."""
    from logbus.gateway.kafka.codec import encode_response, parse_request

    request.with_header(correlation_id=9, client_id="cli")
    req = parse_request(bytes(request.encode(header=True)), handlers.supported)
    box: list[Any] = []
    res = handlers.handle(req, ("127.0.0.1", 9092))
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
    coord = h.broker.groups
    assert coord.commit_offsets("simple", -1, "", {("t", 0): OffsetAndMetadata(1)})[0] is Code.NONE
    listed = call(h, ListGroupsRequest(states_filter=[], version=4), 4).groups
    assert [(g.group_id, g.group_state, g.protocol_type) for g in listed] == [("simple", "Empty", "")]
    assert call(h, ListGroupsRequest(states_filter=["Stable"], version=4), 4).groups == []
