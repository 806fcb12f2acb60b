"""AMQP 0-9-1 codec (logbus/gateway/amqp): the hand-written fast paths checked byte for
byte against pamqp, framing and content assembly under any chunking, and hostile
input that may only ever raise the codec's own protocol errors."""

from __future__ import annotations

import datetime
import decimal
import itertools
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands, decode, frame, header, heartbeat

from logbus.gateway.amqp import fastpath, shapes
from logbus.gateway.amqp.codec import (
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    Ack,
    AMQPConnectionError,
    AMQPProtocolError,
    ChannelFailed,
    ContentReceived,
    Decoder,
    Heartbeat,
    LocalProtocolError,
    MethodReceived,
    Nack,
    Properties,
    Publish,
    Reject,
    encode_ack,
    encode_deliver,
    encode_get_ok,
    encode_nack,
    encode_properties,
    encode_return,
)

UTC = datetime.UTC
PP = commands.Basic.Properties
NAMES = st.from_regex(r"[a-zA-Z0-9\-_.:@#,/+ ]{0,30}", fullmatch=True)  # pamqp validates exchange names
TEXT = st.text(max_size=40)  # at most 160 UTF-8 bytes: always a valid shortstr
TAGS = st.integers(0, 2**63 - 1)  # pamqp writes delivery tags signed


def marshal(obj: Any, channel: int) -> bytes:
    return frame.marshal(obj, channel)


def pamqp_content(channel: int, method: Any, props: Any, body: bytes, frame_max: int) -> bytes:
    chunk = frame_max - 8
    out = marshal(method, channel) + marshal(header.ContentHeader(0, len(body), props), channel)
    return out + b"".join(marshal(pbody.ContentBody(body[i : i + chunk]), channel) for i in range(0, len(body), chunk))


def to_pamqp(p: Properties) -> Any:
    kw = p._asdict()
    ts, cluster_id = kw.pop("timestamp"), kw.pop("cluster_id")
    pp = PP(**kw, timestamp=None if ts is None else datetime.datetime.fromtimestamp(ts, UTC))
    if cluster_id is not None:
        pp.cluster_id = cluster_id  # pamqp's constructor refuses it; its encoder does not
    return pp


def pamqp_timestamp(ts: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ts / 1000.0 if ts > 0xFFFFFFFF else ts, UTC)


def assert_props_agree(ours: Properties, theirs: Any) -> None:
    for name, value in ours._asdict().items():
        other = getattr(theirs, name)
        if name == "timestamp" and value is not None:
            assert other == pamqp_timestamp(value)
        elif name == "cluster_id" and value is None:
            assert other in (None, "")
        else:
            assert value == other, name


def method_fields(method: Any) -> tuple[str, dict[str, Any]]:
    return method.name, dict(method)


def norm(event: Any) -> tuple[Any, ...]:
    """Events with pamqp objects (no __eq__) and errors made comparable."""
    if isinstance(event, (MethodReceived, ContentReceived)):
        return (type(event).__name__, *(method_fields(f) if f is event.method else f for f in event))
    if isinstance(event, ChannelFailed):
        e = event.error
        return ("ChannelFailed", e.reply_code, e.reply_text, e.channel, e.class_id, e.method_id)
    return (type(event).__name__, *event)


# -- strategies -----------------------------------------------------------------------

# Python values pamqp can encode; floats become 'f' (32 bits), so pick those exactly.
leaf_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(width=32, allow_nan=False), TEXT,
    st.builds(lambda m, s: decimal.Decimal(m).scaleb(-s), st.integers(-(2**31), 2**31 - 1), st.integers(0, 12)),
    st.integers(0, 2**32 - 1).map(lambda t: datetime.datetime.fromtimestamp(t, UTC)),
    st.binary(max_size=20).map(bytearray),
)  # fmt: skip
field_tables = st.recursive(
    st.dictionaries(st.text(max_size=12), leaf_values, max_size=4),
    lambda inner: st.dictionaries(st.text(max_size=12), st.one_of(leaf_values, inner, st.lists(st.one_of(leaf_values, inner), max_size=3)), max_size=4),
    max_leaves=12,
)  # fmt: skip
def some_properties(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Properties]:
    """Properties with ``fields`` drawn and the others None. Not ``st.builds(Properties)``:
    compiled, a NamedTuple's annotations read ``type``, and builds would fill the fields
    it is not given with classes."""
    def build(kw: dict[str, Any]) -> Properties:
        return Properties(**kw)

    return st.fixed_dictionaries(fields).map(build)


