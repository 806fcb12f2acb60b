"""The transaction coordinator (core/streams/transactions.py) through the stream service on a
real state store and log: a transaction's records are appended when produced, routed only
when it commits, indexed as aborted when it aborts; the last stable offset holds
read_committed readers back while it is open; its producer is fenced by a new epoch; its
state survives a restart, and one caught between prepare and complete is completed then."""

from __future__ import annotations

from pathlib import Path
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from logbus.core.errors import InvalidTxnState, ProducerFenced
from logbus.core.log import batch as B
from logbus.core.log import format as F
from logbus.core.state import CF_METADATA, transaction_key
from logbus.core.state_pb2 import TransactionRecord
from logbus.core.streams.transactions import CHECK_INTERVAL_S
from logbus.core.types import AppendResult, Code, OffsetAndMetadata
from tests.core.test_produce import batch, outcome
from tests.core.test_stream_services import Services
from tests.unit.format_reader import r_aborted, r_committed_records


def txn_batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, 1, pid, epoch, seq, 1 << 20)
    for i, v in enumerate(values):
        b.append(i, 1000 + i, None, v, [])
    return bytes(b.build())


def markers(s: Services, topic: str, partition: int) -> list[tuple[int, int, int]]:
    """(offset, producer id, COMMIT/ABORT) of every control batch in the partition."""
    p = s.log.partition(topic, partition)
    data = p.read(0, 1 << 24, written=True).data
    found = []
    for info in F.scan_valid(data, 0, len(data), None)[0]:
        kind = F.control_type(data, info)
        if kind is not None:
            found.append((info.base_offset, info.producer_id, kind))
    return found


def committed_values(s: Services, topic: str, partition: int) -> list[bytes]:
    """What a read_committed reader gets: records below the last stable offset, without
    the aborted transactions' records."""
    r = s.streams.read_spans(topic, partition, 0, 1 << 24, committed=True)
    data = s.log.partition(topic, partition).read(0, 1 << 24).data
    aborted = s.streams.aborted_transactions(topic, partition, 0, r.next_offset)
    out = []
    for info in F.scan_valid(data, 0, len(data), None)[0]:
        if info.base_offset >= r.next_offset or info.attributes & F.ATTR_CONTROL:
            continue
        if info.attributes & F.ATTR_TRANSACTIONAL and any(
                a.producer_id == info.producer_id and a.first_offset <= info.base_offset <= a.last_offset
                for a in aborted):
            continue
        out.extend(rec.value for rec in B.decode(data[info.position: info.position + info.size]))
    return out


def begin(s: Services, txn: str = "tx", *parts: tuple[str, int]) -> tuple[int, int]:
    code, pid, epoch = outcome(s.loop, s.streams.init_transactional_producer(txn, 60_000))
    assert code is Code.NONE
    code, per = s.streams.add_partitions_to_txn(txn, pid, epoch, parts or [("t", 0)])
    assert code is Code.NONE and set(per.values()) == {Code.NONE}
    return pid, epoch


def test_committed_records_are_routed_and_read_committed_waits_for_them(tmp_path: Path) -> None:
    s = Services(tmp_path)
    try:
        s.topics.create_topic("t", {"partitions": 1})
        pid, epoch = begin(s)
        assert outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 0, b"t1", b"t2"))) == AppendResult(0, 1, 0)
        assert outcome(s.loop, s.streams.produce("t", 0, batch(b"plain"))).base_offset == 2
        assert s.routed == [("t", 0, 2)]  # the plain record at once; the transaction's not yet
        assert s.streams.last_stable_offset("t", 0) == 0 and s.streams.offsets("t", 0).high_watermark == 3
        assert committed_values(s, "t", 0) == []  # held back by the open transaction
        r = s.streams.read_spans("t", 0, 0, 1 << 24, committed=True)
        assert (r.next_offset, r.spans, r.high_watermark) == (0, [], 3)  # the high watermark as it is
        assert outcome(s.loop, s.streams.end_txn("tx", pid, epoch, True)) is Code.NONE
        assert markers(s, "t", 0) == [(3, pid, F.CONTROL_COMMIT)]
        assert s.committed == [("t", 0, pid, 0, 3)]  # routed now: its records in [0, 3)
        assert s.streams.last_stable_offset("t", 0) == 4
        assert committed_values(s, "t", 0) == [b"t1", b"t2", b"plain"]
        # EndTxn again (a retry after a lost answer) is answered as done; an abort now is not valid
        assert outcome(s.loop, s.streams.end_txn("tx", pid, epoch, True)) is Code.NONE
        assert outcome(s.loop, s.streams.end_txn("tx", pid, epoch, False)) is Code.INVALID_TXN_STATE
    finally:
        s.close()


