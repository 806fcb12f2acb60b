"""Hypothesis strategies for valid MQTT packets of a given version (3.1.1 or 5.0), built
over the codec's own dataclasses and property table."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from logbus.gateway.mqtt import reasons as R
from logbus.gateway.mqtt.packets import (
    Auth, ConnAck, Connect, Disconnect, Packet, PingReq, PingResp, PubAck, PubComp, Publish,
    PubRec, PubRel, SubAck, Subscribe, Subscription, UnsubAck, Unsubscribe, Will,
)  # fmt: skip
from logbus.gateway.mqtt.properties import ALLOWED, NO_PROPERTIES, SPECS, Properties
from logbus.gateway.mqtt.topics import check_topic_filter
from logbus.gateway.mqtt.wire import (
    AUTH, CONNACK, CONNECT, DISCONNECT, MAX_VBI, MQTT_3_1, MQTT_5, PUBACK, PUBCOMP, PUBLISH,
    PUBREC, PUBREL, SUBACK, SUBSCRIBE, UNSUBACK, UNSUBSCRIBE, WILL,
)  # fmt: skip

# any UTF-8 an MQTT string may hold: no surrogate, no U+0000
text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
level = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/+#"),
                max_size=6)  # fmt: skip
topic_names = st.lists(level, min_size=1, max_size=4).map("/".join).filter(bool)
packet_ids = st.integers(1, 0xFFFF)
binary = st.binary(max_size=24)


@st.composite
def topic_filters(draw: st.DrawFn, shared: bool = False) -> str:
    levels = draw(st.lists(st.one_of(level, st.just("+")), min_size=1, max_size=4))
    if draw(st.booleans()):
        levels.append("#")
    topic_filter = "/".join(levels)
    if shared:
        topic_filter = f"$share/{draw(level.filter(bool))}/{topic_filter}"
    return topic_filter


def _valid_filter(topic_filter: str, v5: bool) -> bool:
    try:
        check_topic_filter(topic_filter, v5)
    except R.MqttError:
        return False
    return True


_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "byte": st.integers(0, 1),
    "u16": st.integers(1, 0xFFFF),
    "u32": st.integers(1, 0xFFFFFFFF),
    "vbi": st.integers(1, MAX_VBI),
    "string": text,
    "binary": binary,
    "pair": st.lists(st.tuples(text, text), min_size=1, max_size=3).map(tuple),
}


def properties(packet: int) -> st.SearchStrategy[Properties]:
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for ident in ALLOWED[packet]:
        spec = SPECS[ident]
        values = _VALUES[spec.kind]
        if spec.name == "subscription_identifiers":
            values = st.lists(values, min_size=1, max_size=3 if packet == PUBLISH else 1).map(tuple)
        optional[spec.name] = values
    return (st.fixed_dictionaries({}, optional=optional)
            .filter(lambda d: "authentication_data" not in d or "authentication_method" in d)
            .map(lambda d: Properties(**d)))  # fmt: skip


def _props(packet: int, version: int) -> st.SearchStrategy[Properties]:
    return properties(packet) if version == MQTT_5 else st.just(NO_PROPERTIES)


def _codes(v5: frozenset[int], v4: frozenset[int] | None, version: int) -> st.SearchStrategy[int]:
    if version == MQTT_5:
        return st.sampled_from(sorted(v5))
    return st.sampled_from(sorted(v4)) if v4 is not None else st.just(0)


@st.composite
def connects(draw: st.DrawFn, version: int) -> Connect:
    level = MQTT_3_1 if version != MQTT_5 and draw(st.booleans()) else version
    username = draw(st.none() | text)
    password = draw(st.none() | binary)
    if version != MQTT_5 and username is None:
        password = None
    will = draw(st.none() | st.builds(Will, topic_names, binary, st.integers(0, 2), st.booleans(),
                                      _props(WILL, version)))  # fmt: skip
    return Connect(draw(text), level, draw(st.booleans()), draw(st.integers(0, 0xFFFF)), username,
                   password, will, draw(_props(CONNECT, version)))  # fmt: skip


@st.composite
def publishes(draw: st.DrawFn, version: int) -> Publish:
    qos = draw(st.integers(0, 2))
    return Publish(draw(topic_names), draw(st.binary(max_size=64)), qos, draw(st.booleans()),
                   draw(st.booleans()) if qos else False, draw(packet_ids) if qos else 0,
                   draw(_props(PUBLISH, version)))  # fmt: skip


@st.composite
def subscriptions(draw: st.DrawFn, version: int) -> Subscription:
    if version != MQTT_5:
        return Subscription(draw(topic_filters().filter(lambda f: _valid_filter(f, False))),
                            draw(st.integers(0, 2)))  # fmt: skip
    shared = draw(st.booleans())
    topic_filter = draw(topic_filters(shared).filter(lambda f: _valid_filter(f, True)))
    return Subscription(topic_filter, draw(st.integers(0, 2)), not shared and draw(st.booleans()),
                        draw(st.booleans()), draw(st.integers(0, 2)))  # fmt: skip


def _ack(cls: type, kind: int, v5_codes: frozenset[int], version: int) -> st.SearchStrategy[Packet]:
    return st.builds(cls, packet_ids, _codes(v5_codes, None, version), _props(kind, version))


def packets(version: int) -> st.SearchStrategy[Packet]:
    """Any valid packet but CONNECT, in ``version``."""
    filters = topic_filters().filter(lambda f: _valid_filter(f, version == MQTT_5))
    options: list[st.SearchStrategy[Any]] = [
        publishes(version),
        _ack(PubAck, PUBACK, R.PUBACK_REASONS, version),
        _ack(PubRec, PUBREC, R.PUBREC_REASONS, version),
        _ack(PubRel, PUBREL, R.PUBREL_REASONS, version),
        _ack(PubComp, PUBCOMP, R.PUBCOMP_REASONS, version),
        st.builds(ConnAck, st.booleans(), _codes(R.CONNACK_REASONS, R.CONNACK_RETURN_CODES, version),
                  _props(CONNACK, version)),
        st.builds(Subscribe, packet_ids, st.lists(subscriptions(version), min_size=1, max_size=3)
                  .map(tuple), _props(SUBSCRIBE, version)),
        st.builds(SubAck, packet_ids, st.lists(_codes(R.SUBACK_REASONS, R.SUBACK_RETURN_CODES,
                  version), min_size=1, max_size=4).map(tuple), _props(SUBACK, version)),
        st.builds(Unsubscribe, packet_ids, st.lists(filters, min_size=1, max_size=3).map(tuple),
                  _props(UNSUBSCRIBE, version)),
        st.just(PingReq()),
        st.just(PingResp()),
        st.builds(Disconnect, _codes(R.DISCONNECT_REASONS, None, version),
                  _props(DISCONNECT, version)),
    ]  # fmt: skip
    if version == MQTT_5:
        options += [
            st.builds(UnsubAck, packet_ids, st.lists(st.sampled_from(sorted(R.UNSUBACK_REASONS)),
                      max_size=4).map(tuple), properties(UNSUBACK)),
            st.builds(Auth, st.sampled_from(sorted(R.AUTH_REASONS)), properties(AUTH)),
        ]  # fmt: skip
    else:
        options.append(st.builds(UnsubAck, packet_ids))
    return st.one_of(options)


def any_packet(version: int) -> st.SearchStrategy[Packet]:
    return st.one_of(connects(version), packets(version))
