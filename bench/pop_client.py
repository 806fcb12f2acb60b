"""The client side of bench/pop_bench.py: broker CPU per message, one keep-alive HTTP
connection, and the client processes that publish and receive.

    CpuMeter                     broker CPU (user, system) per message over one span
    Http, pop_path, ...          JSON over one HTTP/1.1 keep-alive connection
    publisher, pop_member,       what each client process runs (spawned processes, not
      delay_member               threads: the GIL)
    Clients                      client processes of one kind, released together by a barrier

Imported by name from bench/ (the script's directory), never from pop_bench itself: run
as a script, that module is __main__, and a second copy of it would bring a second
BenchError that its ``except BenchError`` does not catch (common.py has the one).
"""

from __future__ import annotations

import http.client
import json
import multiprocessing as mp
import socket
import sys
import threading
import time
import traceback
from typing import Any, Callable
from urllib.parse import quote, urlsplit

from common import BenchError, basic_auth, cpu_split, self_cpu

MAX_PUBLISH = 1000  # messages per publish request (gateway/http/topics.py)
MAX_RECEIVE = 1024  # messages per receive (core/queues/pop.py)


def log(msg: str) -> None:
    print(f"pop_bench: {msg}", file=sys.stderr, flush=True)


# -- measuring ---------------------------------------------------------------------


class CpuMeter:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.user0, self.sys0 = cpu_split(pid)
        self.t0 = time.perf_counter()

    def per(self, n: int, unit: str) -> dict[str, float]:
        user, system = cpu_split(self.pid)
        u, s = user - self.user0, system - self.sys0
        return {f"broker_cpu_us_per_{unit}": (u + s) / max(n, 1) * 1e6,
                f"broker_user_us_per_{unit}": u / max(n, 1) * 1e6,
                f"broker_system_us_per_{unit}": s / max(n, 1) * 1e6,
                "broker_cpu_percent": (u + s) / max(time.perf_counter() - self.t0, 1e-9) * 100}


# -- HTTP --------------------------------------------------------------------------


class Http:
    """One keep-alive HTTP/1.1 connection; JSON in and out."""

    def __init__(self, url: str, timeout: float) -> None:
        u = urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise BenchError(f"--url must be http://host:port, not {url!r}")
        self.prefix = u.path.rstrip("/")
        self.auth = basic_auth(u.username or "guest", u.password or "guest")  # from http://user:pw@host:port
        self.conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
        self.conn.connect()
        assert self.conn.sock is not None
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def raw(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200,)) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **self.auth} if data is not None else dict(self.auth)
        try:
            self.conn.request(method, self.prefix + path, body=data, headers=headers)
            r = self.conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            if method != "GET":
                raise
            # the broker closed the idle connection (handshake_timeout_ms): a GET again
            self.conn.close()
            self.conn.request(method, self.prefix + path, body=data, headers=headers)
            r = self.conn.getresponse()
        raw = r.read()
        if r.status not in ok:
            raise BenchError(f"{method} {path}: HTTP {r.status} {raw[:300]!r}")
        return raw

    def call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200,)) -> Any:
        raw = self.raw(method, path, body, ok)
        return json.loads(raw) if raw else None

    def close(self) -> None:
        self.conn.close()


def pop_path(group: str, topic: str, action: str) -> str:
    return f"/api/pop/{quote(group, safe='')}/{quote(topic, safe='')}/{action}"


def messages_path(topic: str) -> str:
    return f"/api/topics/{quote(topic, safe='')}/messages"


def padded(text: str, size: int) -> str:
    return text + "x" * max(0, size - len(text))


# -- client processes ----------------------------------------------------------------
#
# Each client is a spawned process running one of the functions below with a dict of
# arguments; it connects, waits at the barrier (so the parent starts its clocks when
# every client is ready), works, and puts a result dict (or {"error": ...}) on a queue.


