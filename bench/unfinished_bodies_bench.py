#!/usr/bin/env python3
"""Unfinished AMQP bodies abandoned (issue 30, item 6): is the memory given back?

Against a `logbus serve` of its own (AMQP and HTTP on loopback), --connections raw AMQP
connections (pamqp frames, no client library) each start a publish of a --body-mib MiB
message and send its body frames until all but the last frame are sent or the broker
stops reading (the socket unwritable for --stall s: the memory alarm blocks them), within
--send-seconds. The memory high watermark is set over PUT /api/limits to the idle broker's
RSS plus --alarm-above-mb, so the memory alarm is set on the way. Then every connection
is closed, the bodies abandoned, and the broker's RSS and alarms are sampled every
--sample-ms for --settle-timeout s. Like a real client, each connection reads (and drops)
what the broker sends it: heartbeats (--heartbeat: the interval it negotiates; it sends
none itself) and connection.blocked (--blocked-notify: it lists that capability).

Measured: RSS (VmRSS) idle, at the peak, and after; seconds from the close until the
memory alarm cleared and until RSS came back within 25% of idle. Targets (issue 30): both
within 30 s. JSON on stdout, progress on stderr.

    python bench/unfinished_bodies_bench.py
    python bench/unfinished_bodies_bench.py --connections 2 --body-mib 8 --alarm-above-mb 4
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import select
import shutil
import socket
import struct
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import BenchError, LOOPBACK, basic_auth, log_problems, memory, start_logbus, stop_logbus

from pamqp import commands, frame, header

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_MAX = 131072


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def host_port(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def api(address: str, method: str, path: str, body: Any = None) -> Any:
    conn = http.client.HTTPConnection(*host_port(address), timeout=30)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body).encode(), headers=basic_auth())
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise BenchError(f"{method} {path}: {r.status} {data[:200]!r}")
        return json.loads(data)
    finally:
        conn.close()


class Raw:
    """One AMQP connection on a socket, opened with a channel, every read with a deadline."""

    def __init__(self, address: str, timeout: float, heartbeat: int, blocked_notify: bool) -> None:
        self.sock = socket.create_connection(host_port(address), timeout=timeout)
        self.buf = b""
        self.send(PROTOCOL_HEADER)
        self.expect(commands.Connection.Start)
        self.send(frame.marshal(commands.Connection.StartOk(
            client_properties={"product": "unfinished_bodies_bench",
                               "capabilities": {"connection.blocked": blocked_notify}}, mechanism="PLAIN",
            response="\0guest\0guest", locale="en_US"), 0))
        tune = self.expect(commands.Connection.Tune)
        self.send(frame.marshal(commands.Connection.TuneOk(tune.channel_max, FRAME_MAX, heartbeat), 0))
        self.send(frame.marshal(commands.Connection.Open("/"), 0))
        self.expect(commands.Connection.OpenOk)
        self.send(frame.marshal(commands.Channel.Open(), 1))
        self.expect(commands.Channel.OpenOk)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def expect(self, kind: type) -> Any:
        while True:
            if len(self.buf) >= 7:
                size = struct.unpack(">I", self.buf[3:7])[0]
                if len(self.buf) >= 8 + size:
                    used, _, value = frame.unmarshal(self.buf[:8 + size])
                    self.buf = self.buf[used:]
                    if not isinstance(value, kind):
                        raise BenchError(f"expected {kind.__name__}, got {value!r}")
                    return value
            chunk = self.sock.recv(65536)
            if not chunk:
                raise BenchError("the broker closed the connection")
            self.buf += chunk

    def discard_input(self) -> None:
        """Read and drop what the broker sent (heartbeats, connection.blocked), as a
        client does: unread bytes would make our close a reset."""
        try:
            while self.sock.recv(65536, socket.MSG_DONTWAIT):
                pass
        except BlockingIOError:
            pass


def send_bodies(raws: list[Raw], body: int, seconds: float, stall: float) -> list[int]:
    """Start a publish of ``body`` bytes on each connection and send all its body frames
    but the last, until done, stalled (unwritable for ``stall`` s) or ``seconds`` are up;
    what the broker sends meanwhile is read and dropped."""
    payload = FRAME_MAX - 8
    piece = struct.pack(">BHI", 3, 1, payload) + b"\0" * payload + b"\xce"
    frames = body // payload - 1  # the body never completes
    start = frame.marshal(commands.Basic.Publish(exchange="", routing_key="bench.unfinished"), 1)
    start += frame.marshal(header.ContentHeader(0, body, commands.Basic.Properties()), 1)
    stream = piece * 64  # 8 MiB per send call at most
    left = {}
    for r in raws:
        r.send(start)
        r.sock.setblocking(False)
        left[r.sock] = frames * len(piece)
    sent = {s: 0 for s in left}
    by_sock = {r.sock: r for r in raws}
    deadline = time.monotonic() + seconds
    stalled_since = time.monotonic()
    while left and time.monotonic() < deadline:
        readable, writable, _ = select.select(list(by_sock), list(left), [], stall)
        for s in readable:
            by_sock[s].discard_input()
        if writable:
            stalled_since = time.monotonic()
        elif time.monotonic() - stalled_since >= stall:
            break  # the broker reads none of them
        for s in writable:
            offset = sent[s] % len(piece)
            try:
                n = s.send(stream[offset:offset + min(left[s], len(stream) - len(piece))])
            except BlockingIOError:
                continue
            sent[s] += n
            left[s] -= n
            if not left[s]:
                del left[s]
    return [sent[r.sock] for r in raws]


def run(a: argparse.Namespace) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="unfinished-bodies-")
    proc = None
    try:
        proc, addresses = start_logbus(workdir, {"amqp": LOOPBACK, "http": LOOPBACK}, timeout=60)
        pid, http_address = proc.pid, addresses["http"]
        time.sleep(a.idle_wait)  # the broker's start-up garbage settles (not a synchronisation)
        idle = memory(pid)
        watermark = int(idle["vmrss_mb"] * 1e6 + a.alarm_above_mb * 1e6)
        api(http_address, "PUT", "/api/limits", {"memory_high_watermark": watermark})
        log(f"logbus pid {pid}: idle RSS {idle['vmrss_mb']:.0f} MB, memory watermark {watermark / 1e6:.0f} MB")
        raws = [Raw(addresses["amqp"], a.timeout, a.heartbeat, a.blocked_notify) for _ in range(a.connections)]
        t0 = time.perf_counter()
        sent = send_bodies(raws, a.body_mib << 20, a.send_seconds, a.stall)
        send_s = time.perf_counter() - t0
        limits = api(http_address, "GET", "/api/limits")
        wait_end = time.monotonic() + a.alarm_wait  # the alarms are checked once a second
        while "memory" not in limits["alarms"] and time.monotonic() < wait_end:
            time.sleep(0.1)
            limits = api(http_address, "GET", "/api/limits")
        peak = memory(pid)
        log(f"sent {sum(sent) / 1e6:.0f} MB in {send_s:.1f} s; RSS {peak['vmrss_mb']:.0f} MB, alarms {limits['alarms']}")
        for r in raws:
            r.discard_input()
            r.sock.close()
        closed = time.monotonic()
        samples = []
        alarm_cleared = rss_back = None
        while time.monotonic() - closed < a.settle_timeout:
            now = time.monotonic() - closed
            rss = memory(pid)["vmrss_mb"]
            alarms = api(http_address, "GET", "/api/limits")["alarms"]
            samples.append({"t": round(now, 2), "vmrss_mb": round(rss, 1), "alarms": alarms})
            if alarm_cleared is None and "memory" not in alarms:
                alarm_cleared = now
            if rss_back is None and rss <= idle["vmrss_mb"] * 1.25:
                rss_back = now
            if alarm_cleared is not None and rss_back is not None:
                break
            time.sleep(a.sample_ms / 1000)
        after = memory(pid)
        log(f"after close: alarm cleared at {alarm_cleared} s, RSS within 25% of idle at {rss_back} s;"
            f" RSS now {after['vmrss_mb']:.0f} MB")
        return {
            "connections": a.connections, "body_mib": a.body_mib, "sent_mb": [round(s / 1e6, 1) for s in sent],
            "send_seconds": send_s, "memory_watermark_bytes": watermark,
            "alarm_set_at_peak": "memory" in limits["alarms"],
            "idle": idle, "peak": peak, "after": after,
            "seconds_to_alarm_cleared": alarm_cleared, "seconds_to_rss_within_25pct": rss_back,
            "samples": samples[:: max(1, len(samples) // 40)],
            "targets": {
                "alarm_cleared_within_30s": alarm_cleared is not None and alarm_cleared <= 30,
                "rss_within_25pct_of_idle_within_30s": rss_back is not None and rss_back <= 30,
            },
        }
    finally:
        if proc is not None:
            stop_logbus(proc)
        problems = log_problems(os.path.join(workdir, "broker.log"))
        shutil.rmtree(workdir, ignore_errors=True)
        run.problems = problems  # type: ignore[attr-defined]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=8, help="AMQP connections, one unfinished body each")
    ap.add_argument("--body-mib", type=int, default=90, help="declared body size, MiB")
    ap.add_argument("--alarm-above-mb", type=float, default=300.0,
                    help="memory high watermark: the idle broker's RSS plus this many MB")
    ap.add_argument("--send-seconds", type=float, default=60.0, help="longest time spent sending the bodies")
    ap.add_argument("--stall", type=float, default=2.0, help="seconds unwritable: the broker reads no more")
    ap.add_argument("--alarm-wait", type=float, default=5.0, help="longest wait for the memory alarm before the close")
    ap.add_argument("--idle-wait", type=float, default=2.0, help="seconds after start before the idle RSS")
    ap.add_argument("--settle-timeout", type=float, default=60.0, help="longest wait after the close, seconds")
    ap.add_argument("--sample-ms", type=float, default=250.0, help="between RSS and alarm samples")
    ap.add_argument("--heartbeat", type=int, default=0,
                    help="heartbeat interval the connections negotiate, seconds (they send none themselves)")
    ap.add_argument("--blocked-notify", action="store_true",
                    help="the connections list the connection.blocked capability (pika's and most clients' default)")
    ap.add_argument("--timeout", type=float, default=60.0, help="deadline of every socket read, seconds")
    a = ap.parse_args()
    out: dict[str, Any] = {"bench": "unfinished_bodies_bench", "args": vars(a),
                           "broker": {"started_here": True, "listeners": ["amqp", "http"]}}
    try:
        out["unfinished"] = run(a)
    except (BenchError, OSError) as e:
        out["unfinished"] = {"error": str(e)}
        log(str(e))
    out["broker_log_problems"] = getattr(run, "problems", {"count": 0, "first": []})
    print(json.dumps(out, indent=2))
    return 1 if "error" in out["unfinished"] else 0


if __name__ == "__main__":
    sys.exit(main())
