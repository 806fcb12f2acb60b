"""Bad input on raw sockets (pamqp frames, no client library to smooth things over): a
wrong protocol header, frames over the negotiated frame_max, a bad frame-end octet,
unknown methods, channel misuse, content out of order, a bad vhost or password. Each
test reads the broker's exact answer (the Close and its reply code, or the socket
closing) within a bounded time, then checks the broker still serves a fresh client.

RabbitMQ (3.10) answers a fatal frame error with Connection.Close and then keeps the
socket open ~3 s before dropping it (its SILENT_CLOSE_DELAY), even after Close-Ok: the
tests allow 10 s for the close."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import aio_pika
import pytest
from pamqp import body as pbody
from pamqp import commands, frame, header
from pamqp.base import Frame

from tests.integration import amqp_target
from tests.integration.amqp_target import AmqpBroker, run, unique

amqp_broker = amqp_target.amqp_broker  # the fixture, by the name tests ask for

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = 0xCE
CLOSE_TIMEOUT = 10.0  # RabbitMQ waits 3 s after a fatal frame error before closing


class Closed(Exception):
    """The broker closed the socket."""


class RawAmqp:
    """A socket speaking AMQP frames through pamqp; every read has a deadline."""

    def __init__(self, broker: AmqpBroker, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((broker.host, broker.port), timeout=timeout)
        self.timeout = timeout
        self.buf = b""
        self.frame_max = 0
        self.start: commands.Connection.Start | None = None
        self.tune: commands.Connection.Tune | None = None

    def close(self) -> None:
        self.sock.close()

    # -- writing --------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_method(self, channel: int, method: Frame) -> None:
        self.send(frame.marshal(method, channel))

    def publish(self, channel: int, exchange: str, routing_key: str, content: bytes,
                *, mandatory: bool = False, frame_payload: int | None = None) -> None:
        """Basic.Publish, content header and body frames of ``frame_payload`` bytes (by
        default the most the negotiated frame_max allows)."""
        size = frame_payload or (self.frame_max - 8 if self.frame_max else 131072)
        data = frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key,
                                                    mandatory=mandatory), channel)
        data += frame.marshal(header.ContentHeader(0, len(content), commands.Basic.Properties()), channel)
        for i in range(0, len(content), size):
            data += frame.marshal(pbody.ContentBody(content[i:i + size]), channel)
        self.send(data)

    # -- reading --------------------------------------------------------------------

    def _recv(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no complete frame from the broker within {self.timeout:g} s "
                                 f"(have {self.buf[:64]!r})")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"no complete frame from the broker within {self.timeout:g} s "
                                 f"(have {self.buf[:64]!r})") from None
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise Closed()
        self.buf += chunk

    def read_frame(self, timeout: float | None = None) -> tuple[int, Any]:
        """The next frame as (channel, pamqp frame); Closed if the socket closes first."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self.buf) < 7:
            self._recv(deadline)
        _, _, size = struct.unpack(">BHI", self.buf[:7])
        while len(self.buf) < 7 + size + 1:
            self._recv(deadline)
        used, channel, value = frame.unmarshal(self.buf[:7 + size + 1])
        self.buf = self.buf[used:]
        return channel, value

    def expect(self, channel: int, kind: type, timeout: float | None = None) -> Any:
        got_channel, value = self.read_frame(timeout)
        assert (got_channel, type(value)) == (channel, kind), (got_channel, describe(value))
        return value

    def read_until_closed(self, timeout: float = CLOSE_TIMEOUT) -> bytes:
        """Everything the broker sends until it closes the socket (which it must)."""
        deadline = time.monotonic() + timeout
        data, self.buf = self.buf, b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"the broker kept the socket open for {timeout:g} s (sent {data[:64]!r})")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                return data
            if not chunk:
                return data
            data += chunk

    # -- the handshake --------------------------------------------------------------

    def handshake(self, *, frame_max: int = 0, user: str = "guest", password: str = "guest",
                  vhost: str = "/", open_connection: bool = True, channel_max: int = 0) -> None:
        self.send(PROTOCOL_HEADER)
        self.start = self.expect(0, commands.Connection.Start)
        self.send_method(0, commands.Connection.StartOk(
            client_properties={"product": "logbus raw test",
                               "capabilities": {"authentication_failure_close": True}},
            mechanism="PLAIN", response=f"\0{user}\0{password}", locale="en_US"))
        if not open_connection:
            return
        self.tune = self.expect(0, commands.Connection.Tune)
        server_max = self.tune.frame_max
        self.frame_max = min(frame_max or server_max, server_max) if server_max else frame_max
        self.send_method(0, commands.Connection.TuneOk(
            channel_max=channel_max or self.tune.channel_max, frame_max=self.frame_max, heartbeat=0))
        self.send_method(0, commands.Connection.Open(virtual_host=vhost))

    def open(self, **kwargs: Any) -> None:
        self.handshake(**kwargs)
        self.expect(0, commands.Connection.OpenOk)

    def open_channel(self, channel: int) -> None:
        self.send_method(channel, commands.Channel.Open())
        self.expect(channel, commands.Channel.OpenOk)

    def expect_connection_close(self, *codes: int) -> commands.Connection.Close:
        """Connection.Close with one of ``codes``; answer Close-Ok; the socket closes."""
        _, close = self.read_frame()
        assert isinstance(close, commands.Connection.Close), describe(close)
        assert close.reply_code in codes, describe(close)
        self.send_method(0, commands.Connection.CloseOk())
        self.read_until_closed()
        return close