properties = some_properties(
    content_type=st.none() | TEXT, content_encoding=st.none() | TEXT, headers=st.none() | field_tables,
    delivery_mode=st.sampled_from([None, 1, 2]), priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | TEXT, reply_to=st.none() | TEXT, expiration=st.none() | TEXT,
    message_id=st.none() | TEXT, timestamp=st.none() | st.integers(0, 2**32 - 1), message_type=st.none() | TEXT,
    user_id=st.none() | TEXT, app_id=st.none() | TEXT, cluster_id=st.none() | TEXT,
)  # fmt: skip


# Field values as raw bytes, with every type code of RabbitMQ's errata (and pamqp's
# extras 'L' and NUL), to check the decoder on what other clients send.
raw_leaves = st.one_of(
    st.booleans().map(lambda b: b"t" + bytes([b])),
    *[st.integers(lo, hi).map(lambda v, c=c, f=f: c + struct.pack(f, v)) for c, f, lo, hi in [
        (b"b", ">b", -128, 127), (b"B", ">B", 0, 255), (b"s", ">h", -(2**15), 2**15 - 1), (b"u", ">H", 0, 2**16 - 1),
        (b"I", ">i", -(2**31), 2**31 - 1), (b"i", ">I", 0, 2**32 - 1), (b"l", ">q", -(2**63), 2**63 - 1),
        (b"L", ">q", -(2**63), 2**63 - 1), (b"T", ">Q", 0, 253402300799999),
    ]],
    st.floats(width=32, allow_nan=False).map(lambda v: b"f" + struct.pack(">f", v)),
    st.floats(allow_nan=False).map(lambda v: b"d" + struct.pack(">d", v)),
    st.tuples(st.integers(0, 30), st.integers(-(2**31), 2**31 - 1)).map(lambda t: b"D" + struct.pack(">Bi", *t)),
    st.one_of(TEXT.map(str.encode), st.binary(max_size=20)).map(lambda b: b"S" + struct.pack(">I", len(b)) + b),
    st.binary(max_size=20).map(lambda b: b"x" + struct.pack(">I", len(b)) + b),
    st.sampled_from([b"V", b"\x00"]),
)  # fmt: skip


def _raw_table(entries: list[tuple[str, bytes]]) -> bytes:
    body = b"".join(fastpath.shortstr(k) + v for k, v in entries)
    return struct.pack(">I", len(body)) + body


raw_values = st.recursive(
    raw_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda vs: b"A" + struct.pack(">I", len(b"".join(vs))) + b"".join(vs)),
        st.lists(st.tuples(st.text(max_size=10), inner), max_size=4).map(lambda es: b"F" + _raw_table(es)),
    ),
    max_leaves=15,
)
raw_tables = st.lists(st.tuples(st.text(max_size=10), raw_values), max_size=6).map(_raw_table)


# -- golden: fast encoders == pamqp -----------------------------------------------------


@given(properties)
def test_encode_properties_matches_pamqp(props: Properties) -> None:
    assert encode_properties(props) == to_pamqp(props).marshal()


