"""The operator's view of retained messages (``RetainedStore.browse``, ``to_json``): the
first N topics a filter matches in level order, against a brute-force model (Hypothesis),
every topic with no filter ("$" ones too), expired ones skipped, an operator's deletion
kept across a reopen, and the JSON form with its payload preview."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from logbus.core.retained import PREVIEW_BYTES, RetainedStore
from logbus.core.state import StateStore
from logbus.core.state_pb2 import RetainedRecord
from logbus.gateway.mqtt.subscriptions import matches as mqtt_matches  # brute force, one filter at a time
from tests.core.test_retained import TOPICS, filters


def rec(topic: str, payload: bytes = b"x", expires_at_ms: int = 0, time_ms: int = 1) -> RetainedRecord:
    return RetainedRecord(topic=topic, payload=payload, qos=1, time_ms=time_ms, expires_at_ms=expires_at_ms)


def level_order(topic: str) -> list[str]:
    return topic.split("/")


@settings(max_examples=300)
@given(retained=st.lists(TOPICS, max_size=12), flt=st.one_of(st.none(), filters()),
       limit=st.integers(min_value=0, max_value=14))
def test_browse_is_the_first_matching_topics_in_level_order(retained: list[str], flt: str | None,
                                                             limit: int) -> None:
    r = RetainedStore(None, lambda: 0)
    for t in retained:
        r.retain(rec(t))
    expected = sorted((t for t in set(retained) if flt is None or mqtt_matches(flt, t)), key=level_order)
    assert [m.topic for m in r.browse(flt, limit)] == expected[:limit]


def test_level_order_puts_a_topic_before_the_ones_below_it() -> None:
    r = RetainedStore(None, lambda: 0)
    for t in ("a-b", "a/c", "a/b/c", "a/b", "$SYS/x", "a"):
        r.retain(rec(t))
    assert [m.topic for m in r.browse()] == ["$SYS/x", "a", "a/b", "a/b/c", "a/c", "a-b"]
    assert [m.topic for m in r.browse("#")] == ["a", "a/b", "a/b/c", "a/c", "a-b"]  # MQTT: no "$" topics
    assert [m.topic for m in r.browse("a/#", 2)] == ["a", "a/b"]


def test_expired_ones_are_skipped_and_an_operators_deletion_survives_a_reopen(tmp_path: Path) -> None:
    now = [1000]
    store = StateStore(tmp_path / "state")
    r = RetainedStore(store, lambda: now[0])
    r.retain(rec("t/1", expires_at_ms=1500))
    r.retain(rec("t/2"))
    r.retain(rec("t/3"))
    now[0] = 1500
    assert [m.topic for m in r.browse("t/+", 1)] == ["t/2"]
    r.clear("t/2", sync=True)
    store.close()
    store = StateStore(tmp_path / "state")
    r = RetainedStore(store, lambda: now[0])
    r.load()
    assert [m.topic for m in r.browse()] == ["t/3"]
    store.close()


def test_the_json_form_previews_the_payload_as_text_or_base64() -> None:
    j = RetainedStore.to_json(rec("a", b"21.5", time_ms=1765036294123))
    assert j == {"topic": "a", "qos": 1, "payload": "21.5", "payload_encoding": "string", "payload_bytes": 4,
                 "payload_truncated": False, "stored_at": "2025-12-06T15:51:34.123Z", "stored_ms": 1765036294123,
                 "expires_at": None}
    assert (RetainedStore.to_json(rec("a", b"\xff\x00"))["payload"],
            RetainedStore.to_json(rec("a", b"\xff\x00"))["payload_encoding"]) == ("/wA=", "base64")
    long = ("é" * PREVIEW_BYTES).encode()  # cut inside a character: the preview ends before it
    j = RetainedStore.to_json(rec("a", long))
    assert (j["payload"], j["payload_encoding"], j["payload_bytes"], j["payload_truncated"]) == (
        "é" * (PREVIEW_BYTES // 2), "string", 2 * PREVIEW_BYTES, True)
    j = RetainedStore.to_json(rec("a", b"x" * (PREVIEW_BYTES - 1) + "é".encode()))
    assert (j["payload"], j["payload_truncated"]) == ("x" * (PREVIEW_BYTES - 1), True)
