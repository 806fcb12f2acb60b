"""The group coordinator's committed offsets (logbus.core.streams.groups), driven by a fake
clock, no sockets: OffsetCommit's checks, OffsetFetch, one synced batch in the store and
back after a reopen, offsets forgotten with a deleted topic or group (DeleteGroups); the
committed-offset keys (logbus.core.state)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logbus.core.streams.groups import Code, GroupState, OffsetAndMetadata
from logbus.core.state import (
    StateStore,
    group_offset_key,
    group_offsets_prefix,
    parse_group_offset_key,
)
from tests.unit.group_helpers import G, join_req, make, stable_group, value


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


@pytest.mark.pure_only
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


# -- DeleteGroups: a group goes with its committed offsets ------------------------------


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
