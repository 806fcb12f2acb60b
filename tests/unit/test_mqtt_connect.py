"""CONNECT decisions (gateway/mqtt/connect.py): client identifiers, keep alive, session
expiry and the client's limits, per MQTT 3.1, 3.1.1 and 5.0; and the CONNACK each
version gets, checked through the codec (what is encoded decodes back)."""

from __future__ import annotations

import itertools

import pytest

from logbus.gateway.mqtt import MQTT_3_1, MQTT_3_1_1, MQTT_5, ConnAck, Connect, Properties, decode, encode
from logbus.gateway.mqtt.connect import (
    DEFAULT_RECEIVE_MAXIMUM,
    NEVER_EXPIRES,
    Accepted,
    Refused,
    ServerLimits,
    accept_connect,
    keep_alive_deadline,
)
from logbus.gateway.mqtt.reasons import CLIENT_IDENTIFIER_NOT_VALID, REFUSED_IDENTIFIER_REJECTED

LIMITS = ServerLimits()
_ids = itertools.count()


def new_id() -> str:
    return f"auto-{next(_ids)}"


def accepted(c: Connect, limits: ServerLimits = LIMITS) -> Accepted:
    got = accept_connect(c, limits, new_id)
    assert isinstance(got, Accepted), got
    return got


def refused(c: Connect, limits: ServerLimits = LIMITS) -> Refused:
    got = accept_connect(c, limits, new_id)
    assert isinstance(got, Refused), got
    return got


def round_trip(connack: ConnAck, version: int) -> ConnAck:
    [back] = decode(encode(connack, version), version)
    assert isinstance(back, ConnAck)
    return back


@pytest.mark.parametrize("version", [MQTT_3_1_1, MQTT_5])
def test_a_named_client_keeps_its_identifier(version: int) -> None:
    a = accepted(Connect("dev-1", version, keep_alive=30))
    assert (a.client_id, a.assigned, a.keep_alive) == ("dev-1", False, 30)
    assert round_trip(a.connack(False, LIMITS), version) == ConnAck(False)


def test_an_empty_identifier_is_assigned_with_clean_session_in_3_1_1_and_refused_without() -> None:
    a = accepted(Connect("", MQTT_3_1_1, clean_start=True))
    assert a.assigned and a.client_id.startswith("auto-")
    r = refused(Connect("", MQTT_3_1_1, clean_start=False))
    assert round_trip(r.connack, MQTT_3_1_1) == ConnAck(False, REFUSED_IDENTIFIER_REJECTED)


def test_an_empty_identifier_is_always_assigned_in_5_and_returned_in_the_connack() -> None:
    a = accepted(Connect("", MQTT_5, clean_start=False))
    assert a.assigned
    back = round_trip(a.connack(False, LIMITS), MQTT_5)
    assert back.properties.assigned_client_identifier == a.client_id


def test_identifier_length_limits() -> None:
    assert accepted(Connect("x" * 23, MQTT_3_1)).client_id == "x" * 23
    r = refused(Connect("x" * 24, MQTT_3_1))
    assert r.connack.reason_code == REFUSED_IDENTIFIER_REJECTED
    assert accepted(Connect("x" * 1000, MQTT_3_1_1)).client_id == "x" * 1000  # beyond the 23 the spec promises
    r = refused(Connect("x" * 65536, MQTT_5))
    assert r.connack.reason_code == CLIENT_IDENTIFIER_NOT_VALID


def test_keep_alive_and_server_keep_alive() -> None:
    limits = ServerLimits(max_keep_alive=60)
    assert accepted(Connect("a", MQTT_3_1_1, keep_alive=600), limits).keep_alive == 600  # 3.1.1 cannot be told
    a = accepted(Connect("a", MQTT_5, keep_alive=600), limits)
    assert a.keep_alive == 60
    assert round_trip(a.connack(False, limits), MQTT_5).properties.server_keep_alive == 60
    assert accepted(Connect("a", MQTT_5, keep_alive=0), limits).keep_alive == 60  # "none" is more than 60
    assert accepted(Connect("a", MQTT_5, keep_alive=30), limits).keep_alive == 30
    assert keep_alive_deadline(30) == 45 and keep_alive_deadline(0) == 0


def test_session_expiry() -> None:
    assert accepted(Connect("a", MQTT_3_1_1, clean_start=True)).session_expiry == 0
    assert accepted(Connect("a", MQTT_3_1_1, clean_start=False)).session_expiry == NEVER_EXPIRES
    assert accepted(Connect("a", MQTT_5, clean_start=False)).session_expiry == 0  # no property: ends with it
    p = Properties(session_expiry_interval=3600)
    assert accepted(Connect("a", MQTT_5, properties=p)).session_expiry == 3600


def test_the_clients_limits_and_ours() -> None:
    p = Properties(receive_maximum=10, maximum_packet_size=4096, topic_alias_maximum=5)
    a = accepted(Connect("a", MQTT_5, properties=p))
    assert (a.receive_maximum, a.maximum_packet_size, a.topic_alias_maximum) == (10, 4096, 5)
    d = accepted(Connect("a", MQTT_5))
    assert (d.receive_maximum, d.maximum_packet_size, d.topic_alias_maximum) == (DEFAULT_RECEIVE_MAXIMUM, 0, 0)
    ours = ServerLimits(receive_maximum=100, topic_alias_maximum=10, maximum_packet_size=1 << 20)
    props = round_trip(d.connack(True, ours), MQTT_5).properties
    assert (props.receive_maximum, props.topic_alias_maximum, props.maximum_packet_size) == (100, 10, 1 << 20)
    assert round_trip(d.connack(True, ours), MQTT_5).session_present


def test_a_will_response_topic_with_a_wildcard_is_refused() -> None:
    from logbus.gateway.mqtt import Will

    will = Will("w", b"", properties=Properties(response_topic="replies/#"))
    decided = accept_connect(Connect("c", MQTT_5, will=will), LIMITS, new_id)
    assert isinstance(decided, Refused) and decided.connack == ConnAck(False, 0x82)


def test_response_information_only_when_asked() -> None:
    asked = accept_connect(Connect("dev", MQTT_5, properties=Properties(request_response_information=1)), LIMITS,
                           new_id)
    assert isinstance(asked, Accepted)
    assert asked.connack(False, LIMITS).properties.response_information == "response/dev"
    plain = accept_connect(Connect("dev", MQTT_5), LIMITS, new_id)
    assert isinstance(plain, Accepted) and plain.connack(False, LIMITS).properties.response_information is None
