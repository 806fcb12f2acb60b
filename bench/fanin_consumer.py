"""The consumer of bench/fanin_bench.py: one connection receiving the whole fleet's messages.
MQTT SUBSCRIBE to the fleet's wildcard at the fleet's QoS (PUBACK, or PUBREC and PUBCOMP),
AMQP basic.consume with manual acks, or a Kafka Fetch loop; each message recorded
(common.LatencyRecorder) until it is told how many to expect.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from typing import Any

from common import BenchError, LatencyRecorder, self_cpu
from fanin_codecs import ACK_FIELDS, AMQP_HEADER, BASIC, BASIC_ACK, BASIC_DELIVER, CHANNEL, FETCH_VERSION, FRAME_END, FRAME_HEAD, HOST, METHOD, amqp_credentials, amqp_frames, mqtt_connect, mqtt_packet, mqtt_packets, mqtt_str

_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")



# -- the consumer ------------------------------------------------------------------


def recv_some(sock: socket.socket, timeout: float, who: str) -> bytes:
    """What the broker sent next (setup steps, blocking with a deadline)."""
    ready, _, _ = select.select([sock], [], [], timeout)
    if not ready:
        raise BenchError(f"{who}: the broker sent nothing for {timeout:g} s")
    data = sock.recv(65536)
    if not data:
        raise BenchError(f"{who}: the broker closed the connection")
    return data


class MqttConsumer:
    """One subscriber on ``<prefix>/#`` at the fleet's QoS: PUBACK (QoS 1), or PUBREC and
    then PUBCOMP for the broker's PUBREL (QoS 2)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.timeout = spec["timeout"]
        self.qos = spec["qos"]
        self.sock = socket.create_connection((HOST, spec["port"]), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.sock.sendall(mqtt_connect(f"{spec['run_id']}-consumer"))
        first, body = self._next()
        if first != 0x20 or body[1:] != b"\x00":
            raise BenchError(f"consumer: CONNACK accepting the connection expected, got {first:#x} {body!r}")
        self.sock.sendall(mqtt_packet(0x82, _U16.pack(1) + mqtt_str(spec["topic"] + "/#") + bytes([self.qos])))
        first, body = self._next()
        if first >> 4 != 9 or body[2:] != bytes([self.qos]):
            raise BenchError(f"consumer: SUBACK granting QoS {self.qos} expected, got {first:#x} {body!r}")

    def _next(self) -> tuple[int, bytes]:
        while True:
            got = mqtt_packets(self.buf)
            if got:
                return got[0]
            self.buf += recv_some(self.sock, self.timeout, "consumer")

    def start(self) -> None:
        pass

    def feed(self, data: bytes, record: Any, now: int) -> int:
        self.buf += data
        replies = bytearray()
        count = 0
        for first, body in mqtt_packets(self.buf):
            kind = first >> 4
            if kind == 3:
                qos = first >> 1 & 3
                at = 2 + _U16.unpack_from(body)[0]
                if qos == 1:
                    replies += b"\x40\x02" + body[at:at + 2]
                    at += 2
                elif qos == 2:
                    replies += b"\x50\x02" + body[at:at + 2]
                    at += 2
                record(memoryview(body)[at:], now)
                count += 1
            elif first == 0x62:  # PUBREL
                replies += b"\x70\x02" + body[:2]
            else:
                raise BenchError(f"consumer: unexpected packet {first:#x}")
        if replies:
            self.sock.sendall(replies)
        return count

    def close(self) -> None:
        try:
            self.sock.sendall(b"\xe0\x00")
        except OSError:
            pass
        self.sock.close()


class AmqpConsumer:
    """Declares the durable queue, then basic.consume with manual acks (one basic.ack per
    delivery, those of one read written together) and prefetch ``prefetch``; at the end
    cancels and deletes the queue."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from pamqp import commands, frame

        self.timeout = spec["timeout"]
        self.queue = spec["queue"]
        self.sock = socket.create_connection((HOST, spec["port"]), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        user, password, vhost = amqp_credentials(spec)
        send = self.sock.sendall
        send(AMQP_HEADER)
        self._expect(commands.Connection.Start)
        send(frame.marshal(commands.Connection.StartOk(client_properties={"product": "fanin_bench consumer"},
                                                       mechanism="PLAIN", response=f"\0{user}\0{password}"), 0))
        tune = self._expect(commands.Connection.Tune)
        send(frame.marshal(commands.Connection.TuneOk(channel_max=1, frame_max=tune.frame_max, heartbeat=0), 0)
             + frame.marshal(commands.Connection.Open(virtual_host=vhost), 0))
        self._expect(commands.Connection.OpenOk)
        send(frame.marshal(commands.Channel.Open(), CHANNEL))
        self._expect(commands.Channel.OpenOk)
        send(frame.marshal(commands.Queue.Declare(queue=self.queue, durable=True), CHANNEL))
        self._expect(commands.Queue.DeclareOk)
        send(frame.marshal(commands.Basic.Qos(prefetch_count=spec["prefetch"]), CHANNEL))
        self._expect(commands.Basic.QosOk)
        self.ack = FRAME_HEAD.pack(1, CHANNEL, 13) + METHOD.pack(BASIC, BASIC_ACK)
        self.tag = 0
        self.body_left = 0
        self.body = bytearray()
        self.redelivered = 0

    def _expect(self, kind: type, skip: tuple[type, ...] = ()) -> Any:
        """The next frame but those of a ``skip`` kind, decoded; the rest stays in buf."""
        from pamqp import frame

        buf = self.buf
        while True:
            if len(buf) >= 8 and len(buf) >= 8 + FRAME_HEAD.unpack_from(buf)[2]:
                end = 8 + FRAME_HEAD.unpack_from(buf)[2]
                value = frame.unmarshal(bytes(buf[:end]))[2]
                del buf[:end]
                if isinstance(value, skip):
                    continue
                if not isinstance(value, kind):
                    raise BenchError(f"consumer: {kind.__name__} expected, the broker sent {value!r}")
                return value
            buf += recv_some(self.sock, self.timeout, "consumer")

    def start(self) -> None:
        from pamqp import commands, frame

        self.sock.sendall(frame.marshal(commands.Basic.Consume(queue=self.queue, consumer_tag="fanin"), CHANNEL))
        self._expect(commands.Basic.ConsumeOk)

    def feed(self, data: bytes, record: Any, now: int) -> int:
        buf = self.buf
        buf += data
        acks = bytearray()
        pos, end, count = 0, len(buf), 0
        while end - pos >= 8:
            kind, _channel, size = FRAME_HEAD.unpack_from(buf, pos)
            if end - pos < size + 8:
                break
            start = pos + 7
            if kind == 1:
                if METHOD.unpack_from(buf, start) != (BASIC, BASIC_DELIVER):
                    what = amqp_frames(bytearray(buf[pos:pos + size + 8]))[0]
                    raise BenchError(f"consumer: the broker sent {what!r}")
                at = start + 4
                at += 1 + buf[at]  # consumer tag
                self.tag, redelivered = ACK_FIELDS.unpack_from(buf, at)
                self.redelivered += redelivered & 1
            elif kind == 2:  # content header: class, weight, body size, ...
                self.body_left = struct.unpack_from(">Q", buf, start + 4)[0]
                self.body = bytearray()
            elif kind == 3:
                self.body += buf[start:start + size]
                self.body_left -= size
                if self.body_left <= 0:
                    record(self.body, now)
                    count += 1
                    acks += self.ack + ACK_FIELDS.pack(self.tag, 0) + FRAME_END
            elif kind != 8:
                raise BenchError(f"consumer: unexpected frame type {kind}")
            pos = start + size + 1
        del buf[:pos]
        if acks:
            self.sock.sendall(acks)
        return count

    def close(self) -> None:
        """Cancel, delete the queue (deliveries still coming are skipped), close."""
        from pamqp import body, commands, frame, header

        try:
            skip = (commands.Basic.Deliver, header.ContentHeader, body.ContentBody)
            self.sock.sendall(frame.marshal(commands.Basic.Cancel(consumer_tag="fanin"), CHANNEL))
            self._expect(commands.Basic.CancelOk, skip)
            self.sock.sendall(frame.marshal(commands.Queue.Delete(queue=self.queue), CHANNEL))
            self._expect(commands.Queue.DeleteOk, skip)
            self.sock.sendall(frame.marshal(commands.Connection.Close(
                reply_code=200, reply_text="bye", class_id=0, method_id=0), 0))
            self._expect(commands.Connection.CloseOk, skip)
        finally:
            self.sock.close()


class KafkaConsumer:
    """Creates the topic (a Metadata request that may create it), then Fetch from offset
    0 of partition 0 again and again (min_bytes 1: answered as soon as there is a
    record), one request in flight."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from kafka.protocol.consumer import FetchRequest
        from kafka.protocol.metadata import MetadataRequest, MetadataResponse

        self.timeout = spec["timeout"]
        self.topic = spec["topic"]
        self.sock = socket.create_connection((HOST, spec["port"]), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        deadline = time.monotonic() + self.timeout
        while True:
            req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=self.topic)],
                                  allow_auto_topic_creation=True)
            topic = self._call(req, MetadataResponse, 4).topics[0]
            if topic.error_code == 0 and topic.partitions:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"consumer: topic {self.topic} not created (Kafka error {topic.error_code})")
            time.sleep(0.1)
        sentinel = 0x0123456789ABCDEF
        T = FetchRequest.FetchTopic
        req = FetchRequest(
            replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=8 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[T(topic=self.topic, partitions=[
                T.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=sentinel,
                                 last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=8 << 20)])])
        req.API_VERSION = FETCH_VERSION
        req.with_header(correlation_id=0, client_id="fanin-consumer")
        self.fetch = bytearray(req.encode(header=True, framed=True))
        self.offset_at = self.fetch.index(sentinel.to_bytes(8, "big"))
        self.offset = 0

    def _call(self, req: Any, response: Any, version: int) -> Any:
        req.API_VERSION = version
        req.with_header(correlation_id=1, client_id="fanin-consumer")
        self.sock.sendall(bytes(req.encode(header=True, framed=True)))
        while len(self.buf) < 4 or len(self.buf) < 4 + _I32.unpack_from(self.buf)[0]:
            self.buf += recv_some(self.sock, self.timeout, "consumer")
        size = _I32.unpack_from(self.buf)[0]
        body, self.buf = bytes(self.buf[4:4 + size]), self.buf[4 + size:]
        return response.decode(body, version=version, header=True)

    def _send_fetch(self) -> None:
        struct.pack_into(">q", self.fetch, self.offset_at, self.offset)
        self.sock.sendall(self.fetch)

    def start(self) -> None:
        self._send_fetch()

    def feed(self, data: bytes, record: Any, now: int) -> int:
        from aiokafka.record.memory_records import MemoryRecords

        buf = self.buf
        buf += data
        count = 0
        while len(buf) >= 4 and len(buf) >= 4 + _I32.unpack_from(buf)[0]:
            size = _I32.unpack_from(buf)[0]
            # Fetch v11, one topic, one partition: size, correlation id, throttle, error,
            # session, [topic name, [partition, error, hw, lso, log start, aborted,
            # preferred replica, records]]
            name_len = struct.unpack_from(">h", buf, 4 + 18)[0]
            p = 4 + 18 + 2 + name_len + 4
            error = struct.unpack_from(">h", buf, p + 4)[0]
            if error:
                raise BenchError(f"consumer: fetch failed with Kafka error {error}")
            p += 4 + 2 + 8 + 8 + 8 + 4 + 4
            rlen = _I32.unpack_from(buf, p)[0]
            records = MemoryRecords(bytes(buf[p + 4:p + 4 + max(rlen, 0)]))
            del buf[:4 + size]
            while records.has_next():
                batch = records.next_batch()
                if batch is None:
                    break
                for rec in batch:
                    record(rec.value, now)
                    count += 1
                    self.offset = rec.offset + 1
            self._send_fetch()
        return count

    def close(self) -> None:
        self.sock.close()