def describe(value: Any) -> str:
    try:
        return f"{type(value).__name__}({dict(value)})"
    except TypeError:
        return repr(value)


@pytest.fixture
def raw(amqp_broker: AmqpBroker) -> Iterator[Any]:
    """Opens raw connections; closes them all; then checks the broker still serves."""
    opened: list[RawAmqp] = []

    def connect(timeout: float = 10.0) -> RawAmqp:
        conn = RawAmqp(amqp_broker, timeout)
        opened.append(conn)
        return conn

    try:
        yield connect
    finally:
        for conn in opened:
            conn.close()
    assert_serving(amqp_broker)


def assert_serving(broker: AmqpBroker) -> None:
    """A fresh aio-pika client: connect, declare, publish with confirm, get."""

    async def body() -> None:
        async with await aio_pika.connect(broker.url, timeout=10) as connection:
            channel = await connection.channel()
            q = await channel.declare_queue(unique("alive"), auto_delete=True)
            await channel.default_exchange.publish(aio_pika.Message(b"still here"), q.name, timeout=10)
            got = await q.get(no_ack=True, timeout=10)
            assert got.body == b"still here"

    run(body(), 30)


# -- the protocol header -------------------------------------------------------------


@pytest.mark.parametrize("sent", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"AMQP\x00\x01\x00\x00",  # AMQP 1.0
    b"AMQP\x00\x00\x0a\x00",  # 0-10
    b"\x00" * 8,
], ids=["http", "amqp1.0", "amqp0-10", "zeros"])
def test_wrong_protocol_header(raw: Any, sent: bytes) -> None:
    conn = raw()
    conn.send(sent)
    # the spec: answer with the header we do speak, then close
    assert conn.read_until_closed(5) == PROTOCOL_HEADER


def test_handshake_and_clean_close(raw: Any) -> None:
    conn = raw()
    conn.handshake()
    start = conn.start
    assert start is not None and (start.version_major, start.version_minor) == (0, 9)
    assert "PLAIN" in start.mechanisms.split() and "en_US" in start.locales.split()
    tune = conn.tune
    assert tune is not None and (tune.frame_max == 0 or tune.frame_max >= 4096), describe(tune)
    conn.expect(0, commands.Connection.OpenOk)
    conn.open_channel(1)
    conn.send_method(1, commands.Channel.Close(200, "bye", 0, 0))
    conn.expect(1, commands.Channel.CloseOk)
    conn.open_channel(1)  # a closed channel number can be opened again
    conn.send_method(0, commands.Connection.Close(200, "bye", 0, 0))
    conn.expect(0, commands.Connection.CloseOk)
    # (whoever sent Close closes the socket once Close-Ok is in: that is us, and
    # RabbitMQ indeed leaves the socket to the client)


# -- frame errors: Connection.Close 501 ------------------------------------------------


