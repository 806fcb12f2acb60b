#!/usr/bin/env python3
"""Pop consumption, delayed delivery and pending-timer memory over HTTP (issue 16).

Three workloads, each on a topic of its own (``pop-bench-<workload>-<pid>-<time>``,
one partition, the broker's default flush policy unless ``--flush``) read by one pop
group (``--group``), which is created by an empty receive before anything is published:

    pop    --messages messages of --size bytes published first (by --publishers client
           processes, --publish-batch per request); then --members client processes
           (processes, not threads: the GIL) each on its own HTTP keep-alive connection
           receive --batch messages with --invisible-ms and ack their handles in one
           request, until a receive comes back empty. msg/s, broker CPU us per message,
           and the receive+ack round trip (one receive and its ack) p50/p99 in ms.
    delay  --delayed messages published with ``deliver_at`` spread over one second that
           starts --delay-lead seconds ahead (--delay-spread-ms 0: all due in the same
           millisecond). --delay-members processes poll receive (--delay-batch, an empty
           receive waits --poll-ms) from half a second before that second; each message
           carries its due time in its value, so the lateness of each is the time a
           receive returned it minus its due time (p50/p99/max). Messages are acked at
           the end, so a sampler polling GET /api/pop every --sample-ms sees how many
           are released (ready + invisible) over time: the release rate, and the release
           lateness per quantile (the k-th message in due order counts as released at
           the first sample showing k released; an upper bound by the sample interval).
           --delay-members 0: nobody receives, only the release is measured.
    rss    broker VmRSS (and VmHWM) from /proc before and after publishing --pending
           messages with ``delay_ms`` one hour (--pending-delay-ms), and the publish rate;
           with --ready N, then after N more messages that wait ready in the group.

The broker is a `logbus serve` of its own (temp data dir, HTTP only, loopback, a free
port) unless --url and --broker-pid name a running one; only the pid it started is
stopped. Broker CPU is utime+stime from /proc/<pid>/stat; client CPU is each client
process's own getrusage. Every loop is bounded (--timeout per phase). Progress goes to
stderr, one JSON document to stdout. Lost, duplicated, redelivered or early messages
fail the run, and so does an ack that reports a failure.

    python bench/pop_bench.py                           # pop, delay, rss with the defaults
    python bench/pop_bench.py --workloads pop --messages 200000
    python bench/pop_bench.py --url http://127.0.0.1:15672 --broker-pid 1234 --workloads delay
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import multiprocessing as mp
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable
from urllib.parse import quote, urlsplit

WORKLOADS = ("pop", "delay", "rss")
MAX_PUBLISH = 1000  # messages per publish request (gateway/http/topics.py)
MAX_RECEIVE = 1024  # messages per receive (core/queues/pop.py)


class BenchError(Exception):
    pass


def log(msg: str) -> None:
    print(f"pop_bench: {msg}", file=sys.stderr, flush=True)


# -- measuring ---------------------------------------------------------------------


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def memory(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a process, in MB (10^6 bytes)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                out[name.lower() + "_mb"] = int(rest.split()[0]) * 1024 / 1e6
    return out


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


def quantile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank quantile of an ascending list (q in [0, 1])."""
    if not sorted_values:
        return float("nan")
    k = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[k - 1]


def distribution_ms(values: list[float]) -> dict[str, float]:
    v = sorted(values)
    return {"count": len(v), "p50_ms": quantile(v, 0.50), "p90_ms": quantile(v, 0.90),
            "p99_ms": quantile(v, 0.99), "max_ms": v[-1] if v else float("nan"),
            "min_ms": v[0] if v else float("nan")}


# -- HTTP --------------------------------------------------------------------------


class Http:
    """One keep-alive HTTP/1.1 connection; JSON in and out."""

    def __init__(self, url: str, timeout: float) -> None:
        u = urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise BenchError(f"--url must be http://host:port, not {url!r}")
        self.prefix = u.path.rstrip("/")
        self.conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
        self.conn.connect()
        assert self.conn.sock is not None
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def raw(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200,)) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
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


def rusage_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# -- client processes ----------------------------------------------------------------
#
# Each client is a spawned process running one of the functions below with a dict of
# arguments; it connects, waits at the barrier (so the parent starts its clocks when
# every client is ready), works, and puts a result dict (or {"error": ...}) on a queue.


