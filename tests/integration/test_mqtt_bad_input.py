"""Bad MQTT input on raw sockets against a real ``logbus serve`` (started with
``--mqtt-max-packet-size 1024``), in MQTT 3.1.1 and 5.0: malformed packets, packets over
the maximum size, a second CONNECT, packets before CONNECT or only a server sends, bad
topics, filters and packet ids, topic aliases, an unknown PUBREL, bad CONNECTs and logins.

What the specifications ask (3.1.1 section 4.8, 5.0 section 4.13): on a malformed packet
or a protocol error a 5.0 server sends DISCONNECT with the reason code (a CONNACK with it
if the error is in CONNECT) and closes; a 3.1.1 server just closes (a CONNACK only for the
CONNECT refusals 3.1.1 gives a return code). Nothing is sent for a packet before CONNECT:
the version is not known, and a 5.0 server must not send DISCONNECT before a successful
CONNACK (MQTT-3.14.0-1).

Each test reads the broker's exact answer within ``PROMPT`` seconds, well under the
connect timeout, so no close here can come from that timer. Around every test a paho
publisher and subscriber on their own connections exchange a message (other clients are
unaffected), and a QoS 1 publish the broker acknowledged on the bad connection before the
bad packet must still reach that subscriber (no accepted message is lost).

Not covered: exceeding the Receive Maximum we announce. The server has no setting for it
(``ServerLimits.receive_maximum`` is always 65,535, and the broker answers each QoS 1
publish as soon as it is durable), so there is no small limit to go over.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from logbus.gateway.mqtt import (
    Auth, ConnAck, Connect, Disconnect, PingReq, PingResp, PubAck, PubComp, Publish, PubRel,
    SubAck, Subscribe, Subscription, UnsubAck, Will, encode,
)  # fmt: skip
from logbus.gateway.mqtt.properties import Properties
from logbus.gateway.mqtt.protocol import CONNECT_TIMEOUT
from logbus.gateway.mqtt.wire import encode_vbi
from tests.integration.mqtt_bad_packets import (
    ALIAS_INVALID, BAD_LOGIN, MALFORMED, NAME_INVALID, NOT_AUTHORIZED, PACKET_ID_NOT_FOUND,
    PROTOCOL_ERROR, TOO_LARGE, malformed_cases, packet, props, string,
)  # fmt: skip
from tests.integration.mqtt_clients import WAIT, Paho, Raw, unique
from tests.serverproc import ServerFactory

MAX_PACKET = 1024
PROMPT = 3.0  # seconds for an answer to bad input: a close after this is not ours
assert PROMPT < CONNECT_TIMEOUT / 2



# -- servers and the clients that must not notice -------------------------------------------


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    factory = ServerFactory(Path(tmp_path_factory.mktemp("mqtt_bad")))
    try:
        yield factory
    finally:
        factory.cleanup()


@pytest.fixture(scope="module")
def server(servers: ServerFactory) -> Any:
    return servers.start(listeners={"kafka": "off"}, args=["--mqtt-max-packet-size", str(MAX_PACKET)])


@pytest.fixture(scope="module")
def no_anonymous(servers: ServerFactory) -> Any:
    return servers.start(listeners={"kafka": "off"}, args=["--mqtt-anonymous", "off"])


class Bystanders:
    """A paho publisher (3.1.1) and subscriber (5.0) on their own connections, for the
    whole module; the subscriber takes every topic under ``base``."""

    def __init__(self, server: Any) -> None:
        self.base = unique("bystander")
        self.sub = Paho(server, unique("by-sub"), version=5)
        try:
            self.sub.subscribe(f"{self.base}/#", 1)
            self.pub = Paho(server, unique("by-pub"), version=4)
        except BaseException:
            self.sub.close()
            raise
        self.seen: set[tuple[str, bytes]] = set()
        self.rounds = 0

    def topic(self, name: str) -> str:
        return f"{self.base}/{name}"

    def wait_for(self, topic: str, payload: bytes, timeout: float = WAIT) -> None:
        """Until the subscriber has had ``payload`` on ``topic`` (others may come between)."""
        deadline = time.monotonic() + timeout
        while (topic, payload) not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{payload!r} on {topic!r} never reached the subscriber")
            try:
                m = self.sub.next_message(left)
            except AssertionError:
                continue
            self.seen.add((m.topic, m.payload))

    def round_trip(self) -> None:
        self.rounds += 1
        topic, payload = self.topic(f"round/{self.rounds}"), unique("ping").encode()
        self.pub.publish(topic, payload, 1)
        self.wait_for(topic, payload)

    def close(self) -> None:
        self.sub.close()
        self.pub.close()


@pytest.fixture(scope="module")
def bystanders(server: Any) -> Iterator[Bystanders]:
    b = Bystanders(server)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(autouse=True)
def others_unaffected(bystanders: Bystanders) -> Iterator[None]:
    bystanders.round_trip()
    yield
    bystanders.round_trip()


# -- raw connections ---------------------------------------------------------------------------


@contextmanager
def raw(server: Any, version: int) -> Iterator[Raw]:
    r = Raw(server, version)
    try:
        yield r
    finally:
        r.close()


@contextmanager
def session(server: Any, version: int, **connect: Any) -> Iterator[tuple[Raw, ConnAck]]:
    """A raw connection whose CONNECT was accepted."""
    with raw(server, version) as r:
        r.send(Connect(unique("raw"), version, **connect))
        ack = r.expect(ConnAck, PROMPT)
        assert ack.reason_code == 0, ack
        yield r, ack


def accepted_publish(r: Raw, bystanders: Bystanders, packet_id: int = 1) -> tuple[str, bytes]:
    """A QoS 1 publish the broker acknowledges: (topic, payload)."""
    topic, payload = bystanders.topic(unique("accepted")), unique("kept").encode()
    r.send(Publish(topic, payload, qos=1, packet_id=packet_id))
    ack = r.expect(PubAck, PROMPT)
    assert (ack.packet_id, ack.reason_code) == (packet_id, 0), ack
    return topic, payload


def closed(r: Raw) -> list[Any]:
    """The packets the broker sends before it closes, which it must do within PROMPT."""
    got: list[Any] = []
    deadline = time.monotonic() + PROMPT
    while True:
        try:
            p = r.recv(max(deadline - time.monotonic(), 0.001))
        except AssertionError as e:
            raise AssertionError(f"the broker did not close within {PROMPT} s ({e}); it sent {answered(got)}") from None
        if p is None:
            return got
        got.append(p)


def raw_bytes_until_closed(r: Raw) -> bytes:
    """Every byte the broker sends until it closes (within PROMPT)."""
    data = b""
    deadline = time.monotonic() + PROMPT
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"the broker did not close within {PROMPT} s (sent {data!r})")
        r.sock.settimeout(left)
        try:
            chunk = r.sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def answered(got: list[Any]) -> list[tuple[str, int | None]]:
    return [(type(p).__name__, getattr(p, "reason_code", None)) for p in got]


def assert_protocol_error(r: Raw, version: int, code: int) -> None:
    """5.0: DISCONNECT with ``code``, then closed; 3.1.1: closed, nothing sent."""
    got = closed(r)
    assert answered(got) == ([("Disconnect", code)] if version == 5 else []), got


def cases_for_both(make: Any) -> list[Any]:
    return [pytest.param(v, *case, id=f"v{v}-{case[0]}") for v in (4, 5) for case in make(v)]


# -- malformed packets and protocol errors after CONNECT ----------------------------------------


@pytest.mark.parametrize(("version", "what", "data", "code"), cases_for_both(malformed_cases))
def test_malformed_packet_closes_and_loses_no_accepted_message(
    server: Any, bystanders: Bystanders, version: int, what: str, data: bytes, code: int
) -> None:
    with session(server, version) as (r, _):
        topic, payload = accepted_publish(r, bystanders)
        r.send_bytes(data)
        assert_protocol_error(r, version, code)
    bystanders.wait_for(topic, payload)


@pytest.mark.parametrize("version", [4, 5])
def test_publish_read_with_the_bad_packet_is_still_published(server: Any, bystanders: Bystanders, version: int) -> None:
    """The packets decoded before a bad one in the same read are carried out (protocol.py)."""
    topic, payload = bystanders.topic(unique("same-read")), b"before the bad bytes"
    with session(server, version) as (r, _):
        r.send_bytes(encode(Publish(topic, payload, qos=1, packet_id=9), version) + b"\xc1\x00")
        got = [a for a in answered(closed(r)) if a[0] != "PubAck"]  # its PUBACK may or may not come
        assert got == ([("Disconnect", MALFORMED)] if version == 5 else []), got
    bystanders.wait_for(topic, payload)


@pytest.mark.parametrize("version", [4, 5])
def test_second_connect_is_a_protocol_error(server: Any, bystanders: Bystanders, version: int) -> None:
    with session(server, version) as (r, _):
        topic, payload = accepted_publish(r, bystanders)
        r.send(Connect(unique("again"), version))
        assert_protocol_error(r, version, PROTOCOL_ERROR)
    bystanders.wait_for(topic, payload)


def server_only_packets(version: int) -> list[tuple[str, Any]]:
    packets: list[tuple[str, Any]] = [
        ("CONNACK", ConnAck()), ("SUBACK", SubAck(1, (0,))),
        ("UNSUBACK", UnsubAck(1, (0,) if version == 5 else ())), ("PINGRESP", PingResp()),
    ]
    if version == 5:
        packets.append(("AUTH", Auth()))  # no authentication method was given in CONNECT
    return packets


@pytest.mark.parametrize(("version", "what", "packet_"), cases_for_both(server_only_packets))
def test_packet_only_a_server_sends(server: Any, bystanders: Bystanders, version: int, what: str, packet_: Any) -> None:
    with session(server, version) as (r, _):
        topic, payload = accepted_publish(r, bystanders)
        r.send(packet_)
        assert_protocol_error(r, version, PROTOCOL_ERROR)
    bystanders.wait_for(topic, payload)


@pytest.mark.parametrize("version", [4, 5])
def test_protocol_error_publishes_the_will(server: Any, bystanders: Bystanders, version: int) -> None:
    """3.1.1 and 5.0 section 3.1.2.5: the will is published when the server closes the
    connection because of a protocol error."""
    topic, payload = bystanders.topic(unique("will")), unique("last-words").encode()
    with session(server, version, will=Will(topic, payload, qos=1)) as (r, _):
        r.send(Connect(unique("again"), version))
        assert_protocol_error(r, version, PROTOCOL_ERROR)
    bystanders.wait_for(topic, payload)


# -- packet size -----------------------------------------------------------------------------------


def publish_of_size(version: int, topic: str, size: int, packet_id: int) -> bytes:
    """A QoS 1 PUBLISH of exactly ``size`` bytes, fixed header included."""
    header = len(encode(Publish(topic, b"", qos=1, packet_id=packet_id), version))
    data = encode(Publish(topic, b"x" * (size - header - 1), qos=1, packet_id=packet_id), version)
    assert len(data) == size, (len(data), size)  # the remaining length grew to 2 bytes
    return data


@pytest.mark.parametrize("version", [4, 5])
def test_packet_over_the_maximum_size(server: Any, bystanders: Bystanders, version: int) -> None:
    with session(server, version) as (r, ack):
        if version == 5:  # MQTT 5 section 3.2.2.3.6: the client is told the limit
            assert ack.properties.maximum_packet_size == MAX_PACKET
        at_limit = bystanders.topic(unique("at-limit"))
        r.send_bytes(publish_of_size(version, at_limit, MAX_PACKET, packet_id=2))
        assert r.expect(PubAck, PROMPT).packet_id == 2
        r.send_bytes(publish_of_size(version, bystanders.topic("over"), MAX_PACKET + 1, packet_id=3))
        assert_protocol_error(r, version, TOO_LARGE)
    header = len(encode(Publish(at_limit, b"", qos=1, packet_id=2), version))
    bystanders.wait_for(at_limit, b"x" * (MAX_PACKET - header - 1))  # it went through whole


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("header", [b"\x30" + encode_vbi(2000), b"\x30\xff\xff"], ids=["length-2000", "partial-length"])
def test_oversized_packet_refused_from_its_header(server: Any, bystanders: Bystanders, version: int, header: bytes) -> None:
    """The declared size is checked before the body is waited for: the header alone (even
    a remaining length not finished yet, which can only grow) gets the answer."""
    with session(server, version) as (r, _):
        topic, payload = accepted_publish(r, bystanders)
        r.send_bytes(header)
        assert_protocol_error(r, version, TOO_LARGE)
    bystanders.wait_for(topic, payload)


def test_oversized_first_packet_is_closed_without_disconnect(server: Any) -> None:
    """Before CONNECT the version is unknown: the broker closes (5.0 allows a CONNACK
    0x95 for a CONNECT too large, never a DISCONNECT before a CONNACK, MQTT-3.14.0-1)."""
    with raw(server, 5) as r:
        r.send_bytes(b"\x10" + encode_vbi(5000))
        assert raw_bytes_until_closed(r) in (b"", b"\x20\x03\x00\x95\x00")


# -- before CONNECT ------------------------------------------------------------------------------------


def before_connect(version: int) -> list[tuple[str, bytes]]:
    return [
        ("PUBLISH", encode(Publish("a/b", b"early"), version)),
        ("PUBLISH QoS 1", encode(Publish("a/b", b"early", qos=1, packet_id=1), version)),
        ("SUBSCRIBE", encode(Subscribe(1, (Subscription("a/#"),)), version)),
        ("PINGREQ", encode(PingReq(), version)),
        ("DISCONNECT", encode(Disconnect(), version)),
        ("CONNACK", encode(ConnAck(), version)),
    ]


@pytest.mark.parametrize(("version", "what", "data"), cases_for_both(before_connect))
def test_packet_before_connect_is_closed_without_answer(server: Any, version: int, what: str, data: bytes) -> None:
    """3.1.1 section 3.1 and 4.8, 5.0 sections 3.1 and 4.13: the first packet must be
    CONNECT; the server closes. Nothing is sent: no CONNACK (there was no CONNECT, and its
    version is unknown), no DISCONNECT (5.0 MQTT-3.14.0-1)."""
    with raw(server, version) as r:
        r.send_bytes(data)
        assert raw_bytes_until_closed(r) == b""


# -- bad CONNECTs --------------------------------------------------------------------------------------


def connect_bytes(version: int, flags: int, tail: bytes, name: bytes = b"MQTT", level: int | None = None,
                  client_id: bytes = b"bad-connect", properties: bytes | None = None) -> bytes:
    level = version if level is None else level
    block = props(version) if properties is None else properties
    body = string(name) + bytes([level, flags]) + b"\x00\x00" + block + string(client_id) + tail
    return packet(0x10, body)


def bad_connects(version: int) -> list[tuple[str, bytes, int]]:
    v = version
    will = props(v) + string(b"w/t") + string(b"bye")
    cases = [
        ("reserved flag", connect_bytes(v, 0x03, b""), MALFORMED),
        ("will QoS without a will", connect_bytes(v, 0x0A, b""), MALFORMED),
        ("will retain without a will", connect_bytes(v, 0x22, b""), MALFORMED),
        ("will QoS 3", connect_bytes(v, 0x1E, will), MALFORMED),
        ("bytes after the last field", connect_bytes(v, 0x02, b"\x00"), MALFORMED),
        ("client id running past the packet", packet(0x10, connect_bytes(v, 0x02, b"")[2:-3]), MALFORMED),
        ("user name flag without a user name", connect_bytes(v, 0x82, b""), MALFORMED),
        ("will topic with +", connect_bytes(v, 0x06, props(v) + string(b"w/+") + string(b"bye")), NAME_INVALID),
        ("will topic with #", connect_bytes(v, 0x06, props(v) + string(b"w/#") + string(b"bye")), NAME_INVALID),
        ("will topic not UTF-8", connect_bytes(v, 0x06, props(v) + string(b"w/\xff") + string(b"bye")), MALFORMED),
    ]
    if v == 5:
        cases += [
            ("Receive Maximum 0", connect_bytes(v, 0x02, b"", properties=b"\x03\x21\x00\x00"), PROTOCOL_ERROR),
            ("Maximum Packet Size 0", connect_bytes(v, 0x02, b"", properties=b"\x05\x27\x00\x00\x00\x00"),
             PROTOCOL_ERROR),
            ("Session Expiry Interval twice",
             connect_bytes(v, 0x02, b"", properties=b"\x0a\x11\x00\x00\x00\x01\x11\x00\x00\x00\x02"), PROTOCOL_ERROR),
            ("a property CONNECT may not carry", connect_bytes(v, 0x02, b"", properties=b"\x02\x01\x01"), MALFORMED),
            ("authentication method", connect_bytes(v, 0x02, b"", properties=b"\x06\x15\x00\x03XYZ"),
             0x8C),  # Bad authentication method: enhanced authentication is not supported
        ]
    if v == 4:  # 5.0 allows a password without a user name
        cases.append(("password without a user name", connect_bytes(v, 0x42, string(b"pw")), MALFORMED))
    return cases


@pytest.mark.parametrize(("version", "what", "data", "code"), cases_for_both(bad_connects))
def test_bad_connect(server: Any, version: int, what: str, data: bytes, code: int) -> None:
    """5.0: CONNACK with the reason code, then closed; 3.1.1: closed without a CONNACK
    (MQTT-3.1.4-1: a CONNECT that breaks the rules closes the connection)."""
    with raw(server, version) as r:
        r.send_bytes(data)
        got = closed(r)
        assert answered(got) == ([("ConnAck", code)] if version == 5 else []), got


@pytest.mark.parametrize(("name", "level", "answer"), [
    (b"MQTT", 6, b"\x20\x02\x00\x01"),  # a later version: 3.1.1's return code 1 (MQTT-3.1.2-2)
    (b"MQTT", 2, b"\x20\x02\x00\x01"),
    (b"MQTT", 3, b"\x20\x02\x00\x01"),  # level 3 is MQTT 3.1, named MQIsdp
    (b"MQIsdp", 4, b"\x20\x02\x00\x01"),
    (b"MQTT", 0xFF, b"\x20\x02\x00\x01"),
    (b"MQIsdp", 5, b"\x20\x03\x00\x84\x00"),  # says 5.0: its CONNACK 0x84 (5.0 section 3.1.2.1)
    (b"MQTX", 5, b"\x20\x03\x00\x84\x00"),
], ids=["MQTT-6", "MQTT-2", "MQTT-3", "MQIsdp-4", "MQTT-255", "MQIsdp-5", "MQTX-5"])  # fmt: skip
def test_unsupported_protocol(server: Any, name: bytes, level: int, answer: bytes) -> None:
    with raw(server, 4) as r:
        r.send_bytes(connect_bytes(4, 0x02, b"", name=name, level=level))
        assert raw_bytes_until_closed(r) == answer


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize(("user", "password"), [("guest", b"not-guest"), ("guest", b""), ("nobody-such", b"guest")])
def test_bad_user_name_or_password(server: Any, version: int, user: str, password: bytes) -> None:
    with raw(server, version) as r:
        r.send(Connect(unique("login"), version, username=user, password=password))
        assert answered(closed(r)) == [("ConnAck", BAD_LOGIN if version == 5 else 4)]
    with session(server, version, username="guest", password=b"guest"):
        pass  # the right password is let in


@pytest.mark.parametrize("version", [4, 5])
def test_anonymous_refused_when_off(no_anonymous: Any, server: Any, version: int) -> None:
    with raw(no_anonymous, version) as r:
        r.send(Connect(unique("anon"), version))
        assert answered(closed(r)) == [("ConnAck", NOT_AUTHORIZED if version == 5 else 5)]
    with session(no_anonymous, version, username="guest", password=b"guest"):
        pass  # a user is let in there
    with session(server, version):
        pass  # and by default an anonymous client on loopback is too


@pytest.mark.parametrize("version", [4, 5])
def test_empty_client_id_without_clean_session(server: Any, version: int) -> None:
    """3.1.1: an empty client id needs clean session 1, else return code 2 (MQTT-3.1.3-8);
    5.0: the server assigns one (section 3.1.3.1), clean start or not."""
    with raw(server, version) as r:
        r.send(Connect("", version, clean_start=False))
        if version == 4:
            assert answered(closed(r)) == [("ConnAck", 2)]
        else:
            ack = r.expect(ConnAck, PROMPT)
            assert ack.reason_code == 0 and ack.properties.assigned_client_identifier
    with raw(server, version) as r:
        r.send(Connect("", version, clean_start=True))
        ack = r.expect(ConnAck, PROMPT)
        assert ack.reason_code == 0


# -- session rules: topic aliases, PUBREL -----------------------------------------------------------


@pytest.mark.parametrize("alias", [65, 0xFFFF])
def test_topic_alias_above_the_maximum(server: Any, bystanders: Bystanders, alias: int) -> None:
    with session(server, 5) as (r, ack):
        maximum = ack.properties.topic_alias_maximum
        assert maximum == 64
        topic = bystanders.topic(unique("aliased"))
        r.send(Publish(topic, b"by alias", qos=1, packet_id=1, properties=Properties(topic_alias=maximum)))
        assert r.expect(PubAck, PROMPT).reason_code == 0  # the maximum itself is fine
        r.send(Publish("", b"again", qos=1, packet_id=2, properties=Properties(topic_alias=maximum)))
        assert r.expect(PubAck, PROMPT).reason_code == 0
        r.send(Publish(bystanders.topic("over"), b"x", qos=1, packet_id=3, properties=Properties(topic_alias=alias)))
        assert_protocol_error(r, 5, ALIAS_INVALID)
    bystanders.wait_for(topic, b"by alias")
    bystanders.wait_for(topic, b"again")


@pytest.mark.parametrize("version", [4, 5])
def test_pubrel_for_an_unknown_packet_id(server: Any, bystanders: Bystanders, version: int) -> None:
    """5.0: PUBCOMP 0x92 Packet Identifier not found; 3.1.1: PUBCOMP (MQTT-4.3.3-11 asks
    for one whatever the state). Either way the connection stays up."""
    with session(server, version) as (r, _):
        r.send(PubRel(77))
        comp = r.expect(PubComp, PROMPT)
        assert (comp.packet_id, comp.reason_code) == (77, PACKET_ID_NOT_FOUND if version == 5 else 0)
        r.send(PingReq())
        r.expect(PingResp, PROMPT)
        accepted_publish(r, bystanders, packet_id=78)
        r.quiet(0.2)


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("refusal", ["bad password", "packet before CONNECT"])
def test_nothing_is_published_from_a_refused_connection(server: Any, bystanders: Bystanders, version: int,
                                                         refusal: str) -> None:
    """A PUBLISH that comes in the same read as a refused CONNECT (or with no CONNECT at
    all) is never carried out."""
    topic = bystanders.topic(unique("smuggled"))
    smuggled = encode(Publish(topic, b"smuggled"), version) + encode(Publish(topic, b"smuggled", 1, packet_id=1), version)
    with raw(server, version) as r:
        if refusal == "bad password":
            r.send_bytes(encode(Connect(unique("thief"), version, username="guest", password=b"wrong"), version) + smuggled)
            assert answered(closed(r)) == [("ConnAck", BAD_LOGIN if version == 5 else 4)]
        else:
            r.send_bytes(smuggled)
            assert closed(r) == []
    with pytest.raises(AssertionError, match="never reached"):
        bystanders.wait_for(topic, b"smuggled", timeout=0.5)


def test_session_expiry_set_in_disconnect_after_zero(server: Any, bystanders: Bystanders) -> None:
    """5.0 section 3.14.2.2.2: a non-zero Session Expiry Interval in DISCONNECT after 0 in
    CONNECT is a Protocol Error: DISCONNECT 0x82, and (a protocol error) the will goes out."""
    topic, payload = bystanders.topic(unique("will")), unique("expiry").encode()
    with session(server, 5, will=Will(topic, payload, qos=1)) as (r, _):
        r.send(Disconnect(0, Properties(session_expiry_interval=60)))
        assert_protocol_error(r, 5, PROTOCOL_ERROR)
    bystanders.wait_for(topic, payload)


def test_subscription_identifier_in_a_client_publish(server: Any, bystanders: Bystanders) -> None:
    """5.0 section 3.3.4 (MQTT-3.3.4-6): a PUBLISH from a client must not carry a
    Subscription Identifier; the server treats it as a Protocol Error (docs/mqtt.md leaves
    the check to the session)."""
    with session(server, 5) as (r, _):
        topic, payload = accepted_publish(r, bystanders)
        r.send(Publish(bystanders.topic("with-sid"), b"x", qos=1, packet_id=2,
                       properties=Properties(subscription_identifiers=(5,))))
        assert_protocol_error(r, 5, PROTOCOL_ERROR)
    bystanders.wait_for(topic, payload)


def test_response_topic_with_a_wildcard(server: Any, bystanders: Bystanders) -> None:
    """5.0 section 3.3.2.3.5 (MQTT-3.3.2-14): a Response Topic must not hold wildcards; the
    spec names no code for it: a Protocol Error (0x82) or Topic Name invalid (0x90)."""
    with session(server, 5) as (r, _):
        topic, payload = accepted_publish(r, bystanders)
        r.send(Publish(bystanders.topic("reply-to-wild"), b"x", qos=1, packet_id=2,
                       properties=Properties(response_topic="replies/+")))
        got = answered(closed(r))
        assert got in ([("Disconnect", PROTOCOL_ERROR)], [("Disconnect", NAME_INVALID)]), got
    bystanders.wait_for(topic, payload)


def test_will_response_topic_with_a_wildcard(server: Any) -> None:
    """The same rule for the will's Response Topic (5.0 section 3.1.3.2.6): CONNACK with
    0x82 (or 0x90), then closed."""
    will = Will("w/t", b"bye", properties=Properties(response_topic="replies/#"))
    with raw(server, 5) as r:
        r.send(Connect(unique("will-rt"), 5, will=will))
        got = answered(closed(r))
        assert got in ([("ConnAck", PROTOCOL_ERROR)], [("ConnAck", NAME_INVALID)]), got