@pytest.mark.parametrize("kind", ["body", "method"])
def test_frame_over_frame_max(raw: Any, kind: str) -> None:
    conn = raw()
    conn.open(frame_max=4096)
    assert conn.frame_max == 4096
    conn.open_channel(1)
    q = unique("framemax")
    conn.send_method(1, commands.Queue.Declare(queue=q, auto_delete=True))
    conn.expect(1, commands.Queue.DeclareOk)
    # a frame of frame_max octets (payload 4088) is fine; so is a payload of frame_max
    # itself: RabbitMQ lets clients overshoot by the 8 octets of framing, because some
    # clients count frame_max as the payload limit (logbus's codec does the same)
    conn.send_method(1, commands.Confirm.Select())
    conn.expect(1, commands.Confirm.SelectOk)
    for payload in (4096 - 8, 4096):
        conn.publish(1, "", q, b"x" * 5000, frame_payload=payload)
    acked = 0
    while acked < 2:  # one basic.ack each, or one with multiple=True
        ack = conn.expect(1, commands.Basic.Ack)
        acked = ack.delivery_tag
    conn.send_method(1, commands.Queue.Declare(queue=q, passive=True))
    assert conn.expect(1, commands.Queue.DeclareOk).message_count == 2
    # a payload over frame_max is a frame error, whatever the frame type (RabbitMQ's
    # text: "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,4097,4088}")
    if kind == "body":
        conn.publish(1, "", q, b"y" * 5000, frame_payload=4096 + 1)
    else:
        conn.send_method(1, commands.Queue.Declare(queue=q, arguments={"x-pad": "p" * 5000}))
    close = conn.expect_connection_close(501)
    assert close.reply_text.startswith("FRAME_ERROR"), describe(close)


def test_bad_frame_end(raw: Any) -> None:
    conn = raw()
    conn.open()
    good = frame.marshal(commands.Channel.Open(), 1)
    assert good[-1] == FRAME_END
    conn.send(good[:-1] + b"\x00")
    close = conn.expect_connection_close(501)
    assert close.reply_text.startswith("FRAME_ERROR"), describe(close)


# -- unknown methods -----------------------------------------------------------------


@pytest.mark.parametrize("class_id, method_id", [(60, 999), (99, 10)], ids=["method", "class"])
def test_unknown_class_or_method(raw: Any, class_id: int, method_id: int) -> None:
    conn = raw()
    conn.open()
    conn.open_channel(1)
    conn.send(struct.pack(">BHIHH", 1, 1, 4, class_id, method_id) + bytes([FRAME_END]))
    # logbus answers Connection.Close 540 NOT_IMPLEMENTED (or 503 COMMAND_INVALID);
    # RabbitMQ 3.10 drops the connection without a Close. Either way the connection ends.
    try:
        _, value = conn.read_frame()
    except Closed:
        return
    assert isinstance(value, commands.Connection.Close), describe(value)
    assert value.reply_code in (540, 503), describe(value)
    conn.send_method(0, commands.Connection.CloseOk())
    conn.read_until_closed()


# -- channel and content misuse: Connection.Close 504 / 505 -----------------------------


def test_method_on_unopened_channel(raw: Any) -> None:
    conn = raw()
    conn.open()
    conn.send_method(2, commands.Queue.Declare(queue=unique("x")))
    close = conn.expect_connection_close(504)
    assert close.reply_text == "CHANNEL_ERROR - expected 'channel.open'", describe(close)
    assert (close.class_id, close.method_id) == (50, 10)  # queue.declare


def test_second_channel_open(raw: Any) -> None:
    conn = raw()
    conn.open()
    conn.open_channel(1)
    conn.send_method(1, commands.Channel.Open())
    close = conn.expect_connection_close(504)
    assert close.reply_text == "CHANNEL_ERROR - second 'channel.open' seen", describe(close)
    assert (close.class_id, close.method_id) == (20, 10)


def test_channels_past_negotiated_channel_max(raw: Any) -> None:
    """RabbitMQ counts channel_max: any channel number opens while fewer channels than
    that are open (the spec reads it as the highest number); one more is 530."""
    conn = raw()
    conn.open(channel_max=2)
    conn.open_channel(2)
    conn.open_channel(3)
    conn.send_method(1, commands.Channel.Open())
    close = conn.expect_connection_close(530)
    assert close.reply_text == ("NOT_ALLOWED - number of channels opened (2) has reached the "
                                "negotiated channel_max (2)"), describe(close)


def test_content_header_without_publish(raw: Any) -> None:
    conn = raw()
    conn.open()
    conn.open_channel(1)
    conn.send(frame.marshal(header.ContentHeader(0, 5, commands.Basic.Properties()), 1))
    close = conn.expect_connection_close(505)
    assert close.reply_text.startswith("UNEXPECTED_FRAME"), describe(close)


def test_method_in_the_middle_of_content(raw: Any) -> None:
    conn = raw()
    conn.open()
    conn.open_channel(1)
    conn.send_method(1, commands.Basic.Publish(exchange="", routing_key="x"))
    conn.send(frame.marshal(header.ContentHeader(0, 5, commands.Basic.Properties()), 1))
    conn.send_method(1, commands.Queue.Declare(queue=unique("x")))  # body expected
    close = conn.expect_connection_close(505)
    assert close.reply_text.startswith("UNEXPECTED_FRAME"), describe(close)
    assert (close.class_id, close.method_id) == (60, 40)  # the publish being assembled