def publisher(a: dict[str, Any], go: Callable[[], None], shared: Any) -> dict[str, Any]:
    """Publish messages a["start"] .. a["end"] - 1 in requests of a["batch"]."""
    http_ = Http(a["url"], a["timeout"])
    go()
    cpu0 = rusage_cpu()
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
    return {"published": published, "t_start": t0, "t_end": time.time(), "client_cpu_s": rusage_cpu() - cpu0}


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
    cpu0 = rusage_cpu()
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
            "t_start": t0, "t_end": t1, "client_cpu_s": rusage_cpu() - cpu0}


def delay_member(a: dict[str, Any], go: Callable[[], None], shared: Any) -> dict[str, Any]:
    """Poll receive until the group's members together have a["count"] messages; the
    lateness of each (receive returned - due); ack everything once the parent says so
    (when its sampler has seen every message released)."""
    http_ = Http(a["url"], a["timeout"])
    receive = pop_path(a["group"], a["topic"], "receive")
    body = {"max": a["batch"], "invisible_ms": a["invisible_ms"], "member": a["member"]}
    poll = a["poll_ms"] / 1000
    go()
    cpu0 = rusage_cpu()
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
    cpu = rusage_cpu() - cpu0
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


def publish_all(args: argparse.Namespace, url: str, topic: str, count: int, pid: int,
                **kind: Any) -> dict[str, Any]:
    """``count`` messages to ``topic`` from --publishers processes; rate and broker CPU."""
    n = max(1, min(args.publishers, count))
    bounds = [count * k // n for k in range(n + 1)]
    argsets = [{"url": url, "topic": topic, "timeout": args.timeout, "batch": args.publish_batch,
                "size": args.size, "count": count, "start": bounds[k], "end": bounds[k + 1], **kind}
               for k in range(n)]
    clients = Clients("publisher", argsets, args.timeout)
    clients.go()
    meter = CpuMeter(pid)
    t0 = time.perf_counter()
    results = clients.collect()
    dt = time.perf_counter() - t0
    published = sum(r["published"] for r in results)
    out = {"messages": published, "publishers": n, "batch": args.publish_batch, "seconds": dt,
           "msgs_per_s": published / dt, **meter.per(published, "msg"),
           "client_cpu_us_per_msg": sum(r["client_cpu_s"] for r in results) / published * 1e6}
    log(f"published {published:,} to {topic} in {dt:.2f} s: {out['msgs_per_s']:,.0f} msg/s, "
        f"broker {out['broker_cpu_us_per_msg']:.1f} us/msg")
    return out


# -- workloads -------------------------------------------------------------------------


def new_topic(args: argparse.Namespace, http_: Http, workload: str) -> str:
    topic = f"pop-bench-{workload}-{os.getpid()}-{int(time.time())}"
    config: dict[str, Any] = {"partitions": 1}
    if args.flush:
        config["flush"] = args.flush
    http_.call("POST", "/api/topics", {"name": topic, "config": config}, ok=(201,))
    # the group gets what is appended after its first receive
    got = http_.call("POST", pop_path(args.group, topic, "receive"), {"max": 1, "invisible_ms": 1000})
    if got["messages"]:
        raise BenchError(f"new topic {topic} already has messages for the group")
    return topic


def group_counts(http_: Http, group: str, topic: str) -> tuple[int, int]:
    for g in http_.call("GET", "/api/pop"):
        if g["group"] == group and g["topic"] == topic:
            return g["ready"], g["invisible"]
    raise BenchError(f"GET /api/pop does not list group {group!r} on {topic!r}")


def check_exactly_once(seen: list[int], count: int, what: str) -> None:
    distinct = len(set(seen))
    if len(seen) != count or distinct != count:
        raise BenchError(f"{what}: {count} published, {len(seen)} received, {distinct} distinct "
                         f"({len(seen) - distinct} duplicates, {count - distinct} lost)")


def w_pop(args: argparse.Namespace, url: str, pid: int, http_: Http) -> dict[str, Any]:
    topic = new_topic(args, http_, "pop")
    out: dict[str, Any] = {"topic": topic, "members": args.members, "batch": args.batch,
                           "invisible_ms": args.invisible_ms, "size": args.size}
    out["publish"] = publish_all(args, url, topic, args.messages, pid, kind="plain")
    ready, _ = group_counts(http_, args.group, topic)
    if ready != args.messages:
        raise BenchError(f"{args.messages} published, the group has {ready} ready")
    argsets = [{"url": url, "topic": topic, "group": args.group, "member": f"m{k}", "batch": args.batch,
                "invisible_ms": args.invisible_ms, "timeout": args.timeout} for k in range(args.members)]
    clients = Clients("pop_member", argsets, args.timeout)
    clients.go()
    meter = CpuMeter(pid)
    t0 = time.time()
    results = clients.collect()
    cpu = meter.per(args.messages, "msg")
    dt = max(r["t_end"] for r in results) - t0
    seen = [s for r in results for s in r["seen"]]
    failed = [f for r in results for f in r["ack_failed"]]
    if failed:
        raise BenchError(f"pop: acks failed: {failed[:5]}")
    check_exactly_once(seen, args.messages, "pop")
    redelivered = sum(r["redelivered"] for r in results)
    if redelivered:  # nothing lapses within the invisible time, nothing was nacked
        raise BenchError(f"pop: {redelivered} messages came with a delivery count above 1")
    ready, invisible = group_counts(http_, args.group, topic)
    rtt = [x for r in results for x in r["rtt_ms"]]
    out["receive_ack"] = {
        "messages": len(seen), "seconds": dt, "msgs_per_s": len(seen) / dt, **cpu,
        "receives": len(rtt), "msgs_per_receive": len(seen) / max(len(rtt), 1),
        "redelivered": redelivered,
        "per_member_msgs": [len(r["seen"]) for r in results],
        "client_cpu_us_per_msg": sum(r["client_cpu_s"] for r in results) / len(seen) * 1e6,
        "round_trip": distribution_ms(rtt), "left_ready": ready, "left_invisible": invisible,
    }
    ra = out["receive_ack"]
    log(f"pop: {ra['msgs_per_s']:,.0f} msg/s, broker {ra['broker_cpu_us_per_msg']:.1f} us/msg, "
        f"receive+ack p50 {ra['round_trip']['p50_ms']:.2f} ms p99 {ra['round_trip']['p99_ms']:.2f} ms")
    return out


class Sampler(threading.Thread):
    """GET /api/pop every ``interval`` s: (epoch ms when the answer came, ready + invisible),
    until ``count`` are released (or ``timeout`` s passed, or ``stopping`` is set)."""

    def __init__(self, url: str, group: str, topic: str, interval: float, timeout: float, count: int) -> None:
        super().__init__(daemon=True)
        self.http = Http(url, timeout)
        self.group, self.topic, self.interval = group, topic, interval
        self.count, self.deadline = count, time.monotonic() + timeout
        self.samples: list[tuple[float, int]] = []
        self.stopping = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                t0 = time.time()
                ready, invisible = group_counts(self.http, self.group, self.topic)
                t1 = time.time()
                self.samples.append((t1 * 1000, ready + invisible))  # released by then at the latest
                if ready + invisible >= self.count or time.monotonic() > self.deadline:
                    break
                self.stopping.wait(max(0.0, self.interval - (t1 - t0)))
        except Exception as exc:  # reported by the workload
            self.error = exc
        finally:
            self.http.close()


def release_figures(samples: list[tuple[float, int]], count: int, due_ms: int, spread_ms: int) -> dict[str, Any]:
    """From the sampler's (time, released) series: the release lateness of the k-th message
    in due order for a few quantiles, and the release rate."""
    def due_of(k: int) -> float:  # the k-th (1-based) message in due order
        return due_ms + ((k - 1) * spread_ms) // count

    def released_at(k: int) -> float | None:
        for t, r in samples:
            if r >= k:
                return t
        return None

    out: dict[str, Any] = {}
    for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
        k = max(1, math.ceil(q * count))
        t = released_at(k)
        out[f"{name}_ms"] = None if t is None else t - due_of(k)
    first = next((t for t, r in samples if r > 0), None)
    last = released_at(count)
    if first is not None and last is not None and last > first:
        out["release_seconds"] = (last - first) / 1000
        out["released_per_s"] = count / ((last - first) / 1000)
    steps = [(b[1] - a[1]) / ((b[0] - a[0]) / 1000) for a, b in zip(samples, samples[1:]) if b[0] > a[0]]
    out["peak_released_per_s_between_samples"] = max(steps, default=0.0)
    out["samples"] = len(samples)
    out["sample_interval_ms"] = (samples[-1][0] - samples[0][0]) / max(len(samples) - 1, 1) if samples else None
    return out


def w_delay(args: argparse.Namespace, url: str, pid: int, http_: Http) -> dict[str, Any]:
    topic = new_topic(args, http_, "delay")
    count, spread = args.delayed, args.delay_spread_ms
    due_ms = int(math.ceil(time.time() + args.delay_lead)) * 1000
    out: dict[str, Any] = {"topic": topic, "messages": count, "due_ms": due_ms, "spread_ms": spread,
                           "members": args.delay_members, "batch": args.delay_batch, "poll_ms": args.poll_ms}
    out["publish"] = publish_all(args, url, topic, count, pid, kind="deliver_at", due_ms=due_ms, spread_ms=spread)
    margin_ms = due_ms - time.time() * 1000
    out["published_ahead_ms"] = margin_ms
    if margin_ms < 1000:
        raise BenchError(f"publishing ended {margin_ms:.0f} ms before the due second: raise --delay-lead")
    ready, invisible = group_counts(http_, args.group, topic)
    if ready or invisible:
        raise BenchError(f"the group has {ready} ready and {invisible} invisible before the due time")
    argsets = [{"url": url, "topic": topic, "group": args.group, "member": f"m{k}", "batch": args.delay_batch,
                "invisible_ms": args.invisible_ms, "timeout": args.timeout + args.delay_lead,
                "poll_ms": args.poll_ms, "count": count} for k in range(args.delay_members)]
    clients = Clients("delay_member", argsets, args.timeout + args.delay_lead)
    sampler = Sampler(url, args.group, topic, args.sample_ms / 1000, args.timeout, count)
    log(f"delay: {count:,} messages due from {due_ms} over {spread} ms; "
        f"waiting {margin_ms / 1000 - 0.5:.1f} s")
    time.sleep(max(0.0, (due_ms - 500) / 1000 - time.time()))
    clients.go()
    sampler.start()
    meter = CpuMeter(pid)
    try:
        while sampler.is_alive():  # until every message is released (or the timeout)
            sampler.join(0.2)
            if any(not p.is_alive() for p in clients.procs):  # a member failed: collect() says why
                break
        clients.event.set()  # the members may ack now
        results = clients.collect()
    finally:
        sampler.stopping.set()
        sampler.join(10)
    cpu = meter.per(count, "msg")
    if sampler.error is not None:
        raise BenchError(f"delay: the sampler failed: {sampler.error!r}")
    out["released"] = release_figures(sampler.samples, count, due_ms, spread)
    rel = out["released"]
    rel_p99 = "?" if rel["p99_ms"] is None else f"{rel['p99_ms']:.1f}"
    if not results:  # release only: nobody receives
        ready, invisible = group_counts(http_, args.group, topic)
        if ready != count or invisible:
            raise BenchError(f"delay: {count} due, the group has {ready} ready and {invisible} invisible")
        out["release_only"] = {**cpu, "left_ready": ready}
        log(f"delay (release only): released p99 <= {rel_p99} ms, {rel.get('released_per_s', 0):,.0f} msg/s, "
            f"broker {cpu['broker_cpu_us_per_msg']:.1f} us/msg")
        return out
    failed = [f for r in results for f in r["ack_failed"]]
    if failed:
        raise BenchError(f"delay: acks failed: {failed[:5]}")
    seen = [s for r in results for s in r["seen"]]
    check_exactly_once(seen, count, "delay")
    late = [x for r in results for x in r["late_ms"]]
    early = sum(1 for x in late if x < 0)
    if early:
        raise BenchError(f"delay: {early} messages received before their due time (earliest {min(late):.1f} ms)")
    first = min(r["first_ms"] for r in results if r["first_ms"])
    last = max(r["last_ms"] for r in results)
    out["received"] = {
        "lateness": distribution_ms(late),
        "first_after_due_ms": first - due_ms, "last_after_due_ms": last - due_ms,
        "receives": sum(r["receives"] for r in results),
        "empty_receives": sum(r["empty_receives"] for r in results),
        "client_cpu_us_per_msg": sum(r["client_cpu_s"] for r in results) / count * 1e6,
        **cpu,
    }
    lat = out["received"]["lateness"]
    log(f"delay: received p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms, max {lat['max_ms']:.1f} ms "
        f"after due; released p99 <= {rel_p99} ms, {rel.get('released_per_s', 0):,.0f} msg/s")
    return out


def w_rss(args: argparse.Namespace, url: str, pid: int, http_: Http) -> dict[str, Any]:
    topic = new_topic(args, http_, "rss")
    time.sleep(args.settle)
    out: dict[str, Any] = {"topic": topic, "messages": args.pending, "delay_ms": args.pending_delay_ms,
                           "size": args.size, "before": memory(pid)}
    out["publish"] = publish_all(args, url, topic, args.pending, pid, kind="delay_ms", delay_ms=args.pending_delay_ms)
    out["after_publish"] = memory(pid)
    time.sleep(args.settle)
    out["after"] = memory(pid)
    ready, invisible = group_counts(http_, args.group, topic)
    if ready or invisible:
        raise BenchError(f"rss: the group has {ready} ready and {invisible} invisible: the delay was not kept")
    out["rss_growth_mb"] = out["after"]["vmrss_mb"] - out["before"]["vmrss_mb"]
    out["rss_growth_bytes_per_msg"] = out["rss_growth_mb"] * 1e6 / max(args.pending, 1)
    log(f"rss: {out['before']['vmrss_mb']:.1f} -> {out['after']['vmrss_mb']:.1f} MB "
        f"(peak {out['after']['vmhwm_mb']:.1f} MB) with {args.pending:,} pending delayed messages")
    if args.ready:  # for comparison: messages waiting ready in the group, not as timers
        out["ready"] = {"messages": args.ready,
                        "publish": publish_all(args, url, topic, args.ready, pid, kind="plain")}
        time.sleep(args.settle)
        ready, _ = group_counts(http_, args.group, topic)
        if ready != args.ready:
            raise BenchError(f"rss: {args.ready} published, the group has {ready} ready")
        r = out["ready"]
        r["after"] = memory(pid)
        r["rss_growth_mb"] = r["after"]["vmrss_mb"] - out["after"]["vmrss_mb"]
        r["rss_growth_bytes_per_msg"] = r["rss_growth_mb"] * 1e6 / args.ready
        log(f"rss: {r['after']['vmrss_mb']:.1f} MB with {args.ready:,} ready messages as well "
            f"({r['rss_growth_bytes_per_msg']:,.0f} B per ready message)")
    return out


RUN = {"pop": w_pop, "delay": w_delay, "rss": w_rss}


# -- broker ------------------------------------------------------------------------------


def tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def start_broker(workdir: str, extra: list[str], timeout: float) -> tuple[subprocess.Popen[bytes], str]:
    """`logbus serve` with an HTTP listener only, on a free loopback port (from its ready file)."""
    ready = os.path.join(workdir, "ready.json")
    broker_log = os.path.join(workdir, "broker.log")
    with open(broker_log, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "logbus", "serve", "--data-dir", os.path.join(workdir, "data"),
             "--amqp", "off", "--kafka", "off", "--mqtt", "off", "--http", "tcp:0:interface=127.0.0.1",
             "--ready-file", ready, *extra],
            stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
        )
    deadline = time.monotonic() + timeout
    while not os.path.exists(ready):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_broker(proc)
            raise BenchError(f"logbus did not start:\n{tail(broker_log)}")
        time.sleep(0.05)
    time.sleep(0.05)  # the file is written in one go; give a partial write no chance
    with open(ready) as f:
        return proc, "http://" + json.load(f)["http"]


