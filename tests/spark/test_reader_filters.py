"""Spark's filterTag / filterSql in the decoder, without Spark: decode_chunk with a filter
returns exactly the reference decoder's rows whose properties column (plus tag and
protocol) the filter takes, whatever the records, and the options are checked."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logbus.core.message import Message
from logbus.filters import Selector
from logbus.filters.message_filter import MessageFilter
from logbus.filters.tags import TagFilter
from logbus.spark import schema as S
from logbus.spark.decode import decode_chunk, reference_rows
from logbus.spark.logfiles import DataDir
from logbus.spark.options import OptionError, Options
from tests.spark.conftest import env, written
from tests.spark.test_reader import as_reference

ALL = S.columns(True)
SELECTORS = ["temp > 30", "region = 'eu' AND temp <= 30", "tag = 'red' OR protocol = 'MQTT'", "temp IS NULL",
             "NOT (region LIKE 'e%')"]


def message(k: bytes | None, ts: int, tag: str, proto: int, temp: int | None, region: str | None,
            header: bytes | None) -> Message:
    e = env(tag=tag, protocol=proto)
    for name, value in (("temp", temp), ("region", region)):
        if value is not None:
            e.user_properties.add(key=name, value=str(value))
    return Message(k, b"v", ts, [("h", header)] if header is not None else [], e)


record = st.builds(message, st.none() | st.binary(max_size=8), st.integers(0, 2**41),
                   st.sampled_from(["", "red", "blue"]), st.integers(0, 4), st.none() | st.integers(0, 60),
                   st.none() | st.sampled_from(["eu", "us", "east"]), st.none() | st.binary(max_size=4))


def expected(row: dict[str, Any], keep: MessageFilter) -> bool:
    seen: dict[str, Any] = dict(row["properties"])
    if row["tag"] is not None:
        seen["tag"] = row["tag"]
    if row["protocol"] is not None:
        seen["protocol"] = row["protocol"]
    return keep.matches(row["tag"], lambda: seen)


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(record, min_size=1, max_size=15), min_size=1, max_size=4),
       sql=st.sampled_from([None, *SELECTORS]), tags=st.sampled_from([None, "red", "red || blue", "*"]),
       cut=st.integers(0, 40), names=st.sampled_from([ALL, ("offset", "value"), ("key", "headers"), ("tag",)]))
def test_filtered_decoding_matches_the_filtered_reference(tmp_path_factory: pytest.TempPathFactory,
                                                          batches: list[list[Message]], sql: str | None,
                                                          tags: str | None, cut: int, names: tuple[str, ...]) -> None:
    keep = MessageFilter(TagFilter.parse(tags) if tags else None, Selector.parse(sql) if sql else None)
    pf = DataDir(written(tmp_path_factory.mktemp("d") / "data", batches)).partition("t", 0)
    end = pf.end()
    lo = min(cut, end)
    fast: list[dict[str, Any]] = []
    ref: list[dict[str, Any]] = []
    for data, infos in pf.chunks(lo, end):
        rb = decode_chunk(data, infos, lo, end, "t", 0, names, keep)
        if rb is not None:
            assert rb.schema.names == list(names)
            fast.extend(rb.to_pylist())
        ref.extend(r for r in reference_rows(data, infos, "t", 0) if r["offset"] >= lo and expected(r, keep))
    if names == ALL:
        assert [as_reference(r) for r in fast] == ref
    else:
        assert len(fast) == len(ref)
        if "offset" in names:
            assert [r["offset"] for r in fast] == [r["offset"] for r in ref]


def test_options() -> None:
    base = {"path": "/x", "subscribe": "t"}
    o = Options.parse({**base, "filterSql": "temp > 30", "filterTag": "red"}, streaming=False)
    keep = o.message_filter()
    assert keep is not None and keep.matches("red", lambda: {"temp": "31"})
    assert Options.parse(base, streaming=False).message_filter() is None
    with pytest.raises(OptionError, match=r"option filterSql: expected a name, a literal or \(, found the end"):
        Options.parse({**base, "filterSql": "temp >"}, streaming=True)
    with pytest.raises(OptionError, match="option filterTag: an empty tag"):
        Options.parse({**base, "filterTag": "a || "}, streaming=False)