def test_unknown_exchange_type_closes_the_connection(raw: Any) -> None:
    """503 COMMAND_INVALID is a connection exception in AMQP 0-9-1, and RabbitMQ closes
    the connection for an exchange type it does not know."""
    conn = raw()
    conn.open()
    conn.open_channel(1)
    conn.send_method(1, commands.Exchange.Declare(exchange=unique("x"), exchange_type="x-no-such-type"))
    close = conn.expect_connection_close(503)
    assert close.reply_text == "COMMAND_INVALID - unknown exchange type 'x-no-such-type'", describe(close)
    assert (close.class_id, close.method_id) == (40, 10)  # exchange.declare
    try:  # (RabbitMQ may drop the socket before the Close-Ok arrives)
        conn.send_method(0, commands.Connection.CloseOk())
    except OSError:
        return
    conn.read_until_closed()


# -- soft errors: Channel.Close, the connection lives on -------------------------------


def test_publish_to_missing_exchange_closes_only_the_channel(raw: Any) -> None:
    conn = raw()
    conn.open()
    conn.open_channel(1)
    conn.open_channel(2)
    conn.publish(1, "no-such-exchange", "k", b"x")
    close = conn.expect(1, commands.Channel.Close)
    assert (close.reply_code, close.reply_text) == (404, "NOT_FOUND - no exchange 'no-such-exchange' in vhost '/'")
    assert (close.class_id, close.method_id) == (60, 40)
    # until Close-Ok, whatever else arrives on that channel is dropped unanswered
    conn.send_method(1, commands.Queue.Declare(queue=unique("ignored"), auto_delete=True))
    # channel 2 is untouched
    q = unique("other")
    conn.send_method(2, commands.Queue.Declare(queue=q, auto_delete=True))
    conn.expect(2, commands.Queue.DeclareOk)  # (nothing for channel 1 came first)
    conn.send_method(1, commands.Channel.CloseOk())
    conn.open_channel(1)
    conn.send_method(1, commands.Confirm.Select())
    conn.expect(1, commands.Confirm.SelectOk)
    conn.publish(1, "", q, b"delivered")
    assert conn.expect(1, commands.Basic.Ack).delivery_tag == 1
    conn.send_method(1, commands.Queue.Declare(queue=q, passive=True))
    assert conn.expect(1, commands.Queue.DeclareOk).message_count == 1


def test_ack_unknown_delivery_tag(raw: Any) -> None:
    conn = raw()
    conn.open()
    conn.open_channel(1)
    conn.send_method(1, commands.Basic.Ack(delivery_tag=99))
    close = conn.expect(1, commands.Channel.Close)
    assert (close.reply_code, close.reply_text) == (406, "PRECONDITION_FAILED - unknown delivery tag 99")
    assert (close.class_id, close.method_id) == (60, 80)  # basic.ack
    conn.send_method(1, commands.Channel.CloseOk())
    conn.open_channel(1)


def test_mandatory_return_without_confirms(raw: Any) -> None:
    conn = raw()
    conn.open()
    conn.open_channel(1)
    missing = unique("no-such-queue")
    conn.publish(1, "", missing, b"back to sender", mandatory=True)
    ret = conn.expect(1, commands.Basic.Return)
    assert (ret.reply_code, ret.reply_text, ret.exchange, ret.routing_key) == (312, "NO_ROUTE", "", missing)
    content = conn.expect(1, header.ContentHeader)
    assert content.body_size == len(b"back to sender")
    assert conn.expect(1, pbody.ContentBody).value == b"back to sender"


# -- the handshake refused -----------------------------------------------------------


def test_wrong_password_403(raw: Any) -> None:
    conn = raw()
    conn.handshake(password="wrong", open_connection=False)
    # sent because the client has the authentication_failure_close capability
    close = conn.expect_connection_close(403)
    assert close.reply_text.startswith("ACCESS_REFUSED - "), describe(close)


def test_unknown_vhost_530(raw: Any) -> None:
    conn = raw()
    conn.handshake(vhost="/no-such-vhost")
    close = conn.expect_connection_close(530)
    assert close.reply_text == "NOT_ALLOWED - vhost /no-such-vhost not found", describe(close)
    assert (close.class_id, close.method_id) == (10, 40)  # connection.open
