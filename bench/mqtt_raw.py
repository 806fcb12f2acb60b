"""A cheap MQTT 3.1.1 client for bench/mqtt_bench.py's latency workload (``--latency-client raw``).

paho-mqtt costs the latency workload about 360 µs of client CPU per message (a network
thread per client, the GIL between it and the pacing thread, a callback per packet).
This client is a blocking socket and a few struct calls: the publisher writes a QoS 1
PUBLISH whose fixed part is encoded once and reads PUBACKs without blocking between
sends; the subscriber, in a process of its own as paho's is, reads PUBLISH packets by
hand and answers each with a PUBACK. CONNECT, CONNACK, SUBSCRIBE and SUBACK are checked
in full; any other packet on the hot path fails the run.

The subscriber speaks the same pipe protocol as ``mqtt_client.subscriber_main`` (ready,
then done with counts, CPU, duplicates and latencies), so the workload runs either.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from typing import Any

from common import BenchError, LatencyRecorder, self_cpu

KEEPALIVE_S = 60  # longer than any run here: no PINGREQ needed
_U16 = struct.Struct(">H")


def remaining_length(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def utf8(s: str) -> bytes:
    b = s.encode()
    return _U16.pack(len(b)) + b


def packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + remaining_length(len(body)) + body


class RawMqtt:
    """One blocking connection: ``connect`` (clean session), then ``packets``."""

    def __init__(self, port: int, client_id: str, timeout: float) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(None)  # blocking; waits are bounded by ``read``'s select
        self.timeout = timeout
        self.buf = bytearray()
        self.sock.sendall(packet(0x10, utf8("MQTT") + bytes([4, 0x02]) + _U16.pack(KEEPALIVE_S)
                                 + utf8(client_id)))
        kind, body = self.next_packet()
        if kind != 0x20 or len(body) != 2 or body[1] != 0:
            raise BenchError(f"CONNACK expected, the broker sent type {kind >> 4}: {bytes(body)!r}")

    def packets(self) -> list[tuple[int, bytes]]:
        """Whole packets in what was read (type and flags, body); the rest stays."""
        buf, out, pos = self.buf, [], 0
        while len(buf) - pos >= 2:
            n, mult, i, complete = 0, 1, pos + 1, False
            while i < len(buf) and i - pos <= 4:
                digit = buf[i]
                n += (digit & 0x7F) * mult
                mult *= 128
                i += 1
                if not digit & 0x80:
                    complete = True
                    break
            if not complete or len(buf) - i < n:
                break
            out.append((buf[pos], bytes(buf[i:i + n])))
            pos = i + n
        del buf[:pos]
        return out

    def read(self, block: bool) -> bool:
        """Read what is there (waiting for it, at most the timeout, if ``block``); False at EOF."""
        readable, _, _ = select.select([self.sock], [], [], self.timeout if block else 0)
        if not readable:
            if block:
                raise BenchError(f"the broker sent nothing for {self.timeout:g} s")
            return True
        data = self.sock.recv(65536)
        if not data:
            return False
        self.buf += data
        return True

    def next_packet(self) -> tuple[int, bytes]:
        while True:
            got = self.packets()
            if got:
                assert len(got) == 1, "one packet at a time in the handshake"
                return got[0]
            if not self.read(True):
                raise BenchError("the broker closed the connection")

    def close(self) -> None:
        try:
            self.sock.sendall(b"\xe0\x00")  # DISCONNECT
        except OSError:
            pass
        self.sock.close()


class RawPublisher:
    """QoS 1 PUBLISHes, at most ``window`` not yet acknowledged (``mqtt_client.Publisher``'s
    interface)."""

    def __init__(self, port: int, window: int, timeout: float) -> None:
        self.conn = RawMqtt(port, f"raw-pub-{os.getpid()}", timeout)
        self.window, self.timeout = window, timeout
        self.sent = 0
        self.acked = 0

    def _take_acks(self) -> None:
        for kind, body in self.conn.packets():
            if kind >> 4 != 4:
                raise BenchError(f"PUBACK expected, the broker sent type {kind >> 4}")
            self.acked += 1

    def _read(self, block: bool) -> None:
        if not self.conn.read(block):
            raise BenchError("the broker closed the publisher's connection")
        self._take_acks()

    def publish(self, topic: str, payload: bytes) -> None:
        self._read(False)
        deadline = time.monotonic() + self.timeout
        while self.sent - self.acked >= self.window:
            if time.monotonic() > deadline:
                raise BenchError(f"{self.sent - self.acked} publishes not acknowledged within {self.timeout:g} s")
            self._read(True)
        pid = self.sent % 65535 + 1
        self.conn.sock.sendall(packet(0x32, utf8(topic) + _U16.pack(pid) + payload))
        self.sent += 1

    def drain(self) -> None:
        deadline = time.monotonic() + self.timeout
        while self.acked < self.sent:
            if time.monotonic() > deadline:
                raise BenchError(f"{self.sent - self.acked} publishes not acknowledged within {self.timeout:g} s")
            self._read(True)

    def close(self) -> None:
        self.conn.close()


def subscriber_main(spec: dict[str, Any], pipe: Any) -> None:
    """One raw QoS 1 subscriber on ``spec["filter"]``: a PUBACK per PUBLISH, the latency
    of each LATENCY_HEAD payload after the warm-up; as ``mqtt_client.subscriber_main``."""
    conn = None
    try:
        if spec["clients"] != 1:
            raise BenchError("the raw subscriber is one client per process")
        expected, warmup = spec["expected"], spec.get("latency_warmup") or 0
        conn = RawMqtt(spec["port"], f"raw-sub-{os.getpid()}", spec["timeout"])
        conn.sock.sendall(packet(0x82, _U16.pack(1) + utf8(spec["filter"]) + bytes([spec["qos"]])))
        kind, body = conn.next_packet()
        if kind >> 4 != 9 or body[2:] != bytes([spec["qos"]]):
            raise BenchError(f"SUBACK granting QoS {spec['qos']} expected: type {kind >> 4}, {bytes(body)!r}")
        pipe.send(("ready", None))
        cpu0 = self_cpu()
        recorder = LatencyRecorder(expected, warmup)
        count = 0
        last_ns = 0
        deadline = time.monotonic() + spec["timeout"]
        sock = conn.sock
        while count < expected:
            ready, _, _ = select.select([sock, pipe], [], [], 1.0)
            if time.monotonic() > deadline:
                raise BenchError(f"subscriber: {count} of {expected} within {spec['timeout']:g} s")
            if pipe in ready:
                pipe.recv()  # "published": we stop at ``expected`` (a loss shows as the timeout)
            if sock not in ready:
                continue
            if not conn.read(True):
                raise BenchError("the broker closed the subscriber's connection")
            now = time.monotonic_ns()
            acks = bytearray()
            for first, body in conn.packets():
                if first >> 4 != 3 or (first >> 1) & 3 != 1:
                    raise BenchError(f"a QoS 1 PUBLISH expected, the broker sent {first:#x}")
                tlen = _U16.unpack_from(body)[0]
                acks += b"\x40\x02" + body[2 + tlen:4 + tlen]
                payload = memoryview(body)[4 + tlen:]
                count += 1
                last_ns = now
                recorder(payload, now)
            if acks:
                sock.sendall(acks)
        pipe.send(("done", {"counts": [count], "last_ns": last_ns, "cpu": self_cpu() - cpu0,
                            **recorder.result()}))
    except BaseException as exc:  # noqa: BLE001 -- whatever it is, the parent reports it
        pipe.send(("error", str(exc) if isinstance(exc, BenchError) else repr(exc)))
    finally:
        if conn is not None:
            conn.close()
        pipe.close()
