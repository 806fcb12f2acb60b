"""Retained messages (core/retained.py) on real RocksDB: one per topic, an empty payload
clears, they survive a reopen, expired ones are not returned, and a filter finds exactly
the retained topics MQTT's matching rules select (a brute-force model, Hypothesis)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from logbus.core.retained import RetainedStore
from logbus.core.state import StateStore
from logbus.core.state_pb2 import RetainedRecord
from logbus.gateway.mqtt.subscriptions import matches as mqtt_matches  # brute force, one filter at a time


def rec(topic: str, payload: bytes = b"x", expires_at_ms: int = 0) -> RetainedRecord:
    return RetainedRecord(topic=topic, payload=payload, qos=1, time_ms=1, expires_at_ms=expires_at_ms)


def test_one_per_topic_cleared_by_an_empty_payload_and_kept_across_a_reopen(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    r = RetainedStore(store, lambda: 1000)
    r.retain(rec("a/b", b"1"))
    r.retain(rec("a/b", b"2"))  # replaces
    r.retain(rec("a/c", b"3"))
    r.retain(rec("a/c", b""))  # clears
    r.retain(rec("never/retained", b""))  # clearing nothing is fine
    assert [(m.topic, m.payload) for m in r.match("a/#")] == [("a/b", b"2")]
    store.close()
    store = StateStore(tmp_path / "state")
    r = RetainedStore(store, lambda: 1000)
    r.load()
    assert r.count == 1
    assert [(m.topic, m.payload) for m in r.match("+/+")] == [("a/b", b"2")]
    assert r.match("a/c") == [] and r.match("a") == []
    store.close()


def test_an_expired_retained_message_is_not_returned_and_is_deleted(tmp_path: Path) -> None:
    now = [1000]
    store = StateStore(tmp_path / "state")
    r = RetainedStore(store, lambda: now[0])
    r.retain(rec("t", expires_at_ms=1500))
    assert [m.topic for m in r.match("t")] == ["t"]
    now[0] = 1500
    assert r.match("#") == [] and r.count == 0
    store.close()


def test_dollar_topics_are_not_matched_by_a_first_level_wildcard() -> None:
    r = RetainedStore(None, lambda: 0)
    for t in ("$SYS/uptime", "a/$b", "x"):
        r.retain(rec(t))
    assert [m.topic for m in r.match("#")] == ["a/$b", "x"]
    assert [m.topic for m in r.match("+/+")] == ["a/$b"]
    assert [m.topic for m in r.match("$SYS/#")] == ["$SYS/uptime"]


LEVEL = st.sampled_from(["a", "b", "a-b", "", "$s", "é"])
TOPICS = st.lists(LEVEL, min_size=1, max_size=4).map("/".join).filter(bool)


@st.composite
def filters(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.one_of(LEVEL, st.just("+")), min_size=1, max_size=4))
    if draw(st.booleans()):
        parts.append("#")
    return "/".join(parts)


@settings(max_examples=300)
@given(retained=st.lists(TOPICS, max_size=12), cleared=st.lists(TOPICS, max_size=4), flt=filters())
def test_a_filter_finds_exactly_the_matching_retained_topics(retained: list[str], cleared: list[str],
                                                             flt: str) -> None:
    r = RetainedStore(None, lambda: 0)
    for t in retained:
        r.retain(rec(t))
    for t in cleared:
        r.clear(t)
    live = set(retained) - set(cleared)
    assert r.count == len(live)
    assert [m.topic for m in r.match(flt)] == sorted(t for t in live if mqtt_matches(flt, t))
