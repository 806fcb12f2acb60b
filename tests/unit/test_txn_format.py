"""The transaction parts of the log format (core/log/format.py, docs/format.md section 4.5):
markers as Kafka's clients decode them, and the aborted-transaction index's entries."""

from __future__ import annotations

import os
from pathlib import Path

from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch

from logbus.core.log import format as F
from logbus.core.log.txnindex import AbortedIndex

INT64 = st.integers(-(2**63), 2**63 - 1)


@given(pid=st.integers(0, 2**63 - 1), epoch=st.integers(0, 32767), commit=st.booleans(),
       ts=st.integers(0, 2**47), coordinator_epoch=st.integers(0, 2**31 - 1))
def test_a_marker_is_the_control_batch_kafka_clients_read(pid: int, epoch: int, commit: bool, ts: int,
                                                           coordinator_epoch: int) -> None:
    data = F.control_batch(pid, epoch, commit, ts, coordinator_epoch)
    info = F.validate(data, 0, len(data))  # whole, CRC right
    assert (info.producer_id, info.producer_epoch, info.records_count, info.attributes) == (pid, epoch, 1, 0x30)
    assert F.control_type(data, info) == (F.CONTROL_COMMIT if commit else F.CONTROL_ABORT)
    aio = AioBatch(data)
    assert aio.is_control_batch and aio.is_transactional and aio.producer_id == pid
    [record] = list(aio)
    assert record.key == bytes([0, 0, 0, int(commit)]) and record.value[2:] == coordinator_epoch.to_bytes(4, "big")
    kp = KpBatch(data)
    assert kp.is_control_batch and [r.type for r in kp] == [int(commit)]  # kafka-python's ControlRecord


def test_an_ordinary_batch_is_no_marker() -> None:
    b = DefaultRecordBatchBuilder(2, 0, 1, 7, 0, 0, 1 << 20)
    b.append(0, 1000, b"\x00\x00\x00\x01", b"value", [])
    data = bytes(b.build())
    assert F.control_type(data, F.validate(data, 0, len(data))) is None


@given(st.lists(st.tuples(INT64, INT64, INT64, INT64), max_size=20), st.integers(0, 31))
def test_aborted_entries_round_trip_and_a_torn_tail_is_left_out(entries: list[tuple[int, int, int, int]],
                                                                 torn: int) -> None:
    data = b"".join(F.pack_aborted(F.AbortedTxn(*e)) for e in entries)
    assert F.unpack_aborted(data + bytes(torn)) == [F.AbortedTxn(*e) for e in entries]


def test_the_index_file_is_appended_synced_trimmed_and_read_back(tmp_path: Path) -> None:
    idx = AbortedIndex(str(tmp_path))
    assert idx.entries == [] and not os.path.exists(idx.path)
    a, b = F.AbortedTxn(1, 10, 20, 10), F.AbortedTxn(2, 30, 40, 30)
    idx.add(a)
    idx.add(F.AbortedTxn(1, 10, 20, 15))  # the same transaction again (a retried abort): kept once
    with open(idx.path, "ab") as f:
        f.write(b"\x00" * 7)  # a torn entry from a crash
    idx.add(b)  # cuts it off first
    assert AbortedIndex(str(tmp_path)).entries == [a, b]
    assert idx.between(0, 10) == [] and idx.between(0, 11) == [a] and idx.between(21, 31) == [b]
    assert idx.between(20, 21) == [a] and idx.between(41, 50) == []
    idx.trim(21)
    assert idx.entries == [b] and AbortedIndex(str(tmp_path)).entries == [b]
    assert not os.path.exists(idx.path + F.TMP_SUFFIX)


KINDS = {"txn": F.ATTR_TRANSACTIONAL, "plain": 0, "commit": F.ATTR_TRANSACTIONAL | F.ATTR_CONTROL,
         "abort": F.ATTR_TRANSACTIONAL | F.ATTR_CONTROL}


@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(sorted(KINDS))), max_size=80))
def test_the_walk_finds_the_aborted_transactions_a_reader_skips_by(events: list[tuple[int, str]]) -> None:
    """``follow_transactions`` over a partition's batches against a model of each
    producer's transactions: skipping each producer's transactional batches between the
    walk's (first, marker) pairs leaves out exactly the records of aborted transactions."""
    open_txns: dict[int, int] = {}
    entries: list[tuple[int, int, int]] = []
    model: dict[int, list[int]] = {}  # producer -> offsets of its open transaction's batches
    aborted: set[int] = set()
    transactional: list[tuple[int, int]] = []
    for offset, (pid, what) in enumerate(events):
        info = F.BatchInfo(offset, F.HEADER_SIZE, 0, 0, 0, KINDS[what], pid, 0, -1, 1)
        kind = {"commit": F.CONTROL_COMMIT, "abort": F.CONTROL_ABORT}.get(what)
        found = F.follow_transactions(open_txns, info, kind)
        assert (found is not None) == (what == "abort")
        if found is not None:
            assert found[0] == pid and found[1] <= offset
            entries.append((pid, found[1], offset))
        if what == "txn":
            model.setdefault(pid, []).append(offset)
            transactional.append((pid, offset))
        elif what == "abort":
            aborted.update(model.pop(pid, []))
        elif what == "commit":
            model.pop(pid, None)
    assert {pid: offsets[0] for pid, offsets in model.items()} == open_txns  # still open: their first batches
    skipped = {o for pid, o in transactional if any(e[0] == pid and e[1] <= o <= e[2] for e in entries)}
    assert skipped == aborted
