"""Recovery after an unclean stop: torn and corrupt tails, lost or damaged indexes,
damaged older segments; and the property that recovery keeps exactly the complete,
valid batches before the damage, in order."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbus.core.log import LogManager, Record
from tests.core.conftest import topic_config
from tests.loop import LoopReactor


def abandon(lm: LogManager) -> None:
    """What kill -9 leaves: bytes written to the page cache, no indexes, no marker."""
    lm.drain()
    lm.flusher.stop()
    lm.cache.close_all()


def fill(loop: LoopReactor, lm: LogManager, n: int, cfg: Any, size: int = 40) -> Any:
    p = lm.open_topic("t", cfg, create=True).partition(0)
    for i in range(n):
        loop.wait(p.append([Record(b"%d" % i, bytes([i % 256]) * size, 1000 + i)]))
    return p


def reopen(tmp: Any, loop: LoopReactor, cfg: Any) -> tuple[LogManager, Any]:
    lm = LogManager(tmp, loop)
    return lm, lm.open_topic("t", cfg).partition(0)


def test_torn_tail_is_cut_and_appends_continue(tmp_path: Any, loop: LoopReactor) -> None:
    cfg = topic_config()
    lm = LogManager(tmp_path, loop)
    p = fill(loop, lm, 10, cfg)
    size = p.active.size
    last_pos = p.read(9, 1).spans[0].position
    abandon(lm)
    with open(p.active.log_path, "r+b") as f:
        f.truncate(size - 5)  # the last batch is torn
    lm2, p2 = reopen(tmp_path, loop, cfg)
    assert not lm2.clean_start
    assert p2.log_end_offset == 9
    assert lm2.reports[0].truncated_bytes == size - 5 - last_pos
    assert os.path.getsize(p2.active.log_path) == p2.active.size
    assert [r.offset for r in p2.read_records(0)] == list(range(9))
    assert loop.wait(p2.append([Record(None, b"again")])).base_offset == 9
    assert p2.read_records(9)[0].value == b"again"
    abandon(lm2)


def test_garbage_after_last_batch_is_cut(tmp_path: Any, loop: LoopReactor) -> None:
    cfg = topic_config()
    lm = LogManager(tmp_path, loop)
    p = fill(loop, lm, 5, cfg)
    good = p.active.size
    abandon(lm)
    with open(p.active.log_path, "ab") as f:
        f.write(os.urandom(300))
    lm2, p2 = reopen(tmp_path, loop, cfg)
    assert p2.active.size == good and lm2.reports[0].truncated_bytes == 300
    assert p2.log_end_offset == 5
    abandon(lm2)


def test_crc_damage_drops_that_batch_and_after(tmp_path: Any, loop: LoopReactor) -> None:
    cfg = topic_config()
    lm = LogManager(tmp_path, loop)
    p = fill(loop, lm, 6, cfg)
    pos = p.read(3, 1).spans[0].position
    abandon(lm)
    with open(p.active.log_path, "r+b") as f:
        f.seek(pos + 70)
        b = f.read(1)
        f.seek(pos + 70)
        f.write(bytes([b[0] ^ 0x40]))
    lm2, p2 = reopen(tmp_path, loop, cfg)
    assert p2.log_end_offset == 3 and p2.active.size == pos
    assert "CRC" in lm2.reports[0].notes[0]
    abandon(lm2)


def test_missing_and_damaged_indexes_are_rebuilt(tmp_path: Any, loop: LoopReactor) -> None:
    cfg = topic_config(segment_bytes=1024, index_interval_bytes=100)
    lm = LogManager(tmp_path, loop)
    p = fill(loop, lm, 60, cfg)
    sealed = p.segments[:-1]
    assert len(sealed) >= 3
    lm.close()
    os.unlink(sealed[0].index_path)
    os.unlink(sealed[1].time_path)
    with open(sealed[2].index_path, "r+b") as f:
        f.write(b"\xff" * 8)
    lm2, p2 = reopen(tmp_path, loop, cfg)
    rebuilt = " ".join(r for rep in lm2.reports for r in rep.rebuilt_indexes)
    for seg in sealed[:3]:
        assert os.path.basename(seg.index_path) in rebuilt
        assert os.path.exists(seg.index_path) and os.path.exists(seg.time_path)
    assert [r.offset for r in p2.read_records(0, 1 << 20)] == list(range(60))
    for o in (0, 17, 33, 59):
        assert p2.read_records(o, 1)[0].offset == o
        assert p2.offset_for_time(1000 + o) == (o, 1000 + o)
    # rebuilt index files equal what live appends wrote
    with open(sealed[3].index_path, "rb") as f:
        live = f.read()
    p2.segments[3].rebuild_indexes()
    with open(sealed[3].index_path, "rb") as f:
        assert f.read() == live
    abandon(lm2)


def test_damaged_older_segment_ends_the_log(tmp_path: Any, loop: LoopReactor) -> None:
    cfg = topic_config(segment_bytes=1024)
    lm = LogManager(tmp_path, loop)
    p = fill(loop, lm, 60, cfg)
    segs = list(p.segments)
    assert len(segs) >= 4
    abandon(lm)
    with open(segs[1].log_path, "r+b") as f:
        f.truncate(segs[1].size - 10)
    lm2, p2 = reopen(tmp_path, loop, cfg)
    assert [s.base_offset for s in p2.segments] == [segs[0].base_offset, segs[1].base_offset]
    assert p2.log_end_offset == segs[1].next_offset - 1
    assert not os.path.exists(segs[2].log_path)
    assert [r.offset for r in p2.read_records(0, 1 << 20)] == list(range(p2.log_end_offset))
    assert loop.wait(p2.append([Record(None, b"x")])).base_offset == p2.log_end_offset - 1
    abandon(lm2)


def test_unclean_stop_with_nothing_damaged_changes_nothing(tmp_path: Any, loop: LoopReactor) -> None:
    cfg = topic_config(segment_bytes=2048, index_interval_bytes=128)
    lm = LogManager(tmp_path, loop)
    fill(loop, lm, 80, cfg)
    abandon(lm)
    lm2, p2 = reopen(tmp_path, loop, cfg)
    assert all(not r.truncated_bytes and not r.removed_segments for r in lm2.reports)
    assert p2.log_end_offset == 80 and p2.offset_for_time(1050) == (50, 1050)
    abandon(lm2)


damage_st = st.tuples(st.sampled_from(["truncate", "flip", "garbage"]), st.floats(0, 1), st.integers(1, 255))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 300)), min_size=1, max_size=40),
    damage=damage_st,
    flush=st.sampled_from(["none", "sync"]),  # sync: zeros ahead of the data (garbage lands after them)
)
def test_recovery_keeps_exactly_the_valid_prefix(
    batches: list[tuple[int, int]], damage: tuple[str, float, int], flush: str
) -> None:
    loop = LoopReactor()
    cfg = topic_config(segment_bytes=2048, index_interval_bytes=200, flush=flush)
    with tempfile.TemporaryDirectory() as tmp:
        lm = LogManager(tmp, loop)
        p = lm.open_topic("t", cfg, create=True).partition(0)
        written: list[list[bytes]] = []
        for i, (count, size) in enumerate(batches):
            values = [b"%d:%d:" % (i, j) + b"z" * size for j in range(count)]
            loop.wait(p.append([Record(None, v) for v in values]))
            written.append(values)
        seg = p.active
        layout = [(pos, info.size) for pos, info in seg.walk(0)]
        first_in_seg = len(written) - len(layout)
        abandon(lm)

        kind, where, xor = damage
        seg_size = seg.size
        keep = len(written)
        if kind == "truncate" and seg_size:
            cut = int(where * seg_size)
            with open(seg.log_path, "r+b") as f:
                f.truncate(cut)
            keep = first_in_seg + sum(1 for pos, size in layout if pos + size <= cut)
        elif kind == "flip" and seg_size:
            at = min(int(where * seg_size), seg_size - 1)
            with open(seg.log_path, "r+b") as f:
                f.seek(at)
                b = f.read(1)[0]
                f.seek(at)
                f.write(bytes([b ^ xor]))
            k = next(i for i, (pos, size) in enumerate(layout) if pos <= at < pos + size)
            inside = at - layout[k][0]
            keep = len(written) if 12 <= inside < 16 else first_in_seg + k  # the epoch is not checked
        elif kind == "garbage":
            with open(seg.log_path, "ab") as f:
                f.write(bytes([xor]) * (1 + int(where * 100)))

        lm2 = LogManager(tmp, loop)
        p2 = lm2.open_topic("t", cfg).partition(0)
        expected = [v for values in written[:keep] for v in values]
        got = p2.read_records(0, 1 << 30) if p2.log_end_offset else []
        assert [r.value for r in got] == expected
        assert [r.offset for r in got] == list(range(len(expected)))
        assert p2.log_end_offset == len(expected)
        # and the log goes on from there
        assert loop.wait(p2.append([Record(None, b"next")])).base_offset == len(expected)
        abandon(lm2)