@settings(max_examples=150)
@given(
    properties, st.integers(1, 2**16 - 1), st.text(max_size=30), TAGS, st.booleans(), NAMES, TEXT,
    st.integers(4096, 12000), st.integers(0, 30000), st.integers(0, 2**32 - 1), st.integers(0, 2**16 - 1), st.booleans(),
)  # fmt: skip
def test_content_encoders_match_pamqp(
    props: Properties, ch: int, ctag: str, tag: int, redelivered: bool, exchange: str, rk: str,
    frame_max: int, size: int, count: int, code: int, raw: bool,
) -> None:  # fmt: skip
    body = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    pp = to_pamqp(props)
    given_props = pp.marshal() if raw else props  # raw property bytes pass through unchanged
    deliver = commands.Basic.Deliver(ctag, tag, redelivered, exchange, rk)
    assert encode_deliver(ch, ctag, tag, redelivered, exchange, rk, given_props, body, frame_max) == pamqp_content(
        ch, deliver, pp, body, frame_max
    )
    get_ok = commands.Basic.GetOk(tag, redelivered, exchange, rk, count)
    assert encode_get_ok(ch, tag, redelivered, exchange, rk, count, given_props, body, frame_max) == pamqp_content(
        ch, get_ok, pp, body, frame_max
    )
    ret = commands.Basic.Return(code, rk, exchange, rk)
    assert encode_return(ch, code, rk, exchange, rk, given_props, body, frame_max) == pamqp_content(ch, ret, pp, body, frame_max)
    assert all(len(f) <= frame_max for f in split_frames(encode_deliver(ch, ctag, tag, redelivered, exchange, rk, props, body, frame_max)))
    parts = fastpath.deliver_parts(exchange, rk, given_props, body)  # once per message, then per delivery:
    assert fastpath.encode_deliver_parts(ch, fastpath.shortstr(ctag), tag, redelivered, parts, body,
                                         frame_max) == pamqp_content(ch, deliver, pp, body, frame_max)


