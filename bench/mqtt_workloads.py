"""The workloads of bench/mqtt_bench.py, each against one broker (``port``, ``pid``) and
returning its figures as a dict for the output JSON:

    qos0, qos1   1 -> 1: --messages payloads of --size bytes at that QoS, one publisher
                 (this process), one subscriber (a process of its own) at the same QoS;
                 msgs/s from the first publish to the last delivery, broker CPU us per
                 delivered message; QoS 0 may lose messages (counted), QoS 1 must not
    fanout       1 -> --fanout-subscribers at QoS 0, all on one wildcard filter
                 (bench/<run>/fan/+); --fanout-messages; deliveries/s and broker CPU us
                 per delivery; the subscribers spread over --fanout-processes processes
    latency      QoS 1 publisher and subscriber, --latency-rate msg/s paced without drift
                 for --latency-warmup (not counted) + --latency-seconds; the payload
                 carries the monotonic send time; p50/p90/p99/max in ms
    idle         --idle-connections connections, CONNECT/CONNACK and then nothing, from
                 --idle-processes processes; broker RSS after minus before, per connection
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import mqtt_raw
from common import LATENCY_HEAD, BenchError, Meter, distribution_ms, memory, slowest
from mqtt_client import ClientProcess, Publisher, idle_main, subscriber_main


def topic_root() -> str:
    return f"bench/{os.getpid()}-{os.urandom(3).hex()}"


def subscribers(a: argparse.Namespace, port: int, topic_filter: str, qos: int, clients: int,
                processes: int, expected: int, latency_warmup: int | None = None,
                timeout: float | None = None, target: Any = subscriber_main) -> list[ClientProcess]:
    """``clients`` subscribers spread over ``processes`` processes, all ready (SUBACK)."""
    procs: list[ClientProcess] = []
    per = [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]
    try:
        for n in per:
            if n:
                procs.append(ClientProcess(target, {
                    "port": port, "filter": topic_filter, "qos": qos, "clients": n,
                    "expected": expected, "latency_warmup": latency_warmup,
                    "timeout": timeout or a.timeout, "settle": a.settle}))
        for p in procs:
            p.expect("ready", a.timeout)
    except BaseException:
        for p in procs:
            p.stop()
        raise
    return procs


def finish(procs: list[ClientProcess], timeout: float) -> list[dict[str, Any]]:
    for p in procs:
        p.send("published")
    return [p.expect("done", timeout) for p in procs]


def one_to_many(a: argparse.Namespace, port: int, pid: int, qos: int, messages: int,
                clients: int, processes: int) -> dict[str, Any]:
    root = topic_root()
    topic = f"{root}/fan/a" if clients > 1 else f"{root}/one"
    topic_filter = f"{root}/fan/+" if clients > 1 else topic
    procs = subscribers(a, port, topic_filter, qos, clients, processes, messages)
    pub = None
    try:
        pub = Publisher(port, qos, a.window, a.timeout)
        payload = os.urandom(a.size)
        meter = Meter(pid)
        t0 = time.monotonic_ns()
        for _ in range(messages):
            pub.publish(topic, payload)
        pub.drain()
        published = (time.monotonic_ns() - t0) / 1e9
        results = finish(procs, a.timeout + a.settle)
    finally:
        if pub is not None:
            pub.close()
        for p in procs:
            p.stop()
    delivered = sum(sum(r["counts"]) for r in results)
    last = max(r["last_ns"] for r in results)
    unit, plural = ("delivery", "deliveries") if clients > 1 else ("msg", "msgs")
    out = meter.stop(delivered, unit, plural, child_cpu=sum(r["cpu"] for r in results),
                     seconds=max(last - t0, 1) / 1e9)
    expected = messages * clients
    out.update({"qos": qos, "messages": messages, "subscribers": clients, "size": a.size,
                "expected_deliveries": expected, "lost": expected - delivered,
                "publish_seconds": published, "published_msgs_per_s": messages / published})
    if qos > 0 and delivered != expected:
        raise BenchError(f"QoS {qos}: {delivered} of {expected} delivered")
    return out


def w_qos(a: argparse.Namespace, port: int, pid: int, qos: int) -> dict[str, Any]:
    return one_to_many(a, port, pid, qos, a.messages, 1, 1)


def w_fanout(a: argparse.Namespace, port: int, pid: int) -> dict[str, Any]:
    return one_to_many(a, port, pid, 0, a.fanout_messages, a.fanout_subscribers,
                       min(a.fanout_processes, a.fanout_subscribers))


def w_latency(a: argparse.Namespace, port: int, pid: int) -> dict[str, Any]:
    rate = a.latency_rate
    warmup = round(rate * a.latency_warmup)
    total = warmup + round(rate * a.latency_seconds)
    if total == warmup:
        raise BenchError("nothing to measure (--latency-rate x --latency-seconds < 1)")
    topic = f"{topic_root()}/latency"
    paced = a.latency_warmup + a.latency_seconds
    raw = a.latency_client == "raw"  # bench/mqtt_raw.py at both ends: the broker is what is measured
    procs = subscribers(a, port, topic, 1, 1, 1, total, latency_warmup=warmup,
                        timeout=a.timeout + paced, target=mqtt_raw.subscriber_main if raw else subscriber_main)
    pub: Publisher | mqtt_raw.RawPublisher | None = None
    pad = bytes(max(0, a.size - LATENCY_HEAD.size))
    lag_max = 0
    try:
        pub = mqtt_raw.RawPublisher(port, a.window, a.timeout) if raw else Publisher(port, 1, a.window, a.timeout)
        meter = Meter(pid)
        # Paced without drift: message i is due at t0 + i/rate; after each wake-up every
        # message already due is sent, then we sleep until the next one is due.
        t0 = time.monotonic_ns()
        period_ns = 1e9 / rate
        sent = 0
        while sent < total:
            due_now = min(total, int((time.monotonic_ns() - t0) / period_ns) + 1)
            while sent < due_now:
                due = t0 + round(sent * period_ns)
                stamp = time.monotonic_ns()
                lag_max = max(lag_max, stamp - due)
                pub.publish(topic, LATENCY_HEAD.pack(sent, due, stamp) + pad)
                sent += 1
            if sent < total:
                time.sleep(max(0.0, (t0 + sent * period_ns - time.monotonic_ns()) / 1e9))
        send_seconds = (time.monotonic_ns() - t0) / 1e9
        pub.drain()
        (result,) = finish(procs, a.timeout + a.settle)
    finally:
        if pub is not None:
            pub.close()
        for p in procs:
            p.stop()
    if result["counts"][0] != total:
        raise BenchError(f"QoS 1: {result['counts'][0]} of {total} delivered")
    if result["duplicates"]:
        raise BenchError(f"{result['duplicates']} messages received twice")
    cpu = meter.stop(total, "msg", "msgs", child_cpu=result["cpu"])
    achieved = total / send_seconds
    return {
        "client": a.latency_client, "qos": 1, "rate_per_s": rate, "seconds": a.latency_seconds,
        "warmup_seconds": a.latency_warmup, "measured_messages": len(result["latencies"]),
        "achieved_send_rate_per_s": achieved, "rate_kept": achieved >= 0.99 * rate,
        "latency": distribution_ms([v / 1e6 for v in result["latencies"]]),
        # from the time each message was due: adds whatever the sender fell behind
        "latency_from_schedule": distribution_ms([v / 1e6 for v in result["from_schedule"]]),
        "sender_max_lag_ms": lag_max / 1e6,
        "slowest": slowest(result["latencies"], result["received"]),
        "broker_cpu_us_per_msg": cpu["broker_cpu_us_per_msg"],
        "client_cpu_us_per_msg": cpu["client_cpu_us_per_msg"],
    }


def w_idle(a: argparse.Namespace, port: int, pid: int) -> dict[str, Any]:
    n, procs_n = a.idle_connections, min(a.idle_processes, a.idle_connections)
    time.sleep(a.settle)
    before = memory(pid)
    per = [n // procs_n + (1 if i < n % procs_n else 0) for i in range(procs_n)]
    procs: list[ClientProcess] = []
    try:
        for count in per:
            procs.append(ClientProcess(idle_main, {"port": port, "count": count,
                                                   "batch": a.idle_batch, "timeout": a.timeout,
                                                   "hold": a.settle + 5}))
        ready = [p.expect("ready", a.timeout + 10) for p in procs]
        time.sleep(a.settle)  # let the broker finish whatever each connection set off
        after = memory(pid)
        for p in procs:
            p.send("close")
        closed = [p.expect("done", a.timeout + 5) for p in procs]
    finally:
        for p in procs:
            p.stop()
    connected = sum(r["connected"] for r in ready)
    connect_seconds = max(r["seconds"] for r in ready)  # in the children, spawning not counted
    growth_mb = after["vmrss_mb"] - before["vmrss_mb"]
    return {
        "connections": connected, "client_processes": len(procs),
        "client_nofile_soft": min(r["nofile_soft"] for r in ready),
        "connect_seconds": connect_seconds, "connections_per_s": connected / connect_seconds,
        "rss_before_mb": before["vmrss_mb"], "rss_after_mb": after["vmrss_mb"],
        "rss_growth_mb": growth_mb,
        "rss_kib_per_connection": growth_mb * 1e6 / 1024 / connected,
        "hwm_after_mb": after.get("vmhwm_mb"),
        "closed_by_broker_after_disconnect": sum(c["closed_by_broker"] for c in closed),
    }


WORKLOADS = {
    "qos0": lambda a, port, pid: w_qos(a, port, pid, 0),
    "qos1": lambda a, port, pid: w_qos(a, port, pid, 1),
    "fanout": w_fanout,
    "latency": w_latency,
    "idle": w_idle,
}