def stop_broker(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: pop,delay,rss")
    ap.add_argument("--url", help="a running broker's HTTP listener (needs --broker-pid)")
    ap.add_argument("--broker-pid", type=int, help="its pid, for CPU and RSS from /proc")
    ap.add_argument("--broker-arg", action="append", default=[],
                    help="an extra `logbus serve` argument for the broker this script starts (repeatable)")
    ap.add_argument("--dir", help="scratch directory for the broker's data (default: a temp dir)")
    ap.add_argument("--group", default="bench", help="the pop group")
    ap.add_argument("--flush", help="flush policy of the bench topics (default: the broker's)")
    ap.add_argument("--size", type=int, default=100, help="message value bytes")
    ap.add_argument("--publishers", type=int, default=4, help="publishing client processes")
    ap.add_argument("--publish-batch", type=int, default=MAX_PUBLISH, help="messages per publish request")
    ap.add_argument("--members", type=int, default=4, help="pop group member processes")
    ap.add_argument("--messages", type=int, default=100_000, help="pop: messages")
    ap.add_argument("--batch", type=int, default=32, help="pop: messages per receive")
    ap.add_argument("--invisible-ms", type=int, default=30_000, help="invisible time of every receive")
    ap.add_argument("--delayed", type=int, default=100_000, help="delay: messages")
    ap.add_argument("--delay-lead", type=float, default=20.0,
                    help="delay: seconds from the start of publishing to the due second")
    ap.add_argument("--delay-spread-ms", type=int, default=1000, help="delay: due times spread over this")
    ap.add_argument("--delay-members", type=int, default=4,
                    help="delay: member processes (0: nobody receives, only the release is measured)")
    ap.add_argument("--delay-batch", type=int, default=MAX_RECEIVE, help="delay: messages per receive")
    ap.add_argument("--poll-ms", type=float, default=10.0, help="delay: a member's wait after an empty receive")
    ap.add_argument("--sample-ms", type=float, default=10.0, help="delay: GET /api/pop interval")
    ap.add_argument("--pending", type=int, default=1_000_000, help="rss: pending delayed messages")
    ap.add_argument("--pending-delay-ms", type=int, default=3_600_000, help="rss: their delay")
    ap.add_argument("--ready", type=int, default=0,
                    help="rss: then this many messages ready in the group (not delayed), for comparison")
    ap.add_argument("--settle", type=float, default=2.0, help="rss: seconds before each RSS reading")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per phase")
    args = ap.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    bad = [w for w in workloads if w not in RUN]
    if bad or not workloads:
        ap.error(f"unknown workloads {bad}; choose from {','.join(WORKLOADS)}")
    if (args.url is None) != (args.broker_pid is None):
        ap.error("--url and --broker-pid go together")
    if not 1 <= args.batch <= MAX_RECEIVE or not 1 <= args.delay_batch <= MAX_RECEIVE:
        ap.error(f"--batch and --delay-batch take 1 to {MAX_RECEIVE}")
    if min(args.messages, args.delayed, args.pending, args.members, args.publishers) < 1 or args.delay_members < 0:
        ap.error("message counts, --members and --publishers must be at least 1")
    if not 1 <= args.publish_batch <= MAX_PUBLISH:
        ap.error(f"--publish-batch takes 1 to {MAX_PUBLISH}")

    out: dict[str, Any] = {
        "bench": "pop_bench", "args": vars(args), "commit": git_commit(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release()},
        "loadavg_start": os.getloadavg(),
    }
    proc = None
    workdir = None
    try:
        if args.url is None:
            workdir = tempfile.mkdtemp(prefix="logbus-popbench-", dir=args.dir)
            proc, url = start_broker(workdir, args.broker_arg, 60)
            pid = proc.pid
            log(f"started logbus serve (pid {pid}) at {url} in {workdir}")
        else:
            url, pid = args.url, args.broker_pid
        out["broker"] = {"url": url, "pid": pid, "started_here": proc is not None}
        http_ = Http(url, args.timeout)
        for name in workloads:
            out[name] = RUN[name](args, url, pid, http_)
            out[name]["loadavg_end"] = os.getloadavg()
        http_.close()
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"the broker exited with {proc.returncode}")
        if workdir is not None:  # a broker that complained is worth a look, whatever the figures
            with open(os.path.join(workdir, "broker.log"), errors="replace") as f:
                bad = [line.rstrip() for line in f if " WARNING " in line or " ERROR " in line
                       or " CRITICAL " in line or line.startswith("Traceback")]
            out["broker_log_problems"] = {"count": len(bad), "first": bad[:10]}
            if bad:
                log(f"the broker logged {len(bad)} warnings or errors, first: {bad[0]}")
    except BenchError as exc:
        log(f"FAILED: {exc}")
        if workdir is not None:
            log("broker log tail:\n" + tail(os.path.join(workdir, "broker.log")))
        return 1
    finally:
        if proc is not None:
            stop_broker(proc)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    out["loadavg_end"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