def split_frames(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        size = struct.unpack_from(">I", data, pos + 3)[0]
        out.append(data[pos : pos + 8 + size])
        pos += 8 + size
    return out


@given(st.integers(0, 2**16 - 1), TAGS, st.booleans(), st.booleans())
def test_ack_nack_encoders_match_pamqp(ch: int, tag: int, multiple: bool, requeue: bool) -> None:
    assert encode_ack(ch, tag, multiple) == marshal(commands.Basic.Ack(tag, multiple), ch)
    assert encode_nack(ch, tag, multiple, requeue) == marshal(commands.Basic.Nack(tag, multiple, requeue), ch)
    assert encode_nack(ch, tag) == marshal(commands.Basic.Nack(tag), ch)
    assert HEARTBEAT_FRAME == frame.marshal(heartbeat.Heartbeat(), 0)


def test_empty_properties() -> None:
    assert encode_properties(Properties()) == encode_properties(fastpath.EMPTY_PROPERTIES) == PP().marshal() == b"\x00\x00"
    assert fastpath.decode_properties(b"\x00\x00", 0, 2) is fastpath.EMPTY_PROPERTIES


def test_unsigned_where_pamqp_is_signed() -> None:
    """Delivery tags and the timestamp property are unsigned 64-bit on the wire."""
    raw = encode_properties(Properties(timestamp=2**64 - 1))
    assert fastpath.decode_properties(raw, 0, len(raw)).timestamp == 2**64 - 1
    ack = struct.pack(">BHIHHQB", 1, 1, 13, 60, 80, 2**64 - 1, 1) + b"\xce"
    assert Decoder(expect_protocol_header=False).feed(ack) == [Ack(1, 2**64 - 1, True)]
    assert encode_ack(1, 2**64 - 1, True) == ack


def test_encoders_refuse_what_amqp_cannot_say() -> None:
    with pytest.raises(LocalProtocolError):
        encode_deliver(1, "c" * 256, 1, False, "", "", Properties(), b"", 4096)
    with pytest.raises(LocalProtocolError):  # a content header frame must fit in frame_max
        encode_deliver(1, "c", 1, False, "", "", Properties(headers={"h": "x" * 5000}), b"", 4096)
    parts = fastpath.deliver_parts("", "", Properties(headers={"h": "x" * 5000}), b"")
    with pytest.raises(LocalProtocolError):
        fastpath.encode_deliver_parts(1, b"\x01c", 1, False, parts, b"", 4096)
    with pytest.raises(LocalProtocolError):
        encode_properties(Properties(priority=256))
    with pytest.raises(LocalProtocolError):
        encode_properties(Properties(headers={"h": object()}))  # type: ignore[dict-item]


# -- golden: fast decoders == pamqp.frame.unmarshal -------------------------------------


@settings(max_examples=150)
@given(properties, st.integers(1, 2**16 - 1), NAMES, TEXT, st.booleans(), st.booleans(), st.integers(4096, 9000), st.integers(0, 20000), st.data())
def test_publish_decoder_agrees_with_pamqp(
    props: Properties, ch: int, exchange: str, rk: str, mandatory: bool, immediate: bool, frame_max: int, size: int, data: st.DataObject
) -> None:
    body = data.draw(st.binary(min_size=size, max_size=size)) if size < 200 else b"\x07" * size
    pp = to_pamqp(props)
    wire = pamqp_content(ch, commands.Basic.Publish(0, exchange, rk, mandatory, immediate), pp, body, frame_max)
    dec = Decoder(expect_protocol_header=False)
    dec.frame_max = frame_max
    [event] = dec.feed(wire)
    assert isinstance(event, Publish) and dec.buffered == 0
    frames = []
    pos = 0
    while pos < len(wire):
        used, _, obj = frame.unmarshal(wire[pos:])
        frames.append(obj)
        pos += used
    method, head, *bodies = frames
    assert (event.channel, event.exchange, event.routing_key, event.mandatory, event.immediate) == (
        ch, method.exchange, method.routing_key, method.mandatory, method.immediate,
    )  # fmt: skip
    assert_props_agree(event.properties, head.properties)
    assert event.raw_properties == pp.marshal()
    assert event.body == b"".join(b.value for b in bodies) == body


@given(raw_tables)
def test_field_table_decoder_agrees_with_pamqp(raw: bytes) -> None:
    theirs_used, theirs = decode.field_table(raw)
    ours, used = fastpath.decode_table(raw, 0, len(raw))
    assert ours == theirs and used == theirs_used == len(raw)


@given(field_tables)
def test_field_tables_round_trip_like_pamqp(table: dict[str, Any]) -> None:
    raw = fastpath.encode_table(table)
    assert fastpath.decode_table(raw, 0, len(raw))[0] == decode.field_table(raw)[1]


@given(properties, st.one_of(st.none(), raw_tables), st.integers(0, 253402300799999))
def test_properties_decoder_agrees_with_pamqp(props: Properties, raw_headers: bytes | None, ts: int) -> None:
    # built by encode_properties (equal to pamqp's encoder, above) to reach timestamps
    # pamqp reads as milliseconds, and with a raw table holding every value type
    props = props._replace(headers=None, timestamp=ts)
    raw = encode_properties(props)
    if raw_headers is not None:  # headers come third, after two shortstrs
        flags = struct.unpack_from(">H", raw)[0] | 0x2000
        head = b"".join(fastpath.shortstr(v) for v in (props.content_type, props.content_encoding) if v)
        rest = encode_properties(props._replace(content_type=None, content_encoding=None))[2:]
        raw = struct.pack(">H", flags) + head + raw_headers + rest
    ours = fastpath.decode_properties(raw, 0, len(raw))
    content = header.ContentHeader()
    content.unmarshal(struct.pack(">HHQ", 60, 0, 0) + raw)
    assert_props_agree(ours, content.properties)


@given(st.integers(1, 2**16 - 1), TAGS, st.booleans(), st.booleans())
def test_ack_nack_reject_decoders_agree_with_pamqp(ch: int, tag: int, a: bool, b: bool) -> None:
    wire = b"".join(
        marshal(m, ch) for m in (commands.Basic.Ack(tag, a), commands.Basic.Nack(tag, a, b), commands.Basic.Reject(tag, b))
    )
    assert Decoder(expect_protocol_header=False).feed(wire) == [Ack(ch, tag, a), Nack(ch, tag, a, b), Reject(ch, tag, b)]
    assert Ack(1, 5, False) != Reject(1, 5, False)  # typed equality, not tuple equality
    assert len({Ack(1, 5, False), Reject(1, 5, False), Ack(1, 5, False)}) == 2


TABLE_METHODS = [cls for cls in commands.INDEX_MAPPING.values() if "table" in {cls.amqp_type(a) for a in cls.__slots__}]
_ARGS = {"octet": st.integers(0, 255), "short": st.just(0), "shortstr": NAMES, "longstr": TEXT, "bit": st.booleans(), "table": field_tables}


@given(st.sampled_from(TABLE_METHODS), st.data())
def test_table_methods_decode_as_pamqp_does(cls: Any, data: st.DataObject) -> None:
    """pamqp's table decoder is quadratic, so these go through fastpath's own (linear)
    walk of pamqp's field list; the object must be the one pamqp would have made."""
    method = cls(**{a: data.draw(_ARGS[cls.amqp_type(a)], label=a) for a in cls.__slots__})
    ch = 0 if cls.index >> 16 == 10 else 3
    wire = marshal(method, ch)
    [event] = Decoder(expect_protocol_header=False).feed(wire)
    assert isinstance(event, MethodReceived) and event.channel == ch
    assert method_fields(event.method) == method_fields(frame.unmarshal(wire)[2])


def test_other_methods_go_through_pamqp() -> None:
    sent = [
        (0, commands.Connection.TuneOk(2047, 131072, 60)), (0, commands.Connection.Open("/")),
        (5, commands.Channel.Open()), (5, commands.Basic.Qos(0, 10, False)), (5, commands.Basic.Recover(True)),
        (5, commands.Confirm.Select()), (5, commands.Tx.Commit()), (5, commands.Channel.Close(200, "bye", 0, 0)),
    ]  # fmt: skip
    events = Decoder(expect_protocol_header=False).feed(b"".join(marshal(m, ch) for ch, m in sent))
    assert [norm(e) for e in events] == [("MethodReceived", ch, method_fields(m)) for ch, m in sent]
    # pamqp warns when a deprecated method object is made; decoding one must not
    [event] = Decoder(expect_protocol_header=False).feed(struct.pack(">BHIHHB", 1, 5, 5, 60, 100, 1) + b"\xce")
    assert norm(event) == ("MethodReceived", 5, ("Basic.RecoverAsync", {"requeue": True}))


def test_other_content_methods_are_assembled_too() -> None:
    deliver = commands.Basic.Deliver("ct", 9, True, "ex", "rk")
    wire = pamqp_content(4, deliver, PP(app_id="a"), b"x" * 5000, 4096)
    [event] = Decoder(expect_protocol_header=False).feed(wire)
    assert isinstance(event, ContentReceived) and event.body == b"x" * 5000
    assert method_fields(event.method) == method_fields(deliver) and event.properties == Properties(app_id="a")


# -- any chunking, same events ------------------------------------------------------------


@st.composite
def streams(draw: st.DrawFn) -> tuple[int, bytes, list[Any]]:
    """A valid client stream with content interleaved across channels (never within
    one), and the events it must decode to."""
    frame_max = draw(st.sampled_from([4096, 5000, 9000]))
    queues: dict[int, list[tuple[bytes, Any]]] = {}  # channel -> (frame, event due once it is sent)
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["publish", "publish", "ack", "nack", "reject", "heartbeat", "qos", "declare"]))
        ch = 0 if kind == "heartbeat" else draw(st.integers(1, 3))
        q = queues.setdefault(ch, [])
        if kind == "publish":
            props = draw(some_properties(content_type=st.none() | TEXT.filter(bool), delivery_mode=st.sampled_from([None, 2]),
                                   headers=st.none() | st.dictionaries(st.text(max_size=5), st.integers(-1000, 10**12) | TEXT, max_size=3)))  # fmt: skip
            body = draw(st.binary(max_size=50)) + b"b" * draw(st.sampled_from([0, 0, 4088, 9000]))
            ex, rk, m = draw(NAMES), draw(TEXT), draw(st.booleans())
            pp = to_pamqp(props)
            frames = split_frames(marshal(commands.Basic.Publish(0, ex, rk, m), ch) + marshal(header.ContentHeader(0, len(body), pp), ch))
            cut = sorted(set(draw(st.lists(st.integers(0, len(body)), max_size=3))) | {0, len(body)})
            chunks = [c for a, b in itertools.pairwise(cut) for c in split(body[a:b], frame_max - 8)]
            frames += [marshal(pbody.ContentBody(c), ch) for c in chunks]
            raw = pp.marshal()
            event = Publish(ch, ex, rk, m, False, props, raw, body, raw)  # no message-id, timestamp: shape is raw
            q += [(f, None) for f in frames[:-1]] + [(frames[-1], event)]
        elif kind in ("ack", "nack", "reject"):
            tag, a, b = draw(TAGS), draw(st.booleans()), draw(st.booleans())
            method, event = {
                "ack": (commands.Basic.Ack(tag, a), Ack(ch, tag, a)),
                "nack": (commands.Basic.Nack(tag, a, b), Nack(ch, tag, a, b)),
                "reject": (commands.Basic.Reject(tag, b), Reject(ch, tag, b)),
            }[kind]
            q.append((marshal(method, ch), event))
        elif kind == "heartbeat":
            q.append((HEARTBEAT_FRAME, Heartbeat()))
        else:
            method = commands.Basic.Qos(0, draw(st.integers(0, 100))) if kind == "qos" else commands.Queue.Declare(
                queue=draw(NAMES), arguments=draw(field_tables))
            q.append((marshal(method, ch), MethodReceived(ch, method)))
    wire, events = bytearray(PROTOCOL_HEADER), []
    while queues:  # merge the channels' frames in a random order
        ch = draw(st.sampled_from(sorted(queues)))
        f, event = queues[ch].pop(0)
        wire += f
        if event is not None:
            events.append(event)
        if not queues[ch]:
            del queues[ch]
    return frame_max, bytes(wire), events