CONSUMERS: dict[str, Any] = {"mqtt": MqttConsumer, "amqp": AmqpConsumer, "kafka": KafkaConsumer}


def consumer_main(spec: dict[str, Any], pipe: Any) -> None:
    """A spawned process: the one consumer. Says "ready" once subscribed; after
    ("expect", {count, quiet, settle}) it ends once it has ``count`` distinct messages
    (then ``settle`` s more, for duplicates) or nothing came for ``quiet`` s; says "done"
    with the seqs seen (a map), the duplicates and the delivery latencies (ns)."""
    consumer = None
    try:
        consumer = CONSUMERS[spec["protocol"]](spec)
        pipe.send(("ready", None))
        recorder = LatencyRecorder(spec["total"], spec["warmup_msgs"])
        consumer.start()
        sock = consumer.sock
        received = consumer.feed(b"", recorder, time.monotonic_ns())  # what came with the last answer
        expected: dict[str, Any] | None = None
        last = time.monotonic()
        complete_at = None
        while True:
            ready, _, _ = select.select([sock, pipe], [], [], 0.1)
            if pipe in ready:
                what, value = pipe.recv()
                if what != "expect":
                    raise BenchError(f"expect expected, the parent said {what!r}")
                expected = value
                last = time.monotonic()
            if sock in ready:
                data = sock.recv(1 << 20)
                if not data:
                    raise BenchError("consumer: the broker closed the connection")
                try:
                    received += consumer.feed(data, recorder, time.monotonic_ns())
                except IndexError:
                    raise BenchError("consumer: a message with a seq this run never sent") from None
                last = time.monotonic()
            if expected is not None:
                now = time.monotonic()
                if complete_at is None and received - recorder.duplicates >= expected["count"]:
                    complete_at = now
                if complete_at is not None and now - complete_at >= expected["settle"]:
                    break
                if complete_at is None and now - last >= expected["quiet"]:
                    break
        result = recorder.result()
        del result["received"]
        result.update(seen=bytes(recorder.seen), received=received, cpu=self_cpu(),
                      redelivered=getattr(consumer, "redelivered", 0))
        consumer.close()
        consumer = None
        pipe.send(("done", result))
    except BaseException as exc:  # noqa: BLE001 -- whatever it is, the parent reports it
        pipe.send(("error", str(exc) if isinstance(exc, BenchError) else repr(exc)))
    finally:
        if consumer is not None:
            try:
                consumer.sock.close()
            except OSError:
                pass
        pipe.close()


