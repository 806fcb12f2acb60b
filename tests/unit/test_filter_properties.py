"""What a selector sees of a message (filters.properties) and the filter a binding's
arguments name (filters.message_filter)."""

from __future__ import annotations

import pytest

from logbus.core.envelope_pb2 import Envelope
from logbus.filters import FilterError
from logbus.filters.message_filter import MessageFilter
from logbus.filters.properties import message_properties


def test_system_fields_user_properties_and_headers() -> None:
    env = Envelope(protocol=Envelope.MQTT, mqtt_topic="a/b", tag="T", content_type="json", delivery_count=2)
    env.priority = 5
    env.user_properties.add(key="region", value="eu")
    env.user_properties.add(key="tag", value="shadowed")
    env.amqp_headers = b"\x00"  # raw bytes: never a property by itself
    props = message_properties(env, [("k", b"v"), ("bin", b"\xff"), ("none", None)], key=b"a/b",
                               topic="amq.topic", timestamp=1700000000000,
                               typed_headers={"temp": 35, "hot": True, "name": b"x", "bad": b"\xfe", "k": 7})
    assert props == {
        "protocol": "MQTT", "mqtt_topic": "a/b", "tag": "T", "content_type": "json", "delivery_count": 2,
        "priority": 5, "region": "eu", "k": 7, "temp": 35, "hot": True, "name": "x",
        "key": "a/b", "topic": "amq.topic", "timestamp": 1700000000000,
    }


def test_an_empty_envelope_has_only_the_record() -> None:
    assert message_properties(Envelope(), [], key=None, topic="t") == {"topic": "t"}


def test_message_filter_from_arguments() -> None:
    assert MessageFilter.from_arguments({"x-match": "all"}) is None
    f = MessageFilter.from_arguments({"x-filter-tag": "A || B", "x-filter-sql": "n > 1"})
    assert f is not None
    asked: list[int] = []

    def props() -> dict[str, int]:
        asked.append(1)
        return {"n": 2}

    assert f.matches("A", props) and not f.matches("C", props)
    assert len(asked) == 1  # the properties are not built when the tag already says no
    assert MessageFilter.from_arguments({"x-filter-sql": b"n = 1"}) is not None
    with pytest.raises(FilterError, match="x-filter-sql: is not UTF-8"):
        MessageFilter.from_arguments({"x-filter-sql": b"\xff"})
    with pytest.raises(FilterError, match="filter-sql: expected"):
        MessageFilter.from_arguments({"filter-sql": "n >"}, "filter-tag", "filter-sql")
