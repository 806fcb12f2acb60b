"""RecordBatch v2 codec: golden layout, validation, base-offset rewrite, fuzzing."""

from __future__ import annotations

import struct

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from logbus.core.errors import CorruptBatch, RecordTooLarge
from logbus.core.log import batch as B
from logbus.core.log import format as F
from logbus.core.log.batch import Record

records_st = st.lists(
    st.builds(
        Record,
        st.none() | st.binary(max_size=64),
        st.none() | st.binary(max_size=256),
        st.none() | st.integers(0, 2**41),
        st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=3),
    ),
    min_size=1,
    max_size=20,
)


def test_header_layout_golden() -> None:
    buf = B.build([Record(b"k", b"value", 1_700_000_000_000)], base_offset=42)
    base, length, epoch, magic, crc, attrs, lod, first_ts, max_ts, pid, pepoch, bseq, count = F.HEADER.unpack_from(buf)
    assert (base, magic, lod, first_ts, max_ts, pid, pepoch, bseq, count) == (
        42, 2, 0, 1_700_000_000_000, 1_700_000_000_000, -1, -1, -1, 1
    )
    assert length + 12 == len(buf) and attrs == 0 and epoch == -1
    assert F.HEADER_SIZE == 61


@given(records_st, st.integers(0, 2**40))
def test_build_validate_decode_round_trip(records: list[Record], base: int) -> None:
    buf = B.build(records, base, timestamp_ms=123)
    info = B.validate(buf)
    assert info.base_offset == base and info.records_count == len(records)
    assert info.size == len(buf) and info.next_offset == base + len(records)
    out = list(B.decode(buf))
    assert [r.offset for r in out] == list(range(base, base + len(records)))
    for r, o in zip(records, out):
        assert (o.key, o.value, o.headers) == (r.key, r.value, [(k, v) for k, v in r.headers])
        assert o.timestamp == (123 if r.timestamp is None else r.timestamp)


def test_set_base_offset_keeps_crc_valid() -> None:
    buf = B.build([Record(None, b"x")] * 3, 0)
    B.set_base_offset(buf, 0, 1000)
    assert B.validate(buf).base_offset == 1000
    assert [r.offset for r in B.decode(buf)] == [1000, 1001, 1002]


def test_crc_mismatch_is_corrupt() -> None:
    buf = B.build([Record(b"k", b"v" * 10)], 0)
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptBatch, match="CRC"):
        B.validate(buf)


def test_bad_magic_and_truncation_are_corrupt() -> None:
    buf = B.build([Record(b"k", b"v")], 0)
    bad = bytearray(buf)
    bad[16] = 1
    with pytest.raises(CorruptBatch, match="magic"):
        B.validate(bad)
    with pytest.raises(CorruptBatch, match="truncated"):
        B.validate(buf[:-1])
    with pytest.raises(CorruptBatch, match="truncated"):
        B.validate(buf[:20])


def test_split_validate_several_batches_and_limits() -> None:
    a = B.build([Record(None, b"a")] * 2, 0)
    b = B.build([Record(None, b"b")], 0)
    infos = B.split_validate(bytes(a + b), 1 << 20)
    assert [i.records_count for i in infos] == [2, 1]
    with pytest.raises(RecordTooLarge):
        B.split_validate(bytes(a), len(a) - 1)
    with pytest.raises(CorruptBatch):
        B.split_validate(b"", 1 << 20)
    with pytest.raises(CorruptBatch):
        B.split_validate(bytes(a + b[:30]), 1 << 20)


def test_count_must_match_last_offset_delta() -> None:
    buf = B.build([Record(None, b"a")] * 2, 0)
    struct.pack_into(">i", buf, 57, 5)  # records_count (inside the CRC: recompute)
    from aiokafka.record.util import calc_crc32c

    struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
    with pytest.raises(CorruptBatch, match="count"):
        B.split_validate(bytes(buf), 1 << 20)


@pytest.mark.parametrize("codec", [1])  # gzip: in the standard library; others: Kafka gateway tests
def test_compressed_batches_validate_and_decode(codec: int) -> None:
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
    for i in range(50):
        builder.append(i, 1000 + i, None, b"hello %d" % i, [])
    buf = builder.build()
    info = B.split_validate(bytes(buf), 1 << 20)[0]
    assert info.attributes & B.COMPRESSION_MASK == codec and info.records_count == 50
    assert [r.value for r in B.decode(buf)][-1] == b"hello 49"


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_validate_garbage_raises_only_corrupt(data: bytes) -> None:
    try:
        B.split_validate(data, 1 << 20)
    except (CorruptBatch, RecordTooLarge):
        pass


@settings(max_examples=300)
@given(records_st, st.data())
def test_validate_mutated_batch(records: list[Record], data: st.DataObject) -> None:
    buf = B.build(records, 0)
    pos = data.draw(st.integers(0, len(buf) - 1))
    buf[pos] ^= data.draw(st.integers(1, 255))
    try:
        info = B.split_validate(bytes(buf), 1 << 20)[0]
    except (CorruptBatch, RecordTooLarge):
        return
    # only the base offset and the leader epoch are outside the CRC
    assert pos < 8 or 12 <= pos < 16, f"mutation at {pos} passed validation: {info}"