def split(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(streams(), st.data())
def test_any_chunking_yields_the_same_events(stream: tuple[int, bytes, list[Any]], data: st.DataObject) -> None:
    frame_max, wire, expected = stream
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=12)))
    one, many = Decoder(), Decoder()
    one.frame_max = many.frame_max = frame_max
    whole = one.feed(wire)
    pieces: list[Any] = []
    for a, b in zip([0, *cuts], [*cuts, len(wire)]):
        pieces += many.feed(wire[a:b])
    assert [norm(e) for e in whole] == [norm(e) for e in pieces] == [norm(e) for e in expected]
    assert one.buffered == many.buffered == 0


def test_byte_at_a_time() -> None:
    wire = PROTOCOL_HEADER + pamqp_content(1, commands.Basic.Publish(0, "ex", "rk"), PP(headers={"a": [1, "b"]}), b"x" * 9000, 4096)
    dec = Decoder()
    events = [e for i in range(len(wire)) for e in dec.feed(wire[i : i + 1])]
    assert len(events) == 1 and events[0].body == b"x" * 9000 and dec.buffered == 0


# -- hostile input --------------------------------------------------------------------------

_INDEXES = sorted(commands.INDEX_MAPPING) + [0x003C0063, 0x00FF000A]
framed_garbage = st.lists(
    st.one_of(
        st.tuples(st.just(1), st.sampled_from(_INDEXES).map(lambda i: struct.pack(">I", i)), st.binary(max_size=40)),
        st.tuples(st.just(2), st.tuples(st.sampled_from([60, 61]), st.integers(0, 1), st.integers(0, 50)).map(lambda t: struct.pack(">HHQ", *t)), st.binary(max_size=40)),
        st.tuples(st.sampled_from([3, 8, 4]), st.just(b""), st.binary(max_size=20)),
    ).flatmap(lambda t: st.tuples(st.just(t), st.integers(0, 2), st.sampled_from([0xCE, 0xCE, 0xCE, 0]))),
    max_size=8,
).map(lambda fs: PROTOCOL_HEADER + b"".join(struct.pack(">BHI", t, ch, len(a + b)) + a + b + bytes([end]) for (t, a, b), ch, end in fs))


