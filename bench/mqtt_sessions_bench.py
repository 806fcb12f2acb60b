#!/usr/bin/env python3
"""MQTT persistent sessions under load (issue 30): a reconnecting session's drain, and the
broker's memory with many sessions holding queued messages.

Two workloads, each against a `logbus serve` of its own on loopback (every listener but
MQTT and HTTP off), with paho-mqtt 3.1.1 clients:

    drain    one persistent session (clean session 0) subscribed at QoS 2 and gone; the
             bench publishes --drain-messages QoS 2 messages to it, then the session
             reconnects and takes them all (PUBREC, PUBCOMP). Measured: the drain's msgs/s
             against a live session's (the same client connected while --live-messages
             are published), every message once (missing and duplicates counted), and
             GET /healthz latency sampled every --health-interval-ms throughout the drain
             (p50/p99/max). Targets (issue 30): drain >= live, p99 <= 50 ms.
    memory   --sessions persistent sessions (QoS 1, each on a topic of its own) with
             --per-session queued messages each: broker VmRSS idle, at the peak (after
             publishing; VmHWM too), after every session drained, and --settle s later.
             Targets: peak <= 400 MB; settled within 25% of idle.

The session queue limit (mqtt_max_queued_messages) is raised for the run so nothing is
dropped. Subscribers run in spawned processes (never fork paho's threads), the /healthz
sampler in this one. Every wait has a deadline (--timeout). JSON on stdout, progress on
stderr.

    python bench/mqtt_sessions_bench.py
    python bench/mqtt_sessions_bench.py --workloads drain --drain-messages 20000
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import BenchError, LOOPBACK, distribution_ms, end_process, log_problems, memory, start_logbus, stop_logbus

import paho.mqtt.client as mqtt

HOST = "127.0.0.1"
KEEPALIVE = 600
WORKLOADS = ("drain", "memory")


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def host_port(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


# -- paho, in this process and in the children -----------------------------------------


def connected(port: int, client_id: str, clean: bool, timeout: float, inflight: int = 20,
              on_message: Any = None) -> mqtt.Client:
    """A 3.1.1 client on its own network thread, its CONNACK received."""
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311,
                    clean_session=clean)
    c.max_inflight_messages_set(inflight)
    c.max_queued_messages_set(0)
    if on_message is not None:
        c.on_message = on_message
    acked = threading.Event()
    c.on_connect = lambda *_: acked.set()
    c.connect(HOST, port, KEEPALIVE)
    c.loop_start()
    if not acked.wait(timeout):
        c.loop_stop()
        raise BenchError(f"no CONNACK for {client_id} within {timeout:g} s")
    return c


def subscribed(c: mqtt.Client, topic: str, qos: int, timeout: float) -> None:
    done = threading.Event()
    c.on_subscribe = lambda *_: done.set()
    c.subscribe(topic, qos)
    if not done.wait(timeout):
        raise BenchError(f"no SUBACK for {topic!r} within {timeout:g} s")


def close(c: mqtt.Client) -> None:
    try:
        c.disconnect()
    finally:
        c.loop_stop()


def publish_all(port: int, topics: list[tuple[str, int]], qos: int, size: int, window: int, timeout: float) -> None:
    """Publish ``count`` messages to each (topic, count), payload = its index, padded;
    at most ``window`` unacknowledged; returns when every one is acknowledged."""
    cond = threading.Condition()
    state = {"acked": 0}

    def on_publish(*_: Any) -> None:
        with cond:
            state["acked"] += 1
            cond.notify()

    c = connected(port, f"bench-pub-{os.getpid()}-{time.monotonic_ns()}", True, timeout, inflight=window)
    c.on_publish = on_publish
    sent = 0
    deadline = time.monotonic() + timeout

    def wait(limit: int) -> None:
        with cond:
            while sent - state["acked"] > limit:
                left = deadline - time.monotonic()
                if left <= 0 or not cond.wait(left):
                    raise BenchError(f"{sent - state['acked']} publishes unacknowledged after {timeout:g} s")

    try:
        for topic, count in topics:
            for i in range(count):
                wait(window - 1)
                c.publish(topic, str(i).encode().ljust(size, b"."), qos)
                sent += 1
        wait(0)
    finally:
        close(c)


def receiver_main(spec: dict[str, Any], pipe: Any) -> None:
    """A child: for each client id of ``spec["sessions"]`` in turn, connect its persistent
    session (subscribing first if ``spec["subscribe"]``), take ``spec["expect"]`` distinct
    messages, disconnect. Says ("ready", None) once connected (subscribe runs), then
    ("done", result) or ("error", text)."""
    try:
        port, timeout, qos, expect = spec["port"], spec["timeout"], spec["qos"], spec["expect"]
        results = {"received": 0, "distinct": 0, "duplicates": 0, "seconds": 0.0}
        for cid, topic in spec["sessions"]:
            seen: set[bytes] = set()
            cond = threading.Condition()
            dup = [0]

            def on_message(_c: Any, _u: Any, m: Any, seen: set[bytes] = seen, cond: threading.Condition = cond,
                           dup: list[int] = dup) -> None:
                key = m.payload.split(b".", 1)[0]
                with cond:
                    if key in seen:
                        dup[0] += 1
                    seen.add(key)
                    cond.notify()

            t0 = time.perf_counter()
            c = connected(port, cid, False, timeout, inflight=spec.get("inflight", 20), on_message=on_message)
            if spec.get("subscribe"):
                subscribed(c, topic, qos, timeout)
            if spec.get("tell_ready"):
                pipe.send(("ready", None))
            if expect:
                deadline = time.monotonic() + timeout
                with cond:
                    while len(seen) < expect:
                        left = deadline - time.monotonic()
                        if left <= 0 or not cond.wait(left):
                            raise BenchError(f"{cid}: {len(seen)} of {expect} messages within {timeout:g} s")
            dt = time.perf_counter() - t0
            time.sleep(spec.get("linger", 0))  # duplicates arriving late are counted too
            close(c)
            results["received"] += len(seen) + dup[0]
            results["distinct"] += len(seen)
            results["duplicates"] += dup[0]
            results["seconds"] += dt
        pipe.send(("done", results))
    except Exception as e:  # noqa: BLE001 (said to the parent)
        pipe.send(("error", f"{type(e).__name__}: {e}"))


class Child:
    """A spawned receiver_main, read with a deadline; ended by its handle."""

    def __init__(self, spec: dict[str, Any]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pipe, child_end = ctx.Pipe()
        self.proc = ctx.Process(target=receiver_main, args=(spec, child_end), daemon=True)
        self.proc.start()
        child_end.close()
        self.finished = False

    def expect(self, kind: str, timeout: float) -> Any:
        if not self.pipe.poll(timeout):
            raise BenchError(f"receiver: no {kind!r} within {timeout:g} s")
        what, value = self.pipe.recv()
        if what == "error":
            raise BenchError(f"receiver: {value}")
        if what != kind:
            raise BenchError(f"receiver said {what!r}, expected {kind!r}")
        self.finished = kind == "done"
        return value

    def stop(self) -> None:
        end_process(self.proc, self.finished, 10)


# -- /healthz ---------------------------------------------------------------------------


class HealthSampler:
    """GET /healthz every ``interval`` s on one keep-alive connection, until stopped: each
    answer's latency in ms (a request that fails counts as ``failures``)."""

    def __init__(self, address: str, interval: float) -> None:
        self.host, self.port = host_port(address)
        self.interval = interval
        self.samples: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> HealthSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                conn.request("GET", "/healthz")
                conn.getresponse().read()
                self.samples.append((time.perf_counter() - t0) * 1000)
            except (OSError, http.client.HTTPException):
                self.failures += 1
                conn.close()
                conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
            self._stop.wait(self.interval)
        conn.close()

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(130)
        return {**distribution_ms(self.samples), "failures": self.failures}


