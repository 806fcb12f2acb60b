"""What latency a Python relay gets from this machine: the floor under the brokers'
latency workloads.

A paced sender, a relay and a receiver, three processes on loopback TCP, as in
``bench/mqtt_bench.py --workloads latency --latency-client raw``: the sender writes
fixed 256-byte frames stamped with CLOCK_MONOTONIC at --rate per second (paced without
drift), the relay (Twisted's epoll reactor, as logbus runs) spends --work-us of CPU
per frame and forwards it, the receiver records each frame's latency. The relay does
nothing a broker must (no disk, no state): what its tail shows is the machine's
scheduling, and how a given CPU cost per message stretches it.

    python bench/relay_jitter.py --rate 2000 --seconds 10 --work-us 0,150,300 --rounds 4

Prints JSON: per --work-us, per round, the latency quantiles in ms and the relay's CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import subprocess
import sys
import time
from typing import Any

from common import BenchError, distribution_ms, free_ports, self_cpu

FRAME = 256
HEAD = struct.Struct(">QQ")  # sequence number, monotonic ns when sent


def relay_main(port: int, target: int, work_us: float) -> None:
    from twisted.internet import epollreactor

    epollreactor.install()
    from twisted.internet import protocol
    from twisted.internet import reactor as installed

    reactor: Any = installed

    work_ns = int(work_us * 1000)
    out: list[Any] = []

    def spend() -> None:
        end = time.thread_time_ns() + work_ns
        while time.thread_time_ns() < end:
            pass

    class Downstream(protocol.Protocol):
        def connectionMade(self) -> None:
            out.append(self.transport)
            print("ready", flush=True)

    class Upstream(protocol.Protocol):
        pending = b""

        def dataReceived(self, data: bytes) -> None:
            data = self.pending + data
            whole = len(data) - len(data) % FRAME
            self.pending = data[whole:]
            for _ in range(whole // FRAME):
                spend()
            if whole:
                out[0].write(data[:whole])

    protocol.ClientCreator(reactor, Downstream).connectTCP("127.0.0.1", target)
    reactor.listenTCP(port, protocol.Factory.forProtocol(Upstream), interface="127.0.0.1")
    reactor.run()


def receiver(listener: socket.socket, total: int, warmup: int, timeout: float) -> list[int]:
    conn, _ = listener.accept()
    latencies: list[int] = []
    buf = b""
    got = 0
    deadline = time.monotonic() + timeout
    while got < total:
        ready, _, _ = select.select([conn], [], [], 1.0)
        if time.monotonic() > deadline:
            raise BenchError(f"receiver: {got} of {total} frames within {timeout:g} s")
        if not ready:
            continue
        chunk = conn.recv(1 << 16)
        if not chunk:
            raise BenchError("the relay closed the connection")
        now = time.monotonic_ns()
        buf += chunk
        while len(buf) >= FRAME:
            seq, sent = HEAD.unpack_from(buf)
            buf = buf[FRAME:]
            got += 1
            if seq >= warmup:
                latencies.append(now - sent)
    conn.close()
    return latencies


def receiver_main(port: int, total: int, warmup: int, timeout: float) -> None:
    listener = socket.create_server(("127.0.0.1", port))
    print("ready", flush=True)
    cpu0 = self_cpu()
    latencies = receiver(listener, total, warmup, timeout)
    print(json.dumps({"latencies": latencies, "cpu": self_cpu() - cpu0}), flush=True)


def one_round(a: argparse.Namespace, work_us: float) -> dict[str, Any]:
    relay_port, recv_port = free_ports(2)
    warmup = round(a.rate * a.warmup)
    total = warmup + round(a.rate * a.seconds)
    me = [sys.executable, os.path.abspath(__file__)]
    recv = subprocess.Popen(me + ["--role", "receiver", "--port", str(recv_port), "--total", str(total),
                                  "--warmup-frames", str(warmup), "--timeout", str(a.seconds + a.warmup + 30)],
                            stdout=subprocess.PIPE, text=True)
    relay = None
    try:
        if recv.stdout is None or recv.stdout.readline().strip() != "ready":
            raise BenchError("the receiver did not start")
        relay = subprocess.Popen(me + ["--role", "relay", "--port", str(relay_port), "--target", str(recv_port),
                                       "--work-us", str(work_us)], stdout=subprocess.PIPE, text=True)
        if relay.stdout is None or relay.stdout.readline().strip() != "ready":
            raise BenchError("the relay did not start")
        sock = socket.create_connection(("127.0.0.1", relay_port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pad = bytes(FRAME - HEAD.size)
        period = 1e9 / a.rate
        relay_cpu0 = _cpu(relay.pid)
        t0 = time.monotonic_ns()
        sent = 0
        while sent < total:
            due_now = min(total, int((time.monotonic_ns() - t0) / period) + 1)
            while sent < due_now:
                sock.sendall(HEAD.pack(sent, time.monotonic_ns()) + pad)
                sent += 1
            if sent < total:
                time.sleep(max(0.0, (t0 + sent * period - time.monotonic_ns()) / 1e9))
        result = json.loads(recv.stdout.readline())
        relay_cpu = _cpu(relay.pid) - relay_cpu0
        sock.close()
    finally:
        for p in (relay, recv):
            if p is not None:
                p.kill()
                p.wait()
    return {"work_us": work_us, "latency": distribution_ms([v / 1e6 for v in result["latencies"]]),
            "relay_cpu_us_per_msg": relay_cpu * 1e6 / total, "receiver_cpu_us_per_msg": result["cpu"] * 1e6 / total}


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=2000.0, help="frames per second")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured, after warm-up")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds sent first and not counted")
    ap.add_argument("--work-us", default="0,150,300", help="comma-separated CPU µs the relay spends per frame")
    ap.add_argument("--rounds", type=int, default=4, help="each --work-us this many times, interleaved")
    ap.add_argument("--role", choices=("relay", "receiver"), help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--target", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--total", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--warmup-frames", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "relay":
        relay_main(a.port, a.target, float(a.work_us))
        return
    if a.role == "receiver":
        receiver_main(a.port, a.total, a.warmup_frames, a.timeout)
        return
    if a.rate <= 0 or a.seconds <= 0 or a.rounds < 1:
        ap.error("--rate, --seconds and --rounds must be positive")
    works = [float(w) for w in a.work_us.split(",")]
    rounds: list[list[dict[str, Any]]] = []
    for r in range(a.rounds):
        order = works if r % 2 == 0 else works[::-1]
        rounds.append([one_round(a, w) for w in order])
        for res in rounds[-1]:
            lat = res["latency"]
            print(f"relay_jitter: round {r + 1} work {res['work_us']:g} us: p50 {lat['p50_ms']:.2f} ms, "
                  f"p99 {lat['p99_ms']:.2f}, max {lat['max_ms']:.2f}; relay {res['relay_cpu_us_per_msg']:.0f} us/msg",
                  file=sys.stderr)
    print(json.dumps({"bench": "relay_jitter", "args": {k: v for k, v in vars(a).items() if v is not None},
                      "loadavg": os.getloadavg(), "rounds": rounds}, indent=1))


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        print(f"relay_jitter: {exc}", file=sys.stderr)
        sys.exit(1)