def feed_all(dec: Decoder, chunks: list[bytes]) -> None:
    try:
        for chunk in chunks:
            for event in dec.feed(chunk):
                if isinstance(event, ChannelFailed):
                    assert not event.error.hard
    except AMQPProtocolError:
        with pytest.raises(AMQPProtocolError):  # a dead decoder stays dead
            dec.feed(b"more")


@settings(max_examples=300)
@given(st.one_of(st.binary(max_size=300), st.binary(max_size=300).map(lambda b: PROTOCOL_HEADER + b), framed_garbage))
def test_garbage_raises_only_protocol_errors(data: bytes) -> None:
    feed_all(Decoder(max_message_size=1000), [data])


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(streams(), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4), st.data())
def test_corrupted_streams_raise_only_protocol_errors(stream: tuple[int, bytes, list[Any]], flips: list[tuple[int, int]], data: st.DataObject) -> None:
    _, wire, _ = stream
    corrupt = bytearray(wire)
    for at, byte in flips:
        corrupt[at % len(corrupt)] = byte
    cut = data.draw(st.integers(0, len(corrupt)))
    feed_all(Decoder(max_message_size=5000, max_pending_content=8000), [bytes(corrupt[:cut]), bytes(corrupt[cut:])])


near_valid = st.one_of(
    st.binary(max_size=60),
    st.tuples(st.one_of(raw_tables, properties.map(encode_properties)), st.integers(0, 60), st.binary(max_size=3)).map(
        lambda t: t[0][: t[1]] + t[2] if t[1] < len(t[0]) else t[0] + t[2]
    ),
    st.lists(st.integers(0, 0xFFFF), min_size=1, max_size=3).map(lambda ws: b"".join(struct.pack(">H", w | 1) for w in ws[:-1]) + struct.pack(">H", ws[-1] & ~1)),
)  # fmt: skip