# -- workloads --------------------------------------------------------------------------


def drain(a: argparse.Namespace, addresses: dict[str, Any], pid: int) -> dict[str, Any]:
    port = host_port(addresses["mqtt"])[1]
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    topic = f"bench/drain/{tag}"
    cid = f"bench-drain-{tag}"
    spec = {"port": port, "timeout": a.timeout, "qos": 2, "sessions": [(cid, topic)], "subscribe": True,
            "inflight": a.inflight, "linger": 0.5}
    # live: the session connected while the messages are published
    live = Child({**spec, "expect": a.live_messages, "tell_ready": True})
    try:
        live.expect("ready", a.timeout)
        t0 = time.perf_counter()
        publish_all(port, [(topic, a.live_messages)], 2, a.size, a.window, a.timeout)
        got = live.expect("done", a.timeout)
        live_s = time.perf_counter() - t0
    finally:
        live.stop()
    log(f"drain: live session {a.live_messages} msgs in {live_s:.1f} s")
    # queued: the session gone, the messages published, then the reconnect
    t0 = time.perf_counter()
    publish_all(port, [(topic, a.drain_messages)], 2, a.size, a.window, a.timeout)
    publish_s = time.perf_counter() - t0
    log(f"drain: {a.drain_messages} queued in {publish_s:.1f} s; reconnecting")
    sampler = HealthSampler(addresses["http"], a.health_interval_ms / 1000).start()
    rss_before = memory(pid)
    back = Child({**spec, "expect": a.drain_messages, "subscribe": False})
    try:
        drained = back.expect("done", a.timeout)
    finally:
        back.stop()
        health = sampler.stop()
    drain_s = drained["seconds"]
    out = {
        "live": {"messages": a.live_messages, "seconds": live_s, "msgs_per_s": a.live_messages / live_s,
                 "duplicates": got["duplicates"], "missing": a.live_messages - got["distinct"]},
        "queued": {"messages": a.drain_messages, "publish_seconds": publish_s},
        "drain": {"messages": a.drain_messages, "seconds": drain_s, "msgs_per_s": a.drain_messages / drain_s,
                  "duplicates": drained["duplicates"], "missing": a.drain_messages - drained["distinct"]},
        "healthz": health,
        "rss_before_drain": rss_before, "rss_after_drain": memory(pid),
    }
    out["drain_over_live"] = out["drain"]["msgs_per_s"] / out["live"]["msgs_per_s"]
    out["targets"] = {"drain_at_least_live": out["drain_over_live"] >= 1.0,
                      "healthz_p99_le_50ms": health["p99_ms"] <= 50}
    log(f"drain: {drain_s:.1f} s ({out['drain']['msgs_per_s']:.0f} msgs/s, live {out['live']['msgs_per_s']:.0f}); "
        f"/healthz p50 {health['p50_ms']:.1f} p99 {health['p99_ms']:.1f} max {health['max_ms']:.1f} ms")
    return out