def test_an_aborted_transaction_is_indexed_and_never_routed(tmp_path: Path) -> None:
    s = Services(tmp_path)
    try:
        s.topics.create_topic("t", {"partitions": 2})
        pid, epoch = begin(s, "tx", ("t", 0), ("t", 1))
        outcome(s.loop, s.streams.produce("t", 0, batch(b"before")))
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 0, b"a1")))
        outcome(s.loop, s.streams.produce("t", 0, batch(b"during")))
        assert outcome(s.loop, s.streams.end_txn("tx", pid, epoch, False)) is Code.NONE
        assert s.committed == [] and markers(s, "t", 0) == [(3, pid, F.CONTROL_ABORT)]
        assert markers(s, "t", 1) == [(0, pid, F.CONTROL_ABORT)]  # a partition added with no records: marked too
        assert [tuple(a)[:3] for a in s.streams.aborted_transactions("t", 0, 0, 4)] == [(pid, 1, 3)]
        assert s.streams.aborted_transactions("t", 0, 4, 10) == []
        assert committed_values(s, "t", 0) == [b"before", b"during"]
        # the next transaction of the same producer commits
        assert s.streams.add_partitions_to_txn("tx", pid, epoch, [("t", 0)])[0] is Code.NONE
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 1, b"c1")))
        assert outcome(s.loop, s.streams.end_txn("tx", pid, epoch, True)) is Code.NONE
        assert committed_values(s, "t", 0) == [b"before", b"during", b"c1"]
    finally:
        s.close()
    again = Services(tmp_path)  # the index is a file of the partition's: back after a restart
    try:
        assert [tuple(a)[:3] for a in again.streams.aborted_transactions("t", 0, 0, 10)] == [(pid, 1, 3)]
        assert committed_values(again, "t", 0) == [b"before", b"during", b"c1"]
    finally:
        again.close()


def test_transactional_batches_need_an_open_transaction_with_the_partition(tmp_path: Path) -> None:
    s = Services(tmp_path)
    try:
        s.topics.create_topic("t", {"partitions": 2})
        code, pid, epoch = outcome(s.loop, s.streams.init_transactional_producer("tx", 60_000))
        assert isinstance(outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 0, b"x"))), InvalidTxnState)
        s.streams.add_partitions_to_txn("tx", pid, epoch, [("t", 0)])
        assert isinstance(outcome(s.loop, s.streams.produce("t", 1, txn_batch(pid, epoch, 0, b"x"))), InvalidTxnState)
        assert isinstance(outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid + 99, 0, 0, b"x"))), InvalidTxnState)
        assert s.streams.offsets("t", 0).log_end_offset == 0 and s.streams.offsets("t", 1).log_end_offset == 0
        code, per = s.streams.add_partitions_to_txn("tx", pid, epoch, [("t", 0), ("nope", 0)])
        assert code is Code.UNKNOWN_TOPIC_OR_PARTITION and per[("nope", 0)] is Code.UNKNOWN_TOPIC_OR_PARTITION
        assert s.streams.add_partitions_to_txn("tx", pid + 1, epoch, [("t", 0)])[0] is Code.INVALID_PRODUCER_ID_MAPPING
        assert s.streams.add_partitions_to_txn("nope", pid, epoch, [("t", 0)])[0] is Code.INVALID_PRODUCER_ID_MAPPING
        assert outcome(s.loop, s.streams.init_transactional_producer("tx2", 0))[0] is Code.INVALID_TRANSACTION_TIMEOUT
        assert outcome(s.loop, s.streams.init_transactional_producer("tx2", 900_001))[0] is Code.INVALID_TRANSACTION_TIMEOUT
    finally:
        s.close()


def test_a_new_producer_aborts_the_open_transaction_and_fences_the_old_one(tmp_path: Path) -> None:
    s = Services(tmp_path)
    try:
        s.topics.create_topic("t", {"partitions": 1})
        pid, epoch = begin(s)
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 0, b"zombie")))
        code, pid2, epoch2 = outcome(s.loop, s.streams.init_transactional_producer("tx", 60_000))
        assert (code, pid2) == (Code.NONE, pid) and epoch2 > epoch
        assert markers(s, "t", 0) == [(1, pid, F.CONTROL_ABORT)] and s.committed == []
        # the old producer: fenced everywhere
        assert outcome(s.loop, s.streams.end_txn("tx", pid, epoch, True)) is Code.PRODUCER_FENCED
        assert s.streams.add_partitions_to_txn("tx", pid, epoch, [("t", 0)])[0] is Code.PRODUCER_FENCED
        assert isinstance(outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 1, b"late"))), ProducerFenced)
        assert committed_values(s, "t", 0) == []
    finally:
        s.close()


