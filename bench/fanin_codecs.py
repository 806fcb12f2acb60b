"""The wire side of bench/fanin_clients.py and bench/fanin_consumer.py: MQTT 3.1.1, AMQP
0-9-1 and Kafka encoded once per run, read back by hand; no client library on the hot path.

Codecs (one object per process, the per-connection state on the device): ``opening``
is written on connect, ``handshake`` reads the broker's answers until the device is
ready, ``message`` encodes one publish, ``feed`` reads what came and says whether the
message in flight is complete (and what to answer: QoS 2's PUBREL), ``closing`` is the
goodbye. Anything unexpected fails the run with BenchError.
"""

from __future__ import annotations

import os
import resource
import socket
import struct
import time
from collections import deque
from typing import Any

from mqtt_raw import packet as mqtt_packet
from mqtt_raw import remaining_length as mqtt_remaining_length
from mqtt_raw import utf8 as mqtt_str
from common import LATENCY_HEAD, BenchError

HOST = "127.0.0.1"
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")



def raise_nofile(needed: int) -> None:
    """Soft RLIMIT_NOFILE up to the hard one (we are root: the hard one too if short)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        if hard < needed:
            hard = needed
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(needed, min(hard, 1 << 20)), hard))


# -- MQTT 3.1.1 --------------------------------------------------------------------


def mqtt_connect(client_id: str) -> bytes:
    # clean session, keep-alive 0: no PINGREQ however slow the device's rate
    return mqtt_packet(0x10, mqtt_str("MQTT") + bytes([4, 0x02]) + _U16.pack(0) + mqtt_str(client_id))


def mqtt_packets(buf: bytearray) -> list[tuple[int, bytes]]:
    """The whole packets at the start of ``buf`` (first byte, body), taken out of it."""
    out, pos, end = [], 0, len(buf)
    while end - pos >= 2:
        n, mult, i = 0, 1, pos + 1
        while True:
            if i >= end or i - pos > 4:
                n = -1
                break
            digit = buf[i]
            n += (digit & 0x7F) * mult
            mult *= 128
            i += 1
            if not digit & 0x80:
                break
        if n < 0 or end - i < n:
            break
        out.append((buf[pos], bytes(buf[i:i + n])))
        pos = i + n
    del buf[:pos]
    return out


class MqttCodec:
    """PUBLISH at the fleet's QoS to ``<prefix>/<device index>``; QoS 1 done at PUBACK,
    QoS 2 answers PUBREC with PUBREL and is done at PUBCOMP."""

    acks = True
    waits_for_eof = True  # after DISCONNECT the broker closes

    def __init__(self, spec: dict[str, Any]) -> None:
        self.qos = spec["qos"]
        self.acks = self.qos > 0
        self.run_id = spec["run_id"]
        self.prefix = spec["topic"]
        self.pad = bytes(spec["size"] - LATENCY_HEAD.size)

    def head(self, index: int) -> bytes:
        topic = mqtt_str(f"{self.prefix}/{index}")
        body_len = len(topic) + (2 if self.qos else 0) + LATENCY_HEAD.size + len(self.pad)
        return bytes([0x30 | self.qos << 1]) + mqtt_remaining_length(body_len) + topic

    def opening(self, dev: Device) -> bytes:
        return mqtt_connect(f"{self.run_id}-{dev.index}")

    def handshake(self, dev: Device) -> bytes:
        buf = dev.buf
        if len(buf) < 4:
            return b""
        if buf[0] != 0x20 or buf[1] != 2 or buf[3] != 0:
            raise BenchError(f"device {dev.index}: CONNACK accepting the connection expected, "
                             f"got {bytes(buf[:8]).hex()}")
        del buf[:4]
        dev.ready = True
        return b""

    def message(self, dev: Device, seq: int, due: int, now: int) -> bytes:
        if not self.qos:
            return dev.head + LATENCY_HEAD.pack(seq, due, now) + self.pad
        dev.tag = dev.sent % 65535 + 1
        return dev.head + _U16.pack(dev.tag) + LATENCY_HEAD.pack(seq, due, now) + self.pad

    def feed(self, dev: Device) -> tuple[bool, bytes]:
        """Every answer is 4 bytes (type, 2, packet id)."""
        buf = dev.buf
        done, reply = False, b""
        while len(buf) >= 4:
            first, size, pid = buf[0], buf[1], _U16.unpack_from(buf, 2)[0]
            if size != 2 or pid != dev.tag:
                raise BenchError(f"device {dev.index}: an answer to packet {dev.tag} expected, "
                                 f"got {bytes(buf[:8]).hex()}")
            del buf[:4]
            if first == 0x40 and self.qos == 1 or first == 0x70 and self.qos == 2:  # PUBACK, PUBCOMP
                done = True
            elif first == 0x50 and self.qos == 2:  # PUBREC: PUBREL
                reply += b"\x62\x02" + _U16.pack(pid)
            else:
                raise BenchError(f"device {dev.index}: unexpected packet {first:#x} at QoS {self.qos}")
        return done, reply

    def closing(self, dev: Device) -> bytes:
        return b"\xe0\x00"  # DISCONNECT


# -- AMQP 0-9-1 --------------------------------------------------------------------

AMQP_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = b"\xce"
FRAME_HEAD = struct.Struct(">BHI")  # type, channel, payload size
METHOD = struct.Struct(">HH")  # class id, method id
ACK_FIELDS = struct.Struct(">QB")  # delivery tag, flags
BASIC, BASIC_DELIVER, BASIC_ACK, BASIC_NACK = 60, 60, 80, 120
CHANNEL = 1


def amqp_frames(buf: bytearray) -> list[Any]:
    """The whole frames at the start of ``buf``, decoded by pamqp, taken out of it."""
    from pamqp import frame

    out, pos = [], 0
    while len(buf) - pos >= 8:
        size = FRAME_HEAD.unpack_from(buf, pos)[2]
        if len(buf) - pos < size + 8:
            break
        out.append(frame.unmarshal(bytes(buf[pos:pos + size + 8]))[2])
        pos += size + 8
    del buf[:pos]
    return out


def amqp_credentials(spec: dict[str, Any]) -> tuple[str, str, str]:
    return spec.get("user", "guest"), spec.get("password", "guest"), spec.get("vhost", "/")


class AmqpCodec:
    """Persistent messages (delivery_mode 2) to a durable queue via the default exchange
    on a channel in confirm mode; done at the broker's basic.ack."""

    acks = True
    waits_for_eof = True  # after connection.close-ok the broker closes

    def __init__(self, spec: dict[str, Any]) -> None:
        from pamqp import commands, frame, header

        self.spec = spec
        size = spec["size"]
        self.pad = bytes(size - LATENCY_HEAD.size)
        self.publish = (frame.marshal(commands.Basic.Publish(exchange="", routing_key=spec["queue"]), CHANNEL)
                        + frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties(delivery_mode=2)),
                                        CHANNEL)
                        + FRAME_HEAD.pack(3, CHANNEL, size))
        self.close = frame.marshal(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0,
                                                             method_id=0), 0)

    def head(self, index: int) -> bytes:
        return self.publish

    def opening(self, dev: Device) -> bytes:
        return AMQP_HEADER

    def handshake(self, dev: Device) -> bytes:
        from pamqp import commands, frame

        user, password, vhost = amqp_credentials(self.spec)
        steps: list[tuple[type, Any]] = [
            (commands.Connection.Start, lambda _v: frame.marshal(commands.Connection.StartOk(
                client_properties={"product": "fanin_bench device"}, mechanism="PLAIN",
                response=f"\0{user}\0{password}"), 0)),
            (commands.Connection.Tune, lambda v: frame.marshal(commands.Connection.TuneOk(
                channel_max=1, frame_max=v.frame_max, heartbeat=0), 0)
                + frame.marshal(commands.Connection.Open(virtual_host=vhost), 0)),
            (commands.Connection.OpenOk, lambda _v: frame.marshal(commands.Channel.Open(), CHANNEL)),
            (commands.Channel.OpenOk, lambda _v: frame.marshal(commands.Confirm.Select(), CHANNEL)),
            (commands.Confirm.SelectOk, None),
        ]
        out = b""
        for value in amqp_frames(dev.buf):
            kind, answer = steps[dev.step]
            if not isinstance(value, kind):
                raise BenchError(f"device {dev.index}: {kind.__name__} expected, the broker sent {value!r}")
            dev.step += 1
            if answer is None:
                dev.ready = True
            else:
                out += answer(value)
        return out

    def message(self, dev: Device, seq: int, due: int, now: int) -> bytes:
        dev.tag += 1  # the delivery tag the broker will confirm
        return self.publish + LATENCY_HEAD.pack(seq, due, now) + self.pad + FRAME_END

    def feed(self, dev: Device) -> tuple[bool, bytes]:
        buf = dev.buf
        done = False
        while len(buf) >= 8:
            kind, _channel, size = FRAME_HEAD.unpack_from(buf)
            if len(buf) < size + 8:
                break
            if kind == 1 and size == 13 and METHOD.unpack_from(buf, 7) == (BASIC, BASIC_ACK):
                tag, flags = ACK_FIELDS.unpack_from(buf, 11)
                if tag == dev.tag or flags & 1 and tag >= dev.tag:
                    done = True
                elif tag > dev.tag:
                    raise BenchError(f"device {dev.index}: confirm of tag {tag}, only {dev.tag} sent")
                del buf[:size + 8]
                continue
            what = amqp_frames(buf)[0]
            raise BenchError(f"device {dev.index}: the broker sent {what!r} instead of a basic.ack")
        return done, b""

    def closing(self, dev: Device) -> bytes:
        return self.close


