"""Shared by the group coordinator's tests (tests/unit/test_groups_*.py): a coordinator on
a fake clock, join requests, and the steps that bring members into a Stable group."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from logbus.core.state import StateStore
from logbus.core.streams.groups import Code, GroupCoordinator, GroupState, JoinGroup, JoinResult, SyncResult

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