def test_a_transaction_past_its_timeout_is_aborted_under_a_new_epoch(tmp_path: Path) -> None:
    s = Services(tmp_path)
    try:
        s.topics.create_topic("t", {"partitions": 1})
        code, pid, epoch = outcome(s.loop, s.streams.init_transactional_producer("slow", 1000))
        s.streams.add_partitions_to_txn("slow", pid, epoch, [("t", 0)])
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 0, b"late")))
        txns = s.streams.txns
        started = txns.txns["slow"].started_ms
        assert txns.check(started + 1000) == 0  # not past it yet
        assert txns.check(started + 1001) == 1
        s.loop.run_until(lambda: bool(markers(s, "t", 0)))
        assert markers(s, "t", 0) == [(1, pid, F.CONTROL_ABORT)]
        assert outcome(s.loop, s.streams.end_txn("slow", pid, epoch, True)) is Code.PRODUCER_FENCED
        assert s.streams.last_stable_offset("t", 0) == 2 and committed_values(s, "t", 0) == []
        assert s.metrics.registry.get_sample_value("logbus_kafka_transactions_timed_out_total") == 1
        assert s.metrics.registry.get_sample_value("logbus_kafka_transactions_aborted_total") == 1
        assert 0 < CHECK_INTERVAL_S <= 10  # looked for at least every 10 s, as Kafka's default
    finally:
        s.close()


def test_offsets_are_held_until_the_transaction_commits(tmp_path: Path) -> None:
    s = Services(tmp_path)
    try:
        s.topics.create_topic("t", {"partitions": 1})
        pid, epoch = begin(s)
        assert s.streams.txn_commit_offsets("tx", "g", pid, epoch, {("in", 0): OffsetAndMetadata(5)}) \
            is Code.INVALID_TXN_STATE  # the group was not added
        assert s.streams.add_offsets_to_txn("tx", pid, epoch, "g") is Code.NONE
        # KIP-447: a consumer named with its generation is checked as OffsetCommit checks it
        assert s.streams.txn_commit_offsets("tx", "g", pid, epoch, {("in", 0): OffsetAndMetadata(5)},
                                            generation_id=3, member_id="gone") is Code.ILLEGAL_GENERATION
        assert s.streams.txn_commit_offsets("tx", "g", pid, epoch, {("in", 0): OffsetAndMetadata(5, "m")}) is Code.NONE
        assert s.streams.fetch_offsets("g", [("in", 0)]) == {("in", 0): None}
        assert s.streams.offsets_unstable("g", ("in", 0)) and not s.streams.offsets_unstable("g", ("in", 1))
        assert outcome(s.loop, s.streams.end_txn("tx", pid, epoch, True)) is Code.NONE
        om = s.streams.fetch_offsets("g", [("in", 0)])[("in", 0)]
        assert om is not None and (om.offset, om.metadata) == (5, "m")
        assert not s.streams.offsets_unstable("g", ("in", 0))
        # an aborted transaction's offsets are never applied
        s.streams.add_offsets_to_txn("tx", pid, epoch, "g")
        s.streams.txn_commit_offsets("tx", "g", pid, epoch, {("in", 0): OffsetAndMetadata(9)})
        assert outcome(s.loop, s.streams.end_txn("tx", pid, epoch, False)) is Code.NONE
        om = s.streams.fetch_offsets("g", [("in", 0)])[("in", 0)]
        assert om is not None and om.offset == 5
    finally:
        s.close()