def publisher(a: dict[str, Any], go: Callable[[], None], shared: Any) -> dict[str, Any]:
    """Publish messages a["start"] .. a["end"] - 1 in requests of a["batch"]."""
    http_ = Http(a["url"], a["timeout"])
    go()
    cpu0 = self_cpu()
    t0 = time.time()
    deadline = time.monotonic() + a["timeout"]
    path = messages_path(a["topic"])
    i, published = a["start"], 0
    while i < a["end"]:
        if time.monotonic() > deadline:
            raise BenchError(f"publisher: {published} published within {a['timeout']} s")
        j = min(i + a["batch"], a["end"])
        msgs = [message_for(a, k) for k in range(i, j)]
        reply = http_.call("POST", path, {"messages": msgs, "partition": 0})
        if len(reply["offsets"]) != j - i:
            raise BenchError(f"publisher: {j - i} sent, {len(reply['offsets'])} offsets back")
        published += j - i
        i = j
    http_.close()
    return {"published": published, "t_start": t0, "t_end": time.time(), "client_cpu_s": self_cpu() - cpu0}


def message_for(a: dict[str, Any], i: int) -> dict[str, Any]:
    kind = a["kind"]
    if kind == "plain":
        return {"value": padded(f"{i}:", a["size"])}
    if kind == "deliver_at":
        due = a["due_ms"] + (i * a["spread_ms"]) // a["count"]
        return {"value": padded(f"{due}:{i}:", a["size"]), "deliver_at": due}
    return {"value": padded(f"{i}:", a["size"]), "delay_ms": a["delay_ms"]}


def pop_member(a: dict[str, Any], go: Callable[[], None], shared: Any) -> dict[str, Any]:
    """Receive and ack until a receive comes back empty (everything was published
    before): the round trip of each receive with its ack, and what was received."""
    http_ = Http(a["url"], a["timeout"])
    receive, ack = pop_path(a["group"], a["topic"], "receive"), pop_path(a["group"], a["topic"], "ack")
    body = {"max": a["batch"], "invisible_ms": a["invisible_ms"], "member": a["member"]}
    go()
    cpu0 = self_cpu()
    t0 = time.time()
    deadline = time.monotonic() + a["timeout"]
    rtt: list[float] = []
    seen: list[int] = []
    redelivered = 0
    failed: list[Any] = []
    while time.monotonic() < deadline:
        s = time.perf_counter()
        msgs = http_.call("POST", receive, body)["messages"]
        if not msgs:
            break
        reply = http_.call("POST", ack, {"handles": [m["handle"] for m in msgs]})
        rtt.append((time.perf_counter() - s) * 1000)
        if reply["acked"] != len(msgs) or reply["failed"]:
            failed += reply["failed"][:5] or [f"acked {reply['acked']} of {len(msgs)}"]
        for m in msgs:
            seen.append(m["partition"] << 48 | m["offset"])
            redelivered += m["deliveries"] != 1
    else:
        raise BenchError(f"member {a['member']}: {len(seen)} received, not done within {a['timeout']} s")
    t1 = time.time()
    http_.close()
    return {"seen": seen, "rtt_ms": rtt, "redelivered": redelivered, "ack_failed": failed,
            "t_start": t0, "t_end": t1, "client_cpu_s": self_cpu() - cpu0}


