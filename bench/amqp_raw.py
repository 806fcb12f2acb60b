"""A cheap AMQP 0-9-1 client for bench/amqp_bench.py's latency workload (``--latency-client raw``).

With aio-pika, the latency workload's publisher costs about 440 µs and its consumer about
207 µs of CPU per message: at 2,000 msg/s the two clients take 1.3 of this machine's 2
cores, and the latency measured is mostly the clients waiting for a core. This client
spends a few tens of µs per message, so that the broker is what is measured:

- the handshake, channel open, ``confirm.select``, ``basic.qos`` and ``basic.consume``
  go through pamqp (encoded and decoded in full);
- on the hot path the publisher writes three frames pre-encoded once (``basic.publish``
  to the default exchange, a content header for persistent bodies of one size, the
  body frame's head), and reads only ``basic.ack``/``basic.nack`` frames by hand; the
  consumer reads ``basic.deliver``, the content header and the body by hand and answers
  each delivery with one ``basic.ack`` (manual acks, as the aio-pika consumer).

Any other frame on the hot path (a ``channel.close``, ``connection.close``) fails the run
with what the broker said. The queue is declared by the caller (aio-pika), as in the
other workloads.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any
from urllib.parse import unquote, urlparse

from pamqp import commands, frame, header

from common import BenchError

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = b"\xce"
_FRAME_HEAD = struct.Struct(">BHI")  # type, channel, payload size
_METHOD = struct.Struct(">HH")  # class id, method id
_ACK = struct.Struct(">QB")  # delivery tag, flags (multiple)
BASIC = 60
BASIC_ACK, BASIC_NACK, BASIC_DELIVER = 80, 120, 60
CHANNEL = 1


class RawAmqp(asyncio.Protocol):
    """One connection, one channel. ``handshake`` then either ``publisher`` or
    ``consumer`` use; ``on_method`` gets the hot path's method frames, ``on_content``
    the content (header, body) that follows a ``basic.deliver``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.slow: asyncio.Queue[Any] = asyncio.Queue()  # frames (setup), or the failure
        self.fast = False  # after setup: frames parsed by hand
        self.failed: BenchError | None = None
        self.on_method: Any = None  # (class_id, method_id, payload) -> None
        self.on_body: Any = None  # (body bytes) -> None
        self._body_left = 0
        self._body = bytearray()
        self.closed = asyncio.get_running_loop().create_future()

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # (uvloop's is not asyncio's class)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.failed is None:
            self.failed = BenchError(f"the broker closed the connection ({exc or 'EOF'})")
        self.slow.put_nowait(self.failed)
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= 8:
            kind, channel, size = _FRAME_HEAD.unpack_from(buf, pos)
            if end - pos < size + 8:
                break
            start = pos + 7
            if self.fast:
                self._fast(kind, buf, start, size)
            else:
                _, _, value = frame.unmarshal(bytes(buf[pos:start + size + 1]))
                self.slow.put_nowait(value)
            pos = start + size + 1
        del buf[:pos]

    def _fast(self, kind: int, buf: bytearray, start: int, size: int) -> None:
        if kind == 1:
            class_id, method_id = _METHOD.unpack_from(buf, start)
            if class_id == BASIC and self.on_method is not None:
                self.on_method(method_id, buf, start + 4)
                return
            _, _, value = frame.unmarshal(bytes(buf[start - 7:start + size + 1]))
            self.fail(f"the broker sent {value.name}: {getattr(value, 'reply_text', '')}")
        elif kind == 2:  # content header: class, weight, body size, flags...
            (self._body_left,) = struct.unpack_from(">Q", buf, start + 4)
            self._body = bytearray()
            if not self._body_left:
                self.on_body(b"")
        elif kind == 3:
            self._body += buf[start:start + size]
            self._body_left -= size
            if self._body_left <= 0:
                self.on_body(bytes(self._body))
        elif kind != 8:  # (heartbeats: none asked for)
            self.fail(f"unexpected frame type {kind}")

    def fail(self, why: str) -> None:
        if self.failed is None:
            self.failed = BenchError(why)
        if self.transport is not None:
            self.transport.abort()

    # -- setup ---------------------------------------------------------------------------

    def send(self, value: Any, channel: int = CHANNEL) -> None:
        assert self.transport is not None
        self.transport.write(frame.marshal(value, channel))

    async def expect(self, kind: type, timeout: float) -> Any:
        async with asyncio.timeout(timeout):
            value = await self.slow.get()
        if isinstance(value, Exception):
            raise value
        if not isinstance(value, kind):
            raise BenchError(f"expected {kind.__name__}, the broker sent {value!r}")
        return value

    async def handshake(self, url: str, timeout: float) -> None:
        u = urlparse(url)
        user, password = unquote(u.username or "guest"), unquote(u.password or "guest")
        vhost = unquote(u.path[1:]) if len(u.path) > 1 else "/"
        assert self.transport is not None
        self.transport.write(PROTOCOL_HEADER)
        await self.expect(commands.Connection.Start, timeout)
        self.send(commands.Connection.StartOk(client_properties={"product": "amqp_raw bench"},
                                              mechanism="PLAIN", response=f"\0{user}\0{password}"), 0)
        tune = await self.expect(commands.Connection.Tune, timeout)
        self.send(commands.Connection.TuneOk(channel_max=1, frame_max=tune.frame_max, heartbeat=0), 0)
        self.send(commands.Connection.Open(virtual_host=vhost), 0)
        await self.expect(commands.Connection.OpenOk, timeout)
        self.send(commands.Channel.Open())
        await self.expect(commands.Channel.OpenOk, timeout)

    async def close(self, timeout: float) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.fast = False
        self.failed = BenchError("closed")  # connection_lost from here on is expected
        self.send(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 0)
        try:
            async with asyncio.timeout(timeout):
                await self.closed
        except TimeoutError:
            self.transport.abort()


