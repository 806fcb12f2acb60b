"""Zeros written ahead of small appends to a sync topic (decision 0016): where they are
written and where not, cut off when a segment is sealed and at a clean close, not
taken for damage by recovery after a kill -9, and invisible to a file reader (Spark)."""

from __future__ import annotations

import os
from typing import Any, Callable

from logbus.core.log import LogManager, Record
from logbus.core.log import segment as S
from logbus.spark.logfiles import DataDir
from tests.core.conftest import topic_config
from tests.core.test_recovery import abandon
from tests.loop import LoopReactor

OpenLog = Callable[..., LogManager]


def file_size(seg: Any) -> int:
    return os.path.getsize(seg.log_path)


def tail(seg: Any) -> bytes:
    with open(seg.log_path, "rb") as f:
        f.seek(seg.size)
        return f.read()


def append(loop: LoopReactor, p: Any, i: int, size: int = 40) -> None:
    loop.wait(p.append([Record(b"%d" % i, bytes([1 + i % 255]) * size, 1000 + i)]))


def sync_partition(tmp_path: Any, loop: LoopReactor, n: int) -> tuple[LogManager, Any]:
    """A log with one sync topic "t" whose partition 0 holds ``n`` small records."""
    lm = LogManager(tmp_path, loop)
    p = lm.open_topic("t", topic_config(flush="sync"), create=True).partition(0)
    for i in range(n):
        append(loop, p, i)
    return lm, p


def test_small_sync_appends_keep_zeroed_space_ahead(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(flush="sync"), create=True).partition(0)
    append(loop, p, 0)
    seg = p.active
    assert seg.file_end == file_size(seg) == seg.size + S.ZERO_AHEAD_MIN
    assert tail(seg) == bytes(S.ZERO_AHEAD_MIN)
    zeroed_at = file_size(seg)
    for i in range(1, 400):  # 400 x ~110 bytes: the zeros run out and are written again
        append(loop, p, i)
        assert seg.size < file_size(seg) == seg.file_end
        assert not tail(seg).strip(b"\0")
    assert file_size(seg) > zeroed_at
    assert [r.offset for r in p.read_records(0, 1 << 20)] == list(range(400))


def test_other_policies_and_large_writes_write_no_zeros(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    for flush in ("none", "interval:50"):
        p = lm.open_topic(f"t-{flush[:4]}", topic_config(flush=flush), create=True).partition(0)
        append(loop, p, 0)
        assert file_size(p.active) == p.active.size
    p = lm.open_topic("big", topic_config(flush="sync"), create=True).partition(0)
    append(loop, p, 0, size=S.ZERO_WRITE_MAX + 1)
    assert file_size(p.active) == p.active.size


def test_sealing_cuts_the_zeros_off(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(flush="sync", segment_bytes=2048), create=True).partition(0)
    for i in range(100):
        append(loop, p, i)
    assert len(p.segments) > 3
    for seg in p.segments[:-1]:
        assert seg.sealed and file_size(seg) == seg.size == seg.file_end
    assert file_size(p.active) > p.active.size


def test_a_clean_close_cuts_the_zeros_off(open_log: OpenLog, loop: LoopReactor) -> None:
    cfg = topic_config(flush="sync")
    lm = open_log()
    p = lm.open_topic("t", cfg, create=True).partition(0)
    for i in range(5):
        append(loop, p, i)
    size = p.active.size
    lm.close()
    assert file_size(p.active) == size
    lm2 = open_log()
    p2 = lm2.open_topic("t", cfg).partition(0)
    assert lm2.clean_start and not lm2.reports
    assert p2.log_end_offset == 5 and p2.active.size == size


def test_zeros_left_by_a_kill_are_cut_without_a_damage_report(tmp_path: Any, loop: LoopReactor) -> None:
    cfg = topic_config(flush="sync")
    lm, p = sync_partition(tmp_path, loop, 7)
    size = p.active.size
    abandon(lm)
    assert file_size(p.active) > size
    lm2 = LogManager(tmp_path, loop)
    p2 = lm2.open_topic("t", cfg).partition(0)
    assert not lm2.clean_start and not lm2.reports  # nothing to report: no damage
    assert file_size(p2.active) == p2.active.size == size
    assert [r.offset for r in p2.read_records(0)] == list(range(7))
    append(loop, p2, 7)
    assert [r.key for r in p2.read_records(0)] == [b"%d" % i for i in range(8)]
    abandon(lm2)


def test_a_torn_batch_in_the_zeroed_space_is_reported(tmp_path: Any, loop: LoopReactor) -> None:
    cfg = topic_config(flush="sync")
    lm, p = sync_partition(tmp_path, loop, 3)
    first = p.read(0, 1).data
    size, end = p.active.size, file_size(p.active)
    abandon(lm)
    with open(p.active.log_path, "r+b") as f:  # half a batch, then zeros
        f.seek(size)
        f.write(first[: len(first) // 2])
    lm2 = LogManager(tmp_path, loop)
    p2 = lm2.open_topic("t", cfg).partition(0)
    assert lm2.reports[0].truncated_bytes == end - size
    assert p2.log_end_offset == 3 and file_size(p2.active) == size
    abandon(lm2)


def test_a_file_reader_ends_where_the_zeros_begin(tmp_path: Any, loop: LoopReactor) -> None:
    lm, p = sync_partition(tmp_path, loop, 9)
    assert file_size(p.active) > p.active.size
    pf = DataDir(str(tmp_path)).partition("t", 0)
    assert pf.end() == 9
    assert sum(len(batches) for _, batches in pf.chunks(0, 9)) == 9
    append(loop, p, 9)
    assert pf.end() == 10  # the end hint holds while zeros become a batch
    abandon(lm)
