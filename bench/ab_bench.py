#!/usr/bin/env python3
"""Broker CPU per message of two builds of logbus, finely interleaved: A/B of a change.

This machine's speed drifts by a quarter within minutes, so two runs of a whole bench
minutes apart differ by more than most changes cost. Here both builds run side by side
(two `logbus serve`, each from its own source tree on PYTHONPATH, AMQP and MQTT on),
and each round runs every workload once on each, in an order that alternates, with
bursts of a few seconds: what drifts between bursts of one round is small. Per workload
it prints each build's median broker CPU per message and the median of the per-round
ratios B/A, which cancels the drift the two share.

Besides the workloads' own figures (CPU within each measured span), each build's whole
turn of a round is metered from its first burst until the broker is idle again: set-up,
pre-fill and work a broker defers (the key index pass runs when the reactor is idle) all
fall in it, so "turn" is the figure that cannot miss deferred work. `--pin` puts both
brokers (every thread) on CPU 1 and the clients on CPU 0, so a build's bursts do not
depend on which core the scheduler chose.

Workloads: the AMQP ones of bench/amqp_bench.py (run as `amqp_bench.py --url ...
--broker-pid ...` against the build's broker) and the MQTT ones of
bench/mqtt_workloads.py (called with the build's port and pid), with their own flags.

    python bench/ab_bench.py --a /work/base --b . --rounds 10
    python bench/ab_bench.py --a /work/base --b . --amqp publish,fanout --mqtt qos0 --messages 20000

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import BenchError, cpu_split, start_logbus, stop_logbus  # noqa: E402
import mqtt_bench  # noqa: E402
from mqtt_workloads import WORKLOADS as MQTT_WORKLOADS  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LOOPBACK = "tcp:0:interface=127.0.0.1"


def log(text: str) -> None:
    print(f"ab_bench: {text}", file=sys.stderr, flush=True)


def start(tree: str, workdir: str) -> tuple[Any, dict[str, Any]]:
    """`logbus serve` of the source tree ``tree`` (its package first on PYTHONPATH)."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.path.abspath(tree)
    here = os.getcwd()
    # `python -m logbus` puts its working directory first on sys.path, before PYTHONPATH:
    # started from the other build's tree (`--b .`), it would import that build
    os.chdir(tree)
    try:
        # as mqtt_bench.py: no session queue limit (a subscriber a burst outruns would
        # lose what passed the limit, as under Mosquitto's max_queued_messages)
        return start_logbus(workdir, {"amqp": LOOPBACK, "mqtt": LOOPBACK}, ["--mqtt-max-queued-messages", "0"])
    finally:
        os.chdir(here)
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old