def delay_member(a: dict[str, Any], go: Callable[[], None], shared: Any) -> dict[str, Any]:
    """Poll receive until the group's members together have a["count"] messages; the
    lateness of each (receive returned - due); ack everything once the parent says so
    (when its sampler has seen every message released)."""
    receive = pop_path(a["group"], a["topic"], "receive")
    body = {"max": a["batch"], "invisible_ms": a["invisible_ms"], "member": a["member"]}
    poll = a["poll_ms"] / 1000
    go()
    # connected after the wait for the due time (~20 s), which is longer than the
    # broker's handshake_timeout_ms: an idle connection without a request is closed
    http_ = Http(a["url"], a["timeout"])
    cpu0 = self_cpu()
    deadline = time.monotonic() + a["timeout"]
    late: list[float] = []
    seen: list[int] = []
    handles: list[str] = []
    receives = empty = 0
    first_ms = last_ms = 0.0
    counter, ack_now = shared
    while counter.value < a["count"]:
        if time.monotonic() > deadline:
            raise BenchError(f"member {a['member']}: the group has {counter.value} of {a['count']} "
                             f"after {a['timeout']} s")
        raw = http_.raw("POST", receive, body)
        now_ms = time.time() * 1000
        receives += 1
        msgs = json.loads(raw)["messages"]
        if not msgs:
            empty += 1
            time.sleep(poll)
            continue
        with counter.get_lock():
            counter.value += len(msgs)
        first_ms = first_ms or now_ms
        last_ms = now_ms
        for m in msgs:
            late.append(now_ms - int(m["value"].split(":", 1)[0]))
            seen.append(m["partition"] << 48 | m["offset"])
            handles.append(m["handle"])
    cpu = self_cpu() - cpu0
    ack_now.wait(max(0.0, deadline - time.monotonic()))  # the sampler has seen them all released
    failed: list[Any] = []
    ack = pop_path(a["group"], a["topic"], "ack")
    for i in range(0, len(handles), MAX_RECEIVE):
        chunk = handles[i:i + MAX_RECEIVE]
        reply = http_.call("POST", ack, {"handles": chunk})
        if reply["acked"] != len(chunk) or reply["failed"]:
            failed += reply["failed"][:5] or [f"acked {reply['acked']} of {len(chunk)}"]
    http_.close()
    return {"late_ms": late, "seen": seen, "receives": receives, "empty_receives": empty,
            "first_ms": first_ms, "last_ms": last_ms, "ack_failed": failed, "client_cpu_s": cpu}


CLIENTS = {"publisher": publisher, "pop_member": pop_member, "delay_member": delay_member}


def _client_main(kind: str, a: dict[str, Any], barrier: Any, results: Any, shared: Any) -> None:
    def go() -> None:
        barrier.wait(a["timeout"])

    try:
        results.put(CLIENTS[kind](a, go, shared))
    except BaseException as exc:  # reported to the parent, which fails the run
        try:
            barrier.abort()
        except Exception:
            pass
        results.put({"error": f"{kind} {a.get('member', a.get('start', ''))}: {exc!r}\n"
                              f"{traceback.format_exc(limit=3)}"})


class Clients:
    """Client processes of one kind, started together, released together."""

    def __init__(self, kind: str, argsets: list[dict[str, Any]], timeout: float) -> None:
        ctx = mp.get_context("spawn")
        self.timeout = timeout
        self.barrier = ctx.Barrier(len(argsets) + 1)
        self.results = ctx.Queue()
        self.counter = ctx.Value("q", 0)
        self.event = ctx.Event()
        self.shared = (self.counter, self.event)
        self.procs = [ctx.Process(target=_client_main, args=(kind, a, self.barrier, self.results, self.shared),
                                  daemon=True) for a in argsets]
        for p in self.procs:
            p.start()

    def go(self) -> None:
        """Wait until every client is connected, then let them all start."""
        try:
            self.barrier.wait(self.timeout)
        except threading.BrokenBarrierError:
            self.collect()  # raises the client's error
            raise BenchError("a client did not start") from None

    def collect(self) -> list[dict[str, Any]]:
        out = []
        deadline = time.monotonic() + self.timeout + 30
        try:
            for _ in self.procs:
                left = deadline - time.monotonic()
                try:
                    r = self.results.get(timeout=max(left, 0.1))
                except Exception:
                    raise BenchError(f"clients did not report within {self.timeout + 30:g} s") from None
                if "error" in r:
                    raise BenchError(r["error"])
                out.append(r)
        finally:
            self.stop()
        return out

    def stop(self) -> None:
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
                p.join(5)