def test_state_survives_a_restart_and_a_prepared_commit_is_completed_at_start(tmp_path: Path) -> None:
    s = Services(tmp_path)
    try:
        s.topics.create_topic("t", {"partitions": 1})
        pid, epoch = begin(s)
        outcome(s.loop, s.streams.produce("t", 0, batch(b"p0")))
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 0, b"c1", b"c2")))
        s.streams.add_offsets_to_txn("tx", pid, epoch, "g")
        s.streams.txn_commit_offsets("tx", "g", pid, epoch, {("in", 0): OffsetAndMetadata(7)})
        # a crash between PrepareCommit (stored) and the markers: as the coordinator leaves it
        rec = TransactionRecord()
        raw = s.state.get(CF_METADATA, transaction_key("tx"))
        assert raw is not None
        rec.ParseFromString(raw)
        assert rec.state == "Ongoing"
        rec.state = "PrepareCommit"
        s.state.put(CF_METADATA, transaction_key("tx"), rec, sync=True)
    finally:
        s.close()
    again = Services(tmp_path)
    try:
        again.loop.run_until(lambda: bool(again.committed))
        assert markers(again, "t", 0) == [(3, pid, F.CONTROL_COMMIT)]
        first = again.committed[0][3]
        assert again.committed == [("t", 0, pid, first, 3)] and first <= 1  # stored: the log end when added, or the first record
        assert committed_values(again, "t", 0) == [b"p0", b"c1", b"c2"]
        om = again.streams.fetch_offsets("g", [("in", 0)])[("in", 0)]
        assert om is not None and om.offset == 7
        # the same producer goes on under its epoch; a new one gets the next
        code, pid2, epoch2 = outcome(again.loop, again.streams.init_transactional_producer("tx", 60_000))
        assert (code, pid2, epoch2) == (Code.NONE, pid, epoch + 1)
    finally:
        again.close()


def test_an_open_transaction_holds_the_last_stable_offset_across_a_restart(tmp_path: Path) -> None:
    s = Services(tmp_path)
    try:
        s.topics.create_topic("t", {"partitions": 1})
        outcome(s.loop, s.streams.produce("t", 0, batch(b"p0")))
        pid, epoch = begin(s)
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 0, b"open")))
        outcome(s.loop, s.streams.produce("t", 0, batch(b"p2")))
    finally:
        s.close()
    again = Services(tmp_path)
    try:
        assert again.streams.last_stable_offset("t", 0) == 1
        assert committed_values(again, "t", 0) == [b"p0"]
        code, _, epoch2 = outcome(again.loop, again.streams.init_transactional_producer("tx", 60_000))
        assert code is Code.NONE and epoch2 > epoch  # the open one aborted first
        assert markers(again, "t", 0) == [(3, pid, F.CONTROL_ABORT)]
        assert committed_values(again, "t", 0) == [b"p0", b"p2"]
    finally:
        again.close()


def test_docs_format_md_is_enough_to_read_committed_records(tmp_path: Path) -> None:
    """tests/unit/format_reader.py (written from docs/format.md alone, section 4.5) gets
    what the broker's read_committed gets: aborted records left out, an open
    transaction's first record the end."""
    s = Services(tmp_path)
    try:
        s.topics.create_topic("t", {"partitions": 1})
        pid, epoch = begin(s)
        outcome(s.loop, s.streams.produce("t", 0, batch(b"p0")))
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 0, b"c1", b"c2")))
        outcome(s.loop, s.streams.end_txn("tx", pid, epoch, True))
        s.streams.add_partitions_to_txn("tx", pid, epoch, [("t", 0)])
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 2, b"a1")))
        outcome(s.loop, s.streams.produce("t", 0, batch(b"p1")))
        outcome(s.loop, s.streams.end_txn("tx", pid, epoch, False))
        pid2, epoch2 = begin(s, "tx2")
        outcome(s.loop, s.streams.produce("t", 0, batch(b"p2")))
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid2, epoch2, 0, b"open")))
        outcome(s.loop, s.streams.produce("t", 0, batch(b"p3")))
        pdir = Path(s.log.partition("t", 0).directory)
        expected = [b"p0", b"c1", b"c2", b"p1", b"p2"]
        assert committed_values(s, "t", 0) == expected
        assert [r.value for r in r_committed_records(pdir)] == expected
        assert [(pid_, first, last) for pid_, first, last, _ in r_aborted(pdir)] == [(pid, 4, 6)]
    finally:
        s.close()


def _aborts(s: Services) -> list[tuple[int, int, int]]:
    return [tuple(a)[:3] for a in s.streams.aborted_transactions("t", 0, 0, 1 << 40)]