def amqp_burst(args: argparse.Namespace, address: str, pid: int) -> dict[str, float]:
    cmd = [sys.executable, os.path.join(HERE, "amqp_bench.py"), "--url", f"amqp://guest:guest@{address}/",
           "--broker-pid", str(pid), "--workloads", args.amqp, "--messages", str(args.messages),
           "--fanout-messages", str(args.fanout_messages), "--latency-rate", str(args.latency_rate),
           "--latency-seconds", str(args.latency_seconds)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if out.returncode != 0:
        raise BenchError(f"amqp_bench failed: {out.stderr[-2000:]}")
    doc = json.loads(out.stdout)
    results: dict[str, float] = {}
    for name, res in _workload_results(doc).items():
        cpu = next((v for k, v in res.items() if k.startswith("broker_cpu_us_per_")), None)
        if cpu is None:
            raise BenchError(f"amqp {name}: no broker CPU figure in {res}")
        results[f"amqp {name}"] = cpu
        lat = res.get("latency")
        if isinstance(lat, dict):  # its quantiles too (a ratio per round like the CPU's)
            results[f"amqp {name} p50 ms"] = lat["p50_ms"]
            results[f"amqp {name} p99 ms"] = lat["p99_ms"]
    return results


def _workload_results(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The per-workload results of an amqp_bench document against one broker."""
    for key in ("external", "logbus"):
        part = doc.get(key)
        if isinstance(part, dict) and any(isinstance(v, dict) for v in part.values()):
            return {k: v for k, v in part.items() if isinstance(v, dict) and any(
                    n.startswith("broker_cpu_us_per_") for n in v)}
    found: dict[str, dict[str, Any]] = {}

    def walk(o: Any, name: str) -> None:
        if isinstance(o, dict):
            if any(k.startswith("broker_cpu_us_per_") for k in o):
                found[name] = o
                return
            for k, v in o.items():
                walk(v, k)

    walk(doc, "")
    return found


def mqtt_burst(args: argparse.Namespace, margs: argparse.Namespace, port: int, pid: int) -> dict[str, float]:
    results: dict[str, float] = {}
    for name in margs.workloads:
        res = dict(MQTT_WORKLOADS[name](margs, port, pid))
        cpu = next((v for k, v in res.items() if k.startswith("broker_cpu_us_per_")), None)
        if cpu is None:
            raise BenchError(f"mqtt {name}: {res}")
        results[f"mqtt {name}"] = cpu
    return results


def pin(pid: int, cpu: int) -> None:
    """Every thread of ``pid`` on ``cpu`` (threads started later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), {cpu})


def quiesce(pid: int, quiet: float = 0.002, step: float = 0.25, limit: float = 30.0) -> float:
    """Wait until ``pid`` spends less than ``quiet`` CPU seconds in ``step`` seconds (its
    deferred work done); the seconds waited."""
    t0 = time.monotonic()
    last = sum(cpu_split(pid))
    while time.monotonic() - t0 < limit:
        time.sleep(step)
        now = sum(cpu_split(pid))
        if now - last < quiet:
            break
        last = now
    return time.monotonic() - t0


def geomean(ratios: list[float]) -> dict[str, float]:
    """Geometric mean of ``ratios`` and its 95% interval (normal on the log ratios)."""
    logs = [math.log(x) for x in ratios]
    mean = statistics.fmean(logs)
    half = 1.96 * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else float("inf")
    return {"geomean_ratio": round(math.exp(mean), 4), "geomean_low": round(math.exp(mean - half), 4),
            "geomean_high": round(math.exp(mean + half), 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, metavar="TREE", help="source tree of build A (the baseline)")
    ap.add_argument("--b", required=True, metavar="TREE", help="source tree of build B (the change)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--amqp", default="publish,consume,fanout", help="amqp_bench workloads ('' for none)")
    ap.add_argument("--mqtt", default="qos0,qos1,fanout", help="mqtt_bench workloads ('' for none)")
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--fanout-messages", type=int, default=5_000)
    ap.add_argument("--latency-rate", type=float, default=2000.0, help="amqp_bench's, for its latency workload")
    ap.add_argument("--latency-seconds", type=float, default=10.0, help="amqp_bench's, for its latency workload")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one burst may take")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="mqtt_bench's --settle: seconds without a delivery before a subscriber stops")
    ap.add_argument("--pin", action="store_true", help="brokers on CPU 1, clients on CPU 0")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    margs = mqtt_bench.parse_args(["--target", "logbus", "--workloads", args.mqtt or "qos0",
                                   "--messages", str(args.messages), "--fanout-messages", str(args.fanout_messages),
                                   "--settle", str(args.settle)])
    if not args.mqtt:
        margs.workloads = []
    builds = {"a": args.a, "b": args.b}
    dirs = {k: tempfile.mkdtemp(prefix=f"ab-{k}-") for k in builds}
    procs: dict[str, Any] = {}
    figures: dict[str, dict[str, list[float]]] = {"a": {}, "b": {}}
    ratios: dict[str, list[float]] = {}
    try:
        addresses = {}
        for k, tree in builds.items():
            procs[k], addresses[k] = start(tree, dirs[k])
            log(f"build {k} ({tree}): pid {procs[k].pid}, {addresses[k]}")
        if args.pin:
            if (os.cpu_count() or 1) < 2:
                ap.error("--pin needs two CPUs")
            os.sched_setaffinity(0, {0})
            for p in procs.values():
                pin(p.pid, 1)
        for p in procs.values():
            quiesce(p.pid)
        counted = r = 0
        while counted < args.rounds:
            if r >= 3 * args.rounds:
                raise BenchError(f"{r} rounds, {counted} with a CPU figure on every workload: "
                                 "give the workloads more messages")
            order = ["a", "b"] if r % 2 == 0 else ["b", "a"]
            r += 1
            got: dict[str, dict[str, float]] = {}
            for k in order:
                pid = procs[k].pid
                log(f"round {r}: build {k}")
                got[k] = {}
                c0 = sum(cpu_split(pid))
                if args.amqp:
                    got[k].update(amqp_burst(args, addresses[k]["amqp"], pid))
                if margs.workloads:
                    got[k].update(mqtt_burst(args, margs, int(addresses[k]["mqtt"].rsplit(":", 1)[1]), pid))
                quiesce(pid)
                got[k]["turn"] = (sum(cpu_split(pid)) - c0) * 1e3  # ms of CPU, the same work on both
            if any(v <= 0 for build in got.values() for v in build.values()):
                # CPU is read in clock ticks (10 ms): a short burst on a busy machine may read 0,
                # which makes no ratio; such a round is not counted (and another is run)
                log(f"round {r}: a workload measured no CPU tick; not counted")
                continue
            counted += 1
            for name in got["a"]:
                figures["a"].setdefault(name, []).append(got["a"][name])
                figures["b"].setdefault(name, []).append(got["b"][name])
                ratios.setdefault(name, []).append(got["b"][name] / got["a"][name])
            log(f"round {r}: " + ", ".join(f"{n} {got['a'][n]:.1f}/{got['b'][n]:.1f}" for n in got["a"]))
    finally:
        for p in procs.values():
            stop_logbus(p)
        for d in dirs.values():
            shutil.rmtree(d, ignore_errors=True)
    summary = {name: {"a_median": round(statistics.median(figures["a"][name]), 2),
                      "b_median": round(statistics.median(figures["b"][name]), 2),
                      "median_ratio_b_over_a": round(statistics.median(ratios[name]), 4),
                      **geomean(ratios[name]),
                      "ratios": [round(x, 3) for x in ratios[name]]}
               for name in ratios}
    # each bench's workloads together: per round, the geometric mean of their ratios
    benches = {}
    for bench in ("amqp", "mqtt"):
        names = [n for n in ratios if n.startswith(bench + " ")]
        if names:
            per_round = [math.exp(statistics.fmean(math.log(ratios[n][i]) for n in names))
                         for i in range(len(ratios[names[0]]))]
            benches[bench] = {"workloads": names, **geomean(per_round)}
    print(json.dumps({"bench": "ab_bench", "args": vars(args), "builds": builds, "summary": summary,
                      "benches": benches,
                      "rounds": {k: v for k, v in figures.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
