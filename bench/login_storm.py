"""A storm of MQTT logins, and what it does to everyone else: the reactor must not stall while
passwords are checked (scrypt, about 0.2 s of a core each, on the broker's password thread;
docs/decisions/0031-scrypt-off-the-reactor.md).

A `logbus serve` of its own (MQTT and HTTP on free loopback ports); --users users, each with
a password of its own (made through the HTTP API before anything is measured). A probe
connection sends PINGREQ every --probe-interval-ms and times each PINGRESP, throughout:

Each phase lasts --quiet-seconds, or as long as its logins take if longer:

- ``quiet``: nothing else going on;
- ``first_logins``: every user connects at once (raw sockets, CONNECT with its password),
  never logged in before: each login runs the KDF;
- ``known_logins``: the same again: each password is in the login cache.

    python bench/login_storm.py --users 40 --rounds 2

Prints JSON: per round and phase, the probe's round trips (ms quantiles), the logins'
time to CONNACK (ms quantiles), and the broker's CPU (user, system seconds).
"""

from __future__ import annotations

import argparse
import http.client
import json
import select
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

from common import LOOPBACK, BenchError, basic_auth, cpu_split, distribution_ms, start_logbus, stop_logbus

_U16 = struct.Struct(">H")
PINGREQ = b"\xc0\x00"


def utf8(s: str) -> bytes:
    b = s.encode()
    return _U16.pack(len(b)) + b


def connect_packet(client_id: str, user: str, password: str) -> bytes:
    body = utf8("MQTT") + bytes([4, 0x02 | 0x80 | 0x40]) + _U16.pack(60) + utf8(client_id) + utf8(user) \
        + utf8(password)
    assert len(body) < 128
    return bytes([0x10, len(body)]) + body


def http_put(address: str, path: str, body: dict[str, Any]) -> None:
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("PUT", path, json.dumps(body), {**basic_auth(), "Content-Type": "application/json"})
        status = conn.getresponse().status
        if status >= 300:
            raise BenchError(f"PUT {path}: HTTP {status}")
    finally:
        conn.close()


class Probe(threading.Thread):
    """PINGREQ / PINGRESP round trips on one connection, each ``interval`` s apart."""

    def __init__(self, port: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(connect_packet("probe", "guest", "guest"))
        if self.sock.recv(4)[:1] != b"\x20":
            raise BenchError("the probe's CONNACK did not come")
        self.interval = interval
        self.rtts: list[float] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            self.sock.sendall(PINGREQ)
            if self.sock.recv(2) != b"\xd0\x00":
                raise BenchError("PINGRESP expected")
            self.rtts.append((time.monotonic() - started) * 1000)
            time.sleep(self.interval)

    def take(self) -> list[float]:
        out, self.rtts = self.rtts, []
        return out


def storm(port: int, users: list[tuple[str, str]], timeout: float) -> list[float]:
    """Every user connects at once; each one's time to its CONNACK, in ms."""
    socks = {}
    started = time.monotonic()
    for i, (user, password) in enumerate(users):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(connect_packet(f"storm-{i}-{uuid.uuid4().hex[:6]}", user, password))
        socks[s] = user
    took: list[float] = []
    deadline = started + timeout
    while socks:
        if time.monotonic() > deadline:
            raise BenchError(f"{len(socks)} logins not answered within {timeout} s")
        ready, _, _ = select.select(list(socks), [], [], 0.5)
        for s in ready:
            data = s.recv(4)
            if data[:1] != b"\x20" or len(data) < 4 or data[3] != 0:
                raise BenchError(f"user {socks[s]!r} refused: {data!r}")
            took.append((time.monotonic() - started) * 1000)
            s.close()
            del socks[s]
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=40)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--quiet-seconds", type=float, default=5.0)
    p.add_argument("--probe-interval-ms", type=float, default=2.0)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a storm may take")
    args = p.parse_args()
    workdir = tempfile.mkdtemp(prefix="login-storm-")
    proc, addresses = start_logbus(workdir, {"mqtt": LOOPBACK, "http": LOOPBACK})
    try:
        port = int(addresses["mqtt"].rsplit(":", 1)[1])
        rounds = []
        for r in range(args.rounds):
            users = [(f"storm{r}-{i}", uuid.uuid4().hex) for i in range(args.users)]
            for user, password in users:  # hashed on the password thread, before anything is measured
                http_put(addresses["http"], f"/api/users/{user}", {"password": password, "tags": ""})
                http_put(addresses["http"], f"/api/permissions/%2F/{user}",
                         {"configure": ".*", "write": ".*", "read": ".*"})
            probe = Probe(port, args.probe_interval_ms / 1000)
            probe.start()
            result: dict[str, Any] = {}
            for phase in ("quiet", "first_logins", "known_logins"):
                probe.take()
                before = cpu_split(proc.pid)
                started = time.monotonic()
                logins = None if phase == "quiet" else storm(port, users, args.timeout)
                time.sleep(max(0.0, started + args.quiet_seconds - time.monotonic()))  # windows as long
                after = cpu_split(proc.pid)
                result[phase] = {"seconds": round(time.monotonic() - started, 3),
                                 "probe_rtt": distribution_ms(probe.take()),
                                 "logins": distribution_ms(logins) if logins is not None else None,
                                 "broker_cpu_user_s": round(after[0] - before[0], 2),
                                 "broker_cpu_system_s": round(after[1] - before[1], 2)}
            probe.stopping.set()
            probe.join(10)
            rounds.append(result)
        print(json.dumps({"users": args.users, "probe_interval_ms": args.probe_interval_ms, "rounds": rounds},
                         indent=1))
    finally:
        stop_logbus(proc)


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        print(f"login_storm: {e}", file=sys.stderr)
        sys.exit(1)
