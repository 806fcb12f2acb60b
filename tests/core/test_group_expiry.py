"""Committed offsets of groups with no members expire (Kafka's offsets.retention.minutes)
on real RocksDB in a temp dir: the group coordinator on Twisted's deterministic clock,
commit times given explicitly (issue 30)."""

from __future__ import annotations

from pathlib import Path

from logbus.core.log.batch import now_ms
from logbus.core.state import StateStore
from logbus.core.streams.groups import Code, GroupState, OffsetAndMetadata
from tests.unit.group_helpers import G, make, stable_group

DAY = 86_400_000
RETENTION = 7 * DAY


def test_offsets_of_an_empty_group_expire_after_the_retention(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    try:
        c, _ = make(store)
        ids, gen = stable_group(c, 1)
        tp = ("t", 0)
        assert c.commit_offsets(G, gen, ids[0], {tp: OffsetAndMetadata(5)})[0] is Code.NONE
        # a simple (standalone) committer's group, never with members
        assert c.commit_offsets("solo", -1, "", {tp: OffsetAndMetadata(9)})[0] is Code.NONE
        t0 = now_ms()
        assert c.expire_offsets(RETENTION, t0 + 30 * DAY) == 1  # "solo"; g has a member
        assert c.fetch_offsets("solo", None) == {} and "solo" not in c.groups
        assert c.leave(G, ids) == [Code.NONE]
        assert c.groups[G].state is GroupState.EMPTY
        empty_at = c.groups[G].empty_since_ms
        assert c.expire_offsets(RETENTION, empty_at + RETENTION - 1) == 0  # not yet
        assert c.fetch_offsets(G, None)[tp].offset == 5  # type: ignore[union-attr]
        # a restart keeps what has not expired
        c2, _ = make(store)
        assert c2.load() == 1
        assert c2.expire_offsets(RETENTION, empty_at + RETENTION) == 1
        assert G not in c2.groups and c2.fetch_offsets(G, None) == {}
        c3, _ = make(store)
        assert c3.load() == 0  # gone from the store too
    finally:
        store.close()


def test_a_commit_keeps_an_empty_groups_offsets(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    try:
        c, _ = make(store)
        tp = ("t", 0)
        assert c.commit_offsets("solo", -1, "", {tp: OffsetAndMetadata(1)})[0] is Code.NONE
        first = c.groups["solo"].offsets[tp].commit_timestamp_ms
        later = first + RETENTION - 1
        # committed again just before the retention passed: counted from that commit
        c.groups["solo"].offsets[tp] = OffsetAndMetadata(2, None, -1, later)
        assert c.expire_offsets(RETENTION, first + RETENTION) == 0
        assert c.expire_offsets(RETENTION, later + RETENTION) == 1
    finally:
        store.close()