async def connect(url: str, timeout: float) -> RawAmqp:
    u = urlparse(url)
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeout):
        _, proto = await loop.create_connection(RawAmqp, u.hostname or "127.0.0.1", u.port or 5672)
    await proto.handshake(url, timeout)
    return proto


class RawPublisher:
    """Persistent bodies of one size to ``queue`` via the default exchange, publisher
    confirms, at most ``window`` unconfirmed."""

    def __init__(self, conn: RawAmqp, queue: str, size: int, window: int) -> None:
        self.conn = conn
        self.window = window
        self.size = size
        self.head = (frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), CHANNEL)
                     + frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties(delivery_mode=2)),
                                     CHANNEL)
                     + _FRAME_HEAD.pack(3, CHANNEL, size))
        self.published = 0
        self.confirmed = 0
        self.space = asyncio.Event()
        self.space.set()
        self.drained = asyncio.Event()
        self.drained.set()

    async def start(self, timeout: float) -> None:
        self.conn.send(commands.Confirm.Select())
        await self.conn.expect(commands.Confirm.SelectOk, timeout)
        self.conn.on_method = self._method
        self.conn.fast = True

    def _method(self, method_id: int, buf: bytearray, at: int) -> None:
        if method_id == BASIC_NACK:
            self.conn.fail("the broker nacked a publish")
            return
        if method_id != BASIC_ACK:
            self.conn.fail(f"unexpected basic method {method_id} on the publisher's channel")
            return
        tag, flags = _ACK.unpack_from(buf, at)
        self.confirmed = tag if flags & 1 else self.confirmed + 1
        if self.published - self.confirmed < self.window:
            self.space.set()
        if self.confirmed == self.published:
            self.drained.set()

    async def drain(self) -> None:
        """Until every publish is confirmed (raises if the connection failed first)."""
        while not self.drained.is_set():
            if self.conn.failed is not None:
                raise self.conn.failed
            waits = [asyncio.ensure_future(self.drained.wait()), self.conn.closed]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            waits[0].cancel()
        if self.conn.failed is not None:
            raise self.conn.failed

    async def publish(self, body: bytes) -> None:
        if len(body) != self.size:
            raise ValueError(f"body of {len(body)} bytes, the publisher sends {self.size}")
        while self.published - self.confirmed >= self.window and self.conn.failed is None:
            self.space.clear()
            waits = [asyncio.ensure_future(self.space.wait()), self.conn.closed]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            waits[0].cancel()
        if self.conn.failed is not None:
            raise self.conn.failed
        assert self.conn.transport is not None
        self.conn.transport.write(self.head + body + FRAME_END)
        self.published += 1
        self.drained.clear()


