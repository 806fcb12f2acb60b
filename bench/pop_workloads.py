"""The three workloads of bench/pop_bench.py: pop, delay and rss (its docstring says what
each measures). Each takes the parsed arguments, the broker's URL and pid and an Http
connection, and returns its figures as a dict for the output JSON; publish_all is the
publishing phase they share, Sampler and release_figures the delay workload's view of
the release.
"""

from __future__ import annotations

import argparse
import math
import os
import threading
import time
from typing import Any

from common import BenchError, distribution_ms, memory
from pop_client import Clients, CpuMeter, Http, log, pop_path

# -- what the workloads share ----------------------------------------------------------


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
        if g["pop_group"] == group and g["topic"] == topic:
            return g["ready"], g["invisible"]
    raise BenchError(f"GET /api/pop does not list group {group!r} on {topic!r}")


def check_exactly_once(seen: list[int], count: int, what: str) -> None:
    distinct = len(set(seen))
    if len(seen) != count or distinct != count:
        raise BenchError(f"{what}: {count} published, {len(seen)} received, {distinct} distinct "
                         f"({len(seen) - distinct} duplicates, {count - distinct} lost)")


# -- workloads -------------------------------------------------------------------------


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
        self.url, self.timeout = url, timeout
        self.group, self.topic, self.interval = group, topic, interval
        self.count, self.deadline = count, time.monotonic() + timeout
        self.samples: list[tuple[float, int]] = []
        self.stopping = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        # connected when sampling starts: a connection idle past the broker's
        # handshake_timeout_ms, while the bench waits for the due time, is closed
        http_ = None
        try:
            http_ = Http(self.url, self.timeout)
            while not self.stopping.is_set():
                t0 = time.time()
                ready, invisible = group_counts(http_, self.group, self.topic)
                t1 = time.time()
                self.samples.append((t1 * 1000, ready + invisible))  # released by then at the latest
                if ready + invisible >= self.count or time.monotonic() > self.deadline:
                    break
                self.stopping.wait(max(0.0, self.interval - (t1 - t0)))
        except Exception as exc:  # reported by the workload
            self.error = exc
        finally:
            if http_ is not None:
                http_.close()


def release_lateness(samples: list[tuple[float, int]], count: int, due_ms: int, spread_ms: int) -> list[float]:
    """The release lateness of every message, in due order: the k-th message (1-based) is
    due at ``due_ms + (k - 1) * spread_ms // count`` and counts as released at the first
    sample (time ms, released so far) showing at least k released; messages no sample
    shows released are left out. One pass over both series."""
    out: list[float] = []
    k = 1
    for t, released in samples:
        while k <= min(released, count):
            out.append(t - (due_ms + ((k - 1) * spread_ms) // count))
            k += 1
    return out


def quantile_of_all(late: list[float], count: int, q: float) -> float | None:
    """Nearest-rank quantile ``q`` of the lateness of all ``count`` messages, of which
    ``late`` holds those seen released (the others are later than any of them): None
    when it falls among the unseen."""
    k = max(1, math.ceil(q * count))
    return sorted(late)[k - 1] if k <= len(late) else None


LATENESS = "logbus_release_lateness_seconds_bucket"


def lateness_buckets(http_: Http) -> dict[float, float]:
    """The broker's release lateness histogram (cumulative count per upper bound, s)."""
    out: dict[float, float] = {}
    for line in http_.raw("GET", "/metrics").decode().splitlines():
        if line.startswith(LATENESS + "{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[math.inf if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def broker_release_figures(before: dict[float, float], after: dict[float, float]) -> dict[str, Any]:
    """p50/p90/p99/max of the release lateness as the broker counted it (now minus the
    due time when each staged entry became ready) between two scrapes: each the upper
    bound of the first bucket holding that share of the entries (ms; None past the
    last finite bound), so an upper bound at the buckets' resolution."""
    bounds = sorted(after)
    cumulative = [after[b] - before.get(b, 0.0) for b in bounds]
    count = cumulative[-1] if cumulative else 0.0
    out: dict[str, Any] = {"count": count}
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)):
        k = max(1.0, math.ceil(q * count))
        bound = next((b for b, c in zip(bounds, cumulative) if c >= k), math.inf) if count else math.inf
        out[f"{name}_ms"] = None if bound == math.inf else bound * 1000
    return out


def release_figures(samples: list[tuple[float, int]], count: int, due_ms: int, spread_ms: int) -> dict[str, Any]:
    """From the sampler's (time, released) series: the release lateness over every
    message (``release_lateness``: p50, p90, p99, max; each an upper bound by the sample
    interval), and the release rate."""
    late = release_lateness(samples, count, due_ms, spread_ms)
    out: dict[str, Any] = {f"{name}_ms": quantile_of_all(late, count, q)
                           for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))}
    out["released_seen"] = len(late)

    def released_at(k: int) -> float | None:
        for t, r in samples:
            if r >= k:
                return t
        return None

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
    lateness_before = lateness_buckets(http_)
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
    # the same, as the broker counted it: no sampler waiting its turn behind receives
    out["released_broker"] = broker_release_figures(lateness_before, lateness_buckets(http_))
    rel = out["released"]
    rel_p99 = "?" if rel["p99_ms"] is None else f"{rel['p99_ms']:.1f}"
    if not results:  # release only: nobody receives
        ready, invisible = group_counts(http_, args.group, topic)
        if ready != count or invisible:
            raise BenchError(f"delay: {count} due, the group has {ready} ready and {invisible} invisible")
        out["release_only"] = {**cpu, "left_ready": ready}
        log(f"delay (release only): released p99 <= {rel_p99} ms (broker: <= "
            f"{out['released_broker']['p99_ms']} ms), {rel.get('released_per_s', 0):,.0f} msg/s, "
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
        f"after due; released p99 <= {rel_p99} ms (broker: <= {out['released_broker']['p99_ms']} ms), "
        f"{rel.get('released_per_s', 0):,.0f} msg/s")
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
