"""MQTT topics <-> AMQP keys on amq.topic (gateway/mqtt/topic_map.py): the mapping is its
own inverse, and an MQTT filter mapped to a binding key matches, in the AMQP topic
matcher, exactly the topics MQTT's own rules match."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logbus.core.routing.topic_trie import TopicTrie
from logbus.gateway.mqtt.subscriptions import matches as mqtt_matches  # MQTT section 4.7
from logbus.gateway.mqtt.topic_map import Unmappable, filter_to_amqp, to_amqp, to_mqtt, to_mqtt_name

# level text: the characters that matter (separators of either side, wildcards' neighbours,
# space, non-ASCII) and a few ordinary ones
LEVEL_CHARS = st.sampled_from(list("ab./ *é€") + ["\U0001f600"])
levels = st.lists(st.text(LEVEL_CHARS.filter(lambda c: c != "/"), max_size=4), min_size=1, max_size=5)
topics = levels.map("/".join).filter(bool)  # MQTT topic names: never empty, never "+" or "#"


@st.composite
def filters(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.one_of(st.just("+"), st.text(LEVEL_CHARS.filter(lambda c: c != "/"), max_size=3)),
                          min_size=1, max_size=4))
    parts = [p for p in parts if p != "*"] or ["+"]
    if draw(st.booleans()):
        parts.append("#")
    return "/".join(parts)


@given(st.text())
def test_the_mapping_is_its_own_inverse(text: str) -> None:
    assert to_mqtt(to_amqp(text)) == text
    assert to_amqp(to_mqtt(text)) == text


def test_examples() -> None:
    assert to_amqp("sensors/kitchen/temp") == "sensors.kitchen.temp"  # as RabbitMQ maps it
    assert to_amqp("v1.2/status") == "v1/2.status"  # RabbitMQ: v1.2.status, then v1/2/status
    assert to_mqtt("v1/2.status") == "v1.2/status"
    assert to_amqp("/a//b/") == ".a..b."
    assert to_amqp("café au lait/🙂") == "café au lait.🙂"
    assert filter_to_amqp("sensors/+/temp") == "sensors.*.temp"
    assert filter_to_amqp("v1.2/#") == "v1/2.#"
    assert filter_to_amqp("#") == "#"


def test_what_cannot_be_said_on_the_other_side_is_refused() -> None:
    with pytest.raises(Unmappable):
        filter_to_amqp("a/*/b")  # a literal '*' level would be AMQP's wildcard
    assert filter_to_amqp("a/x*/b") == "a.x*.b"  # inside a level it is a plain character
    with pytest.raises(Unmappable):
        to_mqtt_name("a.b+c")
    with pytest.raises(Unmappable):
        to_mqtt_name("a.#")
    assert to_mqtt_name("a.b") == "a/b"


@given(filters(), topics)
def test_a_mapped_filter_matches_what_mqtt_matches(flt: str, topic: str) -> None:
    trie: TopicTrie[str] = TopicTrie()
    trie.add(filter_to_amqp(flt), "sub")
    assert (trie.match(to_amqp(topic)) == {"sub"}) == mqtt_matches(flt, topic), (flt, topic)