@settings(max_examples=500)
@given(near_valid)
def test_fast_decoders_raise_only_malformed_frame(data: bytes) -> None:
    decoders = [fastpath.decode_table, fastpath.decode_properties, fastpath.decode_publish, shapes.properties_of]
    decoders += [lambda b, p, e, cls=cls: fastpath.decode_method_fields(cls.__new__(cls), b, p, e) for cls in TABLE_METHODS]
    for decoder in decoders:
        try:
            decoder(data + b"\xce", 0, len(data))  # as in a frame: the end marker follows
        except fastpath.MalformedFrame:
            pass


def test_deep_and_wide_tables_are_bounded() -> None:
    inner = b""
    for _ in range(fastpath.MAX_TABLE_DEPTH + 1):
        inner = b"\x01kF" + struct.pack(">I", len(inner)) + inner
    deep = struct.pack(">I", len(inner)) + inner
    with pytest.raises(fastpath.MalformedFrame):  # pamqp: RecursionError
        fastpath.decode_table(deep, 0, len(deep))
    entries = b"\x01kV" * 40000  # pamqp copies the rest of the table for each entry
    wide = struct.pack(">I", len(entries)) + entries
    assert fastpath.decode_table(wide, 0, len(wide)) == ({"k": None}, len(wide))
    declare = commands.Queue.Declare(queue="q")
    wire = marshal(declare, 1)[:-1]  # swap in the deep table as the arguments
    payload = wire[7:-4] + deep
    frame_bytes = struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce"
    dec = Decoder(expect_protocol_header=False)
    with pytest.raises(AMQPConnectionError) as e:
        dec.feed(frame_bytes)
    assert (e.value.reply_code, e.value.class_id, e.value.method_id) == (501, 50, 10)


def test_record_headers_become_amqp_headers() -> None:
    """A Kafka record's headers, delivered over AMQP: text as long strings, other bytes
    as byte arrays, a null value as void; the whole table encodes."""
    from logbus.core.envelope_pb2 import Envelope
    from logbus.core.message import Message
    from logbus.gateway.amqp.mapping import properties_of

    m = Message(b"k", b"v", None, [("text", b"eu"), ("raw", b"\xff\x00"), ("none", None)],
                Envelope(protocol=Envelope.KAFKA))
    props = properties_of(m)
    assert props.headers == {"text": "eu", "raw": bytearray(b"\xff\x00"), "none": None}
    raw = encode_properties(props)
    assert fastpath.decode_properties(raw, 0, len(raw)).headers == props.headers


IDS = st.sampled_from([None, "", "id-1", "0f9c2d"]) | st.text(max_size=40)
STAMPS = st.sampled_from([None, 0, 1_700_000_000]) | st.integers(0, 2**64 - 1)


@given(st.lists(st.tuples(st.sampled_from(["", "ex"]), st.sampled_from(["a", "b"]),
                          st.sampled_from([None, "text/plain"]), st.sampled_from([None, 1, 2]),
                          st.sampled_from([None, {}, {"h": "v"}, {"h": bytearray(b"\x00\xff"), "n": 7}]),
                          IDS, STAMPS, st.sampled_from([None, "app"])), max_size=8))