class RawConsumer:
    """``basic.consume`` with manual acks; ``on_body`` per message; one ``basic.ack``
    per delivery, as the aio-pika consumer sends."""

    def __init__(self, conn: RawAmqp, queue: str, prefetch: int, on_body: Any) -> None:
        self.conn = conn
        self.queue = queue
        self.prefetch = prefetch
        self.user_on_body = on_body
        self.tag = 0
        self.delivered = 0
        self.redelivered = 0
        self._ack = _FRAME_HEAD.pack(1, CHANNEL, 13) + _METHOD.pack(BASIC, BASIC_ACK)

    async def start(self, timeout: float) -> None:
        self.conn.send(commands.Basic.Qos(prefetch_count=self.prefetch))
        await self.conn.expect(commands.Basic.QosOk, timeout)
        self.conn.send(commands.Basic.Consume(queue=self.queue, consumer_tag="raw"))
        await self.conn.expect(commands.Basic.ConsumeOk, timeout)
        self.conn.on_method = self._method
        self.conn.on_body = self._body
        self.conn.fast = True

    def _method(self, method_id: int, buf: bytearray, at: int) -> None:
        if method_id != BASIC_DELIVER:
            self.conn.fail(f"unexpected basic method {method_id} on the consumer's channel")
            return
        at += 1 + buf[at]  # consumer tag
        self.tag, redelivered = _ACK.unpack_from(buf, at)
        self.redelivered += redelivered & 1

    def _body(self, body: bytes) -> None:
        self.user_on_body(body)
        assert self.conn.transport is not None
        self.conn.transport.write(self._ack + _ACK.pack(self.tag, 0) + FRAME_END)
        self.delivered += 1


async def consume_latency(args: Any, url: str, queues: list[str], expected: int, latency_warmup: int | None,
                          pipe: Any) -> dict[str, Any]:
    """The latency consumer, as ``amqp_client.child_consume`` runs it with aio-pika: the
    same pipe messages, the same result."""
    from common import LatencyRecorder, self_cpu

    (queue,) = queues
    recorder = LatencyRecorder(expected, latency_warmup or 0)
    done = asyncio.Event()
    conn = await connect(url, args.timeout)
    consumer: RawConsumer | None = None

    def on_body(body: bytes) -> None:
        recorder(body)
        if consumer is not None and consumer.delivered + 1 >= expected:
            done.set()

    try:
        consumer = RawConsumer(conn, queue, args.prefetch, on_body)
        await consumer.start(args.timeout)
        pipe.send(("ready", None))
        cpu0 = self_cpu()
        while not done.is_set():
            if conn.failed is not None:
                raise conn.failed
            try:
                async with asyncio.timeout(1.0):
                    await done.wait()
            except TimeoutError:
                pipe.send(("progress", {"acked.0": consumer.delivered}))
        conn.fast = False  # the rest through pamqp: cancel, then how many are left
        conn.send(commands.Basic.Cancel(consumer_tag="raw"))
        await conn.expect(commands.Basic.CancelOk, args.timeout)
        conn.send(commands.Queue.Declare(queue=queue, passive=True))
        left = (await conn.expect(commands.Queue.DeclareOk, args.timeout)).message_count
        pipe.send(("drained", self_cpu() - cpu0))
        if left or consumer.redelivered:
            raise BenchError(f"{left} messages left in {queue}, {consumer.redelivered} redelivered")
        if recorder.duplicates:
            raise BenchError(f"{recorder.duplicates} messages received twice")
        return recorder.result()
    finally:
        await conn.close(args.timeout)


def consumer_main(args: Any, url: str, queues: list[str], expected: int, latency_warmup: int | None,
                  pipe: Any) -> None:
    """A spawned process's target (``amqp_client.ConsumerProcess(..., main=consumer_main)``)."""
    import uvloop

    try:
        pipe.send(("done", uvloop.run(consume_latency(args, url, queues, expected, latency_warmup, pipe))))
    except BaseException as exc:  # noqa: BLE001 -- whatever it is, the parent reports it
        pipe.send(("error", str(exc) if isinstance(exc, BenchError) else repr(exc)))
    finally:
        pipe.close()
