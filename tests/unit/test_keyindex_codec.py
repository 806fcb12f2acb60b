"""The ``.keyindex`` codec and the in-memory runs, with no disk: round trips, damage
detected as KeyIndexDamaged and nothing else, runs and their hash-range pieces against
a plain sorted list."""

from __future__ import annotations

from bisect import bisect_left

from hypothesis import given, settings
from hypothesis import strategies as st

from logbus.core.log import keyindex as K
from logbus.core.log.format import KEY_HEADER, key_hash, message_id_hash

ENTRY = st.integers(min_value=0, max_value=2**64 - 1)
# few distinct hashes, so that lookups meet runs of equal hashes
HASHES = st.sampled_from([0, 1, 7, 0x7FFFFFFF, 0xFFFFFFFF, 0x12345678])
CLUSTERED = st.builds(lambda h, r: h << 32 | r, HASHES, st.integers(min_value=0, max_value=2**32 - 1))


def reference(entries: list[int], h: int) -> list[int]:
    return sorted(e & 0xFFFFFFFF for e in entries if e >> 32 == h)


@given(st.lists(ENTRY, max_size=300), st.integers(min_value=0, max_value=2**64 - 1))
def test_round_trip(entries: list[int], log_size: int) -> None:
    data = K.encode(entries, log_size)
    assert len(data) == K.HEADER_SIZE + 8 * len(entries)
    assert list(K.decode(data, log_size)) == sorted(entries)
    assert list(K.decode(data)) == sorted(entries)


def test_golden_bytes() -> None:
    data = K.encode([key_hash(b"k") << 32 | 5, 1 << 32 | 2], 4096)
    assert data[:4] == b"LBKX"
    assert data[4:8] == b"\x00\x01\x00\x00"  # version 1, flags 0
    assert data[8:16] == (4096).to_bytes(8, "big")
    assert data[16:20] == (2).to_bytes(4, "big")
    assert data[24:32] == bytes.fromhex("0000000100000002")  # sorted: hash 1 first
    assert key_hash(b"123456789") == 0xCBF43926  # CRC-32 (ISO-HDLC) check value
    assert message_id_hash("m") != key_hash(b"m")  # a key and an id of the same bytes hash apart


@given(st.binary(max_size=200), st.one_of(st.none(), st.integers(min_value=0, max_value=2**64 - 1)))
def test_arbitrary_bytes_raise_only_damaged(data: bytes, log_size: int | None) -> None:
    try:
        K.decode(data, log_size)
    except K.KeyIndexDamaged:
        pass


@given(st.lists(ENTRY, min_size=1, max_size=50), st.data())
def test_truncated_or_changed_files_are_damaged(entries: list[int], data: st.DataObject) -> None:
    good = K.encode(entries, 1000)
    cut = data.draw(st.integers(min_value=0, max_value=len(good) - 1))
    try:
        K.decode(good[:cut], 1000)
        raise AssertionError("a truncated key index decoded")
    except K.KeyIndexDamaged:
        pass
    at = data.draw(st.integers(min_value=0, max_value=len(good) - 1))
    if 8 <= at < 16:  # log_size: caught by the comparison with the log instead
        return
    bit = data.draw(st.integers(min_value=0, max_value=7))
    changed = bytearray(good)
    changed[at] ^= 1 << bit
    try:
        K.decode(bytes(changed), 1000)
        raise AssertionError(f"a key index with byte {at} changed decoded")
    except K.KeyIndexDamaged:
        pass


def test_header_checks_the_log_size() -> None:
    data = K.encode([1, 2, 3], 500)
    try:
        K.decode(data, 501)
        raise AssertionError("a key index for another log size decoded")
    except K.KeyIndexDamaged as e:
        assert "covers 500 bytes" in str(e)
    wrong = KEY_HEADER.pack(b"LBKX", 2, 0, 500, 3, 0) + data[K.HEADER_SIZE:]
    try:
        K.decode(wrong, 500)
        raise AssertionError("version 2 decoded")
    except K.KeyIndexDamaged as e:
        assert "version 2" in str(e)


@settings(max_examples=60)
@given(st.lists(st.lists(CLUSTERED, max_size=400), max_size=40), HASHES)
def test_runs_answer_as_a_sorted_list(slices: list[list[int]], h: int) -> None:
    runs = K.Runs()
    everything: list[int] = []
    for s in slices:
        everything += s
        runs.add(list(s))
    assert runs.count == len(everything)
    assert runs.candidates(h) == reference(everything, h)
    n = runs.pieces()
    merged = [e for k in range(n) for e in runs.piece(k, n)]
    assert merged == sorted(everything)


def test_runs_merge_small_neighbours_and_stop_at_the_cap() -> None:
    runs = K.Runs()
    for i in range(200):
        runs.add([i << 32 | j for j in range(1000)])
    assert len(runs.tail) < K.TAIL_MAX
    assert max(len(r) for r in runs.runs) <= K.RUN_MERGE_MAX
    assert len(runs.runs) < 40  # 200 slices merged into few runs
    assert runs.candidates(7) == list(range(1000))


@settings(max_examples=30)
@given(st.lists(CLUSTERED, max_size=3000), st.sampled_from([1, 2, 4, 16, 64]))
def test_pieces_split_the_hash_space(entries: list[int], n: int) -> None:
    runs = K.Runs()
    runs.add(list(entries))
    runs.flush()
    pieces = [list(runs.piece(k, n)) for k in range(n)]
    assert [e for p in pieces for e in p] == sorted(entries)
    if n > 1:
        for k, p in enumerate(pieces):
            assert all(e >> 64 - (n.bit_length() - 1) == k for e in p)


def test_probe_finds_the_run_of_one_hash() -> None:
    from array import array

    arr = array("Q", sorted([5 << 32 | 1, 5 << 32 | 9, 6 << 32, 4 << 32 | 3]))
    out: list[int] = []
    K.probe(arr, 5, out)
    assert out == [1, 9]
    out.clear()
    K.probe(arr, 3, out)
    assert out == [] and bisect_left(arr, 3 << 32) == 0