def test_to_message_shares_nothing_that_differs(publishes: list[tuple[Any, ...]]) -> None:
    """Messages whose properties differ at most in message-id and timestamp share one
    envelope template (mapping._ENVELOPES); each record and envelope is still exactly
    what an uncached conversion makes, byte for byte."""
    from logbus.core.message import Message
    from logbus.gateway.amqp import mapping

    for i, (exchange, key, content_type, mode, headers, message_id, stamp, app) in enumerate(publishes):
        props = Properties(content_type=content_type, delivery_mode=mode, headers=headers, message_id=message_id,
                           timestamp=stamp, app_id=app)
        raw = encode_properties(props)
        decoded, raw2, shape = shapes.properties_of(raw, 0, len(raw))
        assert raw2 == raw
        p = Publish(1, exchange, key, False, False, decoded, raw, b"%d" % i, shape)
        m = mapping.to_message(p)
        env, user = mapping._envelope(exchange, key, fastpath.decode_properties(raw, 0, len(raw)))
        fresh = Message(key.encode(), b"%d" % i, None, user, env)
        assert m.envelope == env
        assert m.to_record() == fresh.to_record()
        assert m.record_headers is not None and m.record_headers[-1][1] == env.SerializeToString()


@given(st.lists(some_properties(content_type=st.none() | TEXT, headers=st.none() | st.just({}) | st.dictionaries(
    st.text(max_size=5), st.integers(-1000, 10**12) | TEXT, max_size=3), delivery_mode=st.none() | st.integers(0, 255),
    correlation_id=st.none() | TEXT, expiration=st.none() | TEXT, message_id=IDS, timestamp=STAMPS,
    message_type=st.none() | TEXT, app_id=st.none() | TEXT), max_size=10))
def test_properties_of_equals_the_decoder(sets: list[Properties]) -> None:
    """properties_of's caches (by raw bytes, by shape) give what a fresh decode gives,
    and a shape is the bytes without the message-id and timestamp values."""
    shapes._SEEN.clear()
    shapes._SHAPES.clear()
    for props in sets + sets:  # the second time round, from the caches
        raw = encode_properties(props)
        got, raw2, shape = shapes.properties_of(raw, 0, len(raw))
        assert got == fastpath.decode_properties(raw, 0, len(raw)) and raw2 == raw
        without = encode_properties(props._replace(message_id=None, timestamp=None))
        flags = int.from_bytes(raw[:2], "big")
        assert int.from_bytes(shape[:2], "big") == flags  # the flags stay: a shape knows what it left out
        assert shape[2:] == without[2:]


def test_properties_of_reports_bad_message_id_from_a_cached_shape() -> None:
    """A message-id that is not UTF-8 is refused even when its shape is cached."""
    good = encode_properties(Properties(delivery_mode=2, message_id="abcd"))
    shapes.properties_of(good, 0, len(good))
    bad = good.replace(b"abcd", b"ab\xff\xfe")
    with pytest.raises(fastpath.MalformedFrame):
        shapes.properties_of(bad, 0, len(bad))


def test_reserved_header_name_stays_in_amqp_headers() -> None:
    """An AMQP header named like the envelope's record header is not copied to the
    record's headers (it would be read back as the envelope), only kept for AMQP."""
    from logbus.core.message import ENVELOPE_HEADER, Message
    from logbus.gateway.amqp.mapping import to_message

    props = Properties(headers={ENVELOPE_HEADER: "mine", "other": "x"})
    raw = encode_properties(props)
    m = to_message(Publish(1, "", "q", False, False, props, raw, b"body"))
    record = m.to_record()
    assert [h for h, _ in record.headers] == ["other", ENVELOPE_HEADER]
    back = Message.from_record(record)
    assert back.headers == [("other", b"x")]
    assert fastpath.decode_table(back.envelope.amqp_headers, 0, len(back.envelope.amqp_headers))[0] == {
        ENVELOPE_HEADER: "mine", "other": "x"}
