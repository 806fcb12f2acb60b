"""Tiered storage's manifest and bucket names (core/log/manifest.py): no sockets, no disk."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logbus.core.log.format import AbortedTxn
from logbus.core.log.manifest import (
    Manifest,
    ManifestDamaged,
    RemoteSegment,
    RemoteUrlError,
    parse_remote,
    partition_prefix,
)


def segments(sizes: list[int], start: int = 0) -> tuple[RemoteSegment, ...]:
    out, at = [], start
    for i, n in enumerate(sizes):
        out.append(RemoteSegment(at, at + n, 100 * n, 1000 + i, f"id{i:04d}", 5))
        at += n
    return tuple(out)


@given(st.lists(st.integers(1, 10_000), max_size=20), st.integers(0, 1000), st.integers(0, 2**40))
def test_a_manifest_reads_back_as_written(sizes: list[int], start: int, version: int) -> None:
    m = Manifest("tele/metry ü", 3, "abc123", version, start, segments(sizes, start),
                 (AbortedTxn(7, start, start + 1, start),))
    assert Manifest.decode(m.encode()) == m
    assert m.end_offset == start + sum(sizes)


@given(st.binary(max_size=300))
def test_anything_else_is_damaged_never_another_error(data: bytes) -> None:
    try:
        Manifest.decode(data)
    except ManifestDamaged:
        pass


@pytest.mark.parametrize("change, why", [
    (lambda d: d.replace(b'"format":1', b'"format":2'), "format 1"),
    (lambda d: d.replace(b'"next_offset":10', b'"next_offset":9'), "does not follow"),
    (lambda d: d.replace(b'"id":"id0000"', b'"id":"../x"'), "well formed"),
    (lambda d: d.replace(b'"version":4', b'"version":"4"'), "not an integer"),
    (lambda d: d[:-5], "does not parse"),
])
def test_a_broken_manifest_says_why(change, why) -> None:  # type: ignore[no-untyped-def]
    good = Manifest("t", 0, "abc", 4, 0, segments([10, 5])).encode()
    with pytest.raises(ManifestDamaged, match=why):
        Manifest.decode(change(good))


def test_adding_and_dropping_segments() -> None:
    m = Manifest("t", 0, "abc", 1, 0, segments([10, 10, 10]))
    new, gone = m.without_below(15)
    assert (new.log_start_offset, new.start_offset, new.version) == (15, 15, 2)
    assert [s.base_offset for s in gone] == [0] and [s.base_offset for s in new.segments] == [10, 20]
    same, none = new.without_below(3)  # never back
    assert same.log_start_offset == 15 and not none
    grown = new.with_segment(RemoteSegment(30, 40, 10, 0, "x1"))
    assert grown.end_offset == 40 and grown.version == 3


def test_remote_locations() -> None:
    assert parse_remote("s3://bucket") == ("bucket", "")
    assert parse_remote("s3://my.bucket-1/a/b/") == ("my.bucket-1", "a/b/")
    for bad in ("http://bucket/x", "s3:///x", "s3://ab", "s3://Bad_Bucket/x", "s3://Bucket", "s3://b?x=1", "bucket/prefix"):
        with pytest.raises(RemoteUrlError):
            parse_remote(bad)
    assert partition_prefix("p/", ".odd/name", 2) == "p/%2Eodd%2Fname/2/"