# -- Kafka -------------------------------------------------------------------------

PRODUCE_VERSION = 7
FETCH_VERSION = 11


class KafkaCodec:
    """An ApiVersions first, then one ProduceRequest (acks=-1, one record in a
    RecordBatch v2, partition 0) per message: encoded once with a placeholder value,
    then each message writes its LATENCY_HEAD into a copy, its correlation id, and the
    batch's CRC-32C again."""

    acks = True
    waits_for_eof = False  # Kafka has no goodbye: we close

    def __init__(self, spec: dict[str, Any]) -> None:
        from aiokafka.record.default_records import DefaultRecordBatchBuilder
        from kafka.protocol.producer import ProduceRequest

        self.pad = bytes(spec["size"] - LATENCY_HEAD.size)
        placeholder = os.urandom(spec["size"])
        b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
        b.append(0, int(time.time() * 1000), None, placeholder, [])
        batch = bytes(b.build())
        T = ProduceRequest.TopicProduceData
        req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
            T(name=spec["topic"], partition_data=[T.PartitionProduceData(index=0, records=batch)])])
        req.API_VERSION = PRODUCE_VERSION
        req.with_header(correlation_id=0, client_id="fanin")
        self.template = bytes(req.encode(header=True, framed=True))
        self.batch_at = self.template.index(batch)
        self.batch_end = self.batch_at + len(batch)
        self.value_at = self.template.index(placeholder)
        # the response (v7): correlation id, [topic: name, [partition: index, error...]]
        self.error_at = 4 + 4 + 2 + len(spec["topic"].encode()) + 4 + 4
        import crc32c
        from kafka.protocol.metadata import ApiVersionsRequest

        self.crc = crc32c.crc32c
        hello = ApiVersionsRequest()
        hello.API_VERSION = 0
        hello.with_header(correlation_id=0, client_id="fanin")
        self.api_versions = bytes(hello.encode(header=True, framed=True))

    def head(self, index: int) -> bytes:
        return b""

    def opening(self, dev: Device) -> bytes:
        # anonymous from loopback: nothing is needed first, but an ApiVersions answered
        # (as a real client sends) is a connection the broker has accepted, which keeps
        # --concurrency meaningful (a bare TCP connect ends in the kernel's backlog)
        return self.api_versions

    def handshake(self, dev: Device) -> bytes:
        buf = dev.buf
        if len(buf) < 4 or len(buf) < 4 + _I32.unpack_from(buf)[0]:
            return b""
        size = _I32.unpack_from(buf)[0]
        corr, error = struct.unpack_from(">ih", buf, 4)
        del buf[:4 + size]
        if corr != 0 or error:
            raise BenchError(f"device {dev.index}: ApiVersions answered with correlation id {corr}, error {error}")
        dev.ready = True
        return b""

    def message(self, dev: Device, seq: int, due: int, now: int) -> bytes:
        dev.tag += 1
        frame = bytearray(self.template)
        _I32.pack_into(frame, 8, dev.tag)  # size, api key, version, correlation id
        LATENCY_HEAD.pack_into(frame, self.value_at, seq, due, now)
        at = self.batch_at
        _U32.pack_into(frame, at + 17, self.crc(memoryview(frame)[at + 21:self.batch_end]))
        return bytes(frame)

    def feed(self, dev: Device) -> tuple[bool, bytes]:
        buf = dev.buf
        done = False
        while len(buf) >= 4:
            size = _I32.unpack_from(buf)[0]
            if len(buf) < size + 4:
                break
            corr = _I32.unpack_from(buf, 4)[0]
            error = struct.unpack_from(">h", buf, 4 + self.error_at)[0]
            del buf[:size + 4]
            if corr != dev.tag:
                raise BenchError(f"device {dev.index}: response {corr}, request {dev.tag} in flight")
            if error:
                raise BenchError(f"device {dev.index}: produce failed with Kafka error {error}")
            done = True
        return done, b""

    def closing(self, dev: Device) -> bytes:
        return b""


CODECS: dict[str, Any] = {"mqtt": MqttCodec, "amqp": AmqpCodec, "kafka": KafkaCodec}

class Device:
    __slots__ = ("index", "sock", "fd", "buf", "out", "connected", "ready", "step", "head", "busy", "seq",
                 "sent_ns", "owed", "sent", "tag", "deadline")

    def __init__(self, index: int, head: bytes) -> None:
        self.index = index
        self.sock: socket.socket | None = None
        self.fd = -1
        self.buf = bytearray()
        self.out = b""  # what a full socket buffer did not take
        self.connected = False  # TCP
        self.ready = False  # through the protocol's handshake
        self.step = 0  # of the handshake
        self.head = head
        self.busy = False  # a message in flight
        self.seq = -1
        self.sent_ns = 0
        self.owed: deque[int] = deque()  # seqs due while busy
        self.sent = 0
        self.tag = 0  # packet id / delivery tag / correlation id of the message in flight
        self.deadline = 0.0