def state_memtables_mb(addresses: dict[str, Any]) -> float | None:
    """The broker's logbus_state_memtable_bytes (RocksDB's memtables), in MB."""
    host, port = host_port(addresses["http"])
    try:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("logbus_state_memtable_bytes "):
            return round(float(line.split()[1]) / 1e6, 1)
    return None


def memory_workload(a: argparse.Namespace, addresses: dict[str, Any], pid: int) -> dict[str, Any]:
    port = host_port(addresses["mqtt"])[1]
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    sessions = [(f"bench-mem-{tag}-{i}", f"bench/mem/{tag}/{i}") for i in range(a.sessions)]
    idle = memory(pid)
    spec = {"port": port, "timeout": a.timeout, "qos": 1, "subscribe": True, "expect": 0}
    parts = [sessions[i::a.processes] for i in range(a.processes)]
    children = [Child({**spec, "sessions": part}) for part in parts if part]
    try:
        for c in children:
            c.expect("done", a.timeout)
    finally:
        for c in children:
            c.stop()
    log(f"memory: {a.sessions} sessions subscribed; publishing {a.sessions * a.per_session} messages")
    t0 = time.perf_counter()
    publish_all(port, [(topic, a.per_session) for _, topic in sessions], 1, a.size, a.window, a.timeout)
    publish_s = time.perf_counter() - t0
    peak = memory(pid)
    log(f"memory: published in {publish_s:.1f} s; RSS {peak.get('vmrss_mb')} MB; draining")
    t0 = time.perf_counter()
    children = [Child({**spec, "sessions": part, "subscribe": False, "expect": a.per_session}) for part in parts if part]
    received = {"distinct": 0, "duplicates": 0}
    try:
        for c in children:
            r = c.expect("done", a.timeout)
            received["distinct"] += r["distinct"]
            received["duplicates"] += r["duplicates"]
    finally:
        for c in children:
            c.stop()
    drain_s = time.perf_counter() - t0
    drained = memory(pid)
    log(f"memory: drained in {drain_s:.1f} s; RSS {drained.get('vmrss_mb')} MB; settling {a.settle:g} s")
    time.sleep(a.settle)
    settled = memory(pid)
    out = {
        "sessions": a.sessions, "per_session": a.per_session, "messages": a.sessions * a.per_session,
        "publish_seconds": publish_s, "drain_seconds": drain_s,
        "missing": a.sessions * a.per_session - received["distinct"], "duplicates": received["duplicates"],
        "idle": idle, "peak": peak, "drained": drained, "settled": settled, "settle_seconds": a.settle,
        "state_memtables_mb_settled": state_memtables_mb(addresses),
    }
    out["targets"] = {
        "peak_rss_le_400mb": max(peak["vmrss_mb"], drained.get("vmhwm_mb", 0)) <= 400,
        "settled_within_25pct_of_idle": settled["vmrss_mb"] <= idle["vmrss_mb"] * 1.25,
    }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: drain,memory")
    ap.add_argument("--drain-messages", type=int, default=100_000, help="QoS 2 messages queued for the drain")
    ap.add_argument("--live-messages", type=int, default=20_000, help="QoS 2 messages to the live session")
    ap.add_argument("--sessions", type=int, default=1000, help="persistent sessions (memory)")
    ap.add_argument("--per-session", type=int, default=1000, help="QoS 1 messages queued per session (memory)")
    ap.add_argument("--processes", type=int, default=4, help="receiver processes (memory)")
    ap.add_argument("--size", type=int, default=100, help="payload bytes")
    ap.add_argument("--window", type=int, default=500, help="publishes unacknowledged at most")
    ap.add_argument("--inflight", type=int, default=20, help="a receiving paho client's max in flight")
    ap.add_argument("--health-interval-ms", type=float, default=10.0, help="between /healthz requests")
    ap.add_argument("--settle", type=float, default=60.0, help="seconds after the drain before the last RSS")
    ap.add_argument("--timeout", type=float, default=600.0, help="deadline of every wait, seconds")
    a = ap.parse_args()
    workloads = [w for w in a.workloads.split(",") if w]
    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        ap.error(f"unknown workloads {sorted(unknown)}")
    out: dict[str, Any] = {"bench": "mqtt_sessions_bench", "args": vars(a),
                           "broker": {"started_here": True, "listeners": ["mqtt", "http"]}}
    queued_limit = str(max(a.drain_messages + a.live_messages, a.per_session) + 1000)
    for w in workloads:
        workdir = tempfile.mkdtemp(prefix=f"mqtt-sessions-{w}-")
        proc = None
        try:
            proc, addresses = start_logbus(workdir, {"mqtt": LOOPBACK, "http": LOOPBACK},
                                           ["--mqtt-max-queued-messages", queued_limit], timeout=60)
            log(f"{w}: logbus pid {proc.pid}")
            out[w] = (drain if w == "drain" else memory_workload)(a, addresses, proc.pid)
        except BenchError as e:
            out[w] = {"error": str(e)}
            log(f"{w}: {e}")
        finally:
            if proc is not None:
                stop_logbus(proc)
            out.setdefault("broker_log_problems", {})[w] = log_problems(os.path.join(workdir, "broker.log"))
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(out, indent=2))
    return 1 if any(isinstance(out.get(w), dict) and "error" in out[w] for w in workloads) else 0


if __name__ == "__main__":
    sys.exit(main())