def test_recovery_rebuilds_the_aborted_index_from_the_markers(tmp_path: Path) -> None:
    """A lost, damaged or behind ``aborted.txnindex`` is rebuilt from the log's abort
    markers when the partition opens; entries past a log end that recovery cut go."""
    s = Services(tmp_path)
    try:
        s.topics.create_topic("t", {"partitions": 1})
        index = Path(s.log.partition("t", 0).directory) / F.TXNINDEX_NAME
        assert index.read_bytes() == b""  # every partition has one, empty when nothing aborted
        pid, epoch = begin(s)
        outcome(s.loop, s.streams.produce("t", 0, batch(b"p0")))
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 0, b"a1", b"a2")))
        outcome(s.loop, s.streams.produce("t", 0, batch(b"p1")))
        outcome(s.loop, s.streams.end_txn("tx", pid, epoch, False))  # marker at 4
        s.streams.add_partitions_to_txn("tx", pid, epoch, [("t", 0)])
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 2, b"c1")))
        outcome(s.loop, s.streams.end_txn("tx", pid, epoch, True))  # marker at 6
        s.streams.add_partitions_to_txn("tx", pid, epoch, [("t", 0)])
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 3, b"a3")))
        outcome(s.loop, s.streams.end_txn("tx", pid, epoch, False))  # marker at 8
        expected = [b"p0", b"p1", b"c1"]
        assert _aborts(s) == [(pid, 1, 4), (pid, 7, 8)] and committed_values(s, "t", 0) == expected
        before = index.read_bytes()
    finally:
        s.close()

    def reopen(unclean: bool = False) -> Services:
        if unclean:
            (tmp_path / "log" / F.CLEAN_MARKER).unlink()
        return Services(tmp_path)

    for damage, unclean in ((lambda: index.unlink(), False),  # lost
                            (lambda: index.write_bytes(F.pack_aborted(F.AbortedTxn(pid, 9, 3, 0))), False),  # damaged
                            (lambda: index.write_bytes(before[:32]), True),  # behind: the last entry lost
                            (lambda: index.write_bytes(before + F.pack_aborted(F.AbortedTxn(pid, 7, 7, 8))), True)):
        damage()
        again = reopen(unclean)
        try:
            assert _aborts(again) == [(pid, 1, 4), (pid, 7, 8)], damage
            assert committed_values(again, "t", 0) == expected
            assert any(F.TXNINDEX_NAME in r for report in again.log.reports for r in report.rebuilt_indexes)
        finally:
            again.close()
        assert [e[:3] for e in F.unpack_aborted(index.read_bytes())] == [e[:3] for e in F.unpack_aborted(before)]

    # a crash that tore the log before the last abort marker: the entry past the new end goes
    seg = index.parent / (F.segment_name(0) + F.LOG_SUFFIX)
    data = seg.read_bytes()
    marker_at = next(info.position for info in F.scan_valid(data, 0, len(data), None)[0] if info.base_offset == 8)
    seg.write_bytes(data[:marker_at] + b"\x01" * 20)  # a torn batch where the marker was
    again = reopen(unclean=True)
    try:
        assert _aborts(again) == [(pid, 1, 4)]
        assert [e[:3] for e in F.unpack_aborted(index.read_bytes())] == [(pid, 1, 4)]
        assert again.streams.offsets("t", 0).high_watermark == 8  # offset 8 is given again
    finally:
        again.close()


def test_an_ongoing_transaction_whose_marker_is_in_the_log_is_completed_as_the_marker_says(tmp_path: Path) -> None:
    """EndTxn's Prepare* is written unsynced when there are markers to write: a power loss
    may take it (and Complete*) while the markers, synced before EndTxn was answered, stay.
    At the next start the marker decides: completed as it says, and a retried EndTxn is
    answered as done."""
    for commit in (True, False):
        s = Services(tmp_path / str(commit))
        try:
            s.topics.create_topic("t", {"partitions": 2})
            pid, epoch = begin(s, "tx", ("t", 0), ("t", 1))
            outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 0, b"r1")))
            ongoing = s.state.get(CF_METADATA, transaction_key("tx"))
            assert ongoing is not None
            assert outcome(s.loop, s.streams.end_txn("tx", pid, epoch, commit)) is Code.NONE
            s.committed.clear()
            s.state.put(CF_METADATA, transaction_key("tx"), ongoing, sync=True)  # what the store kept
        finally:
            s.close()
        again = Services(tmp_path / str(commit))
        try:
            kind = F.CONTROL_COMMIT if commit else F.CONTROL_ABORT
            again.loop.run_until(lambda: len(markers(again, "t", 1)) == 2)  # completed again: a marker each
            assert [m[1:] for m in markers(again, "t", 0)] == [(pid, kind)] * 2
            again.loop.run_until(lambda: again.streams.last_stable_offset("t", 0) == 3)
            assert committed_values(again, "t", 0) == ([b"r1"] if commit else [])
            assert bool(again.committed) == commit  # routed when committed, never when aborted
            assert outcome(again.loop, again.streams.end_txn("tx", pid, epoch, commit)) is Code.NONE
        finally:
            again.close()
