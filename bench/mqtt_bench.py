#!/usr/bin/env python3
"""MQTT 3.1.1 throughput, broker CPU, latency and memory per connection with paho-mqtt:
logbus vs Mosquitto and amqtt (issue 17).

Five workloads against each broker (bench/mqtt_workloads.py has the details):

    qos0, qos1   1 -> 1, --messages payloads of --size bytes; msgs/s, broker CPU us/msg
    fanout       QoS 0, 1 -> --fanout-subscribers on one wildcard filter; per delivery
    latency      QoS 1 at --latency-rate msg/s, send time in the payload, warm-up not
                 counted; p50/p90/p99/max ms. Both ends are bench/mqtt_raw.py (a blocking
                 socket, packets by hand, about 130 µs of client CPU per message);
                 --latency-client paho uses paho's clients, about 360 µs (decision 0029)
    idle         --idle-connections idle connections; broker RSS (after - before) / N

Brokers, each started here on 127.0.0.1 and a free port and stopped by the pid we
started (bench/mqtt_peers.py for the peers):

    logbus      `logbus serve --mqtt tcp:PORT:interface=127.0.0.1`, every other listener
                off. Until the MQTT gateway is built nothing answers there: that is
                detected (an MQTT CONNECT not answered with a CONNACK) and reported as
                "logbus": {"error": "no MQTT gateway"}, and the peers are measured anyway
    mosquitto   Debian's mosquitto with a config of ours (mqtt_peers.Mosquitto)
    amqtt       amqtt's broker from PyPI with a config of ours (mqtt_peers.Amqtt)

Broker CPU is user+system from /proc/<pid>/stat over each measured span; the client
processes' CPU (getrusage) is reported too: a Python client costs about as much per
message as a broker, so on a small machine msg/s is bounded by the client and CPU per
message is the figure that compares brokers. All the brokers chosen are up at once and
each round runs every workload on each of them, the order rotated by one each round,
so a slow phase of the machine falls on all; the JSON has every round, the median of
each figure and the median over rounds of logbus/peer. Every wait has a deadline
(--timeout). JSON on stdout, progress on stderr.

    python bench/mqtt_bench.py --target all --rounds 3
    python bench/mqtt_bench.py --target mosquitto --workloads qos0,qos1 --messages 5000

This file is the command line and the orchestration; bench/mqtt_workloads.py has the
workloads, bench/mqtt_client.py the paho plumbing and client processes,
bench/mqtt_peers.py the peer brokers, bench/common.py what the bench scripts share.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LATENCY_HEAD, BenchError, free_ports, start_logbus, stop_logbus
from mqtt_client import raise_nofile
from mqtt_peers import PEERS, mqtt_answers
from mqtt_workloads import WORKLOADS

TARGETS = ("logbus", "mosquitto", "amqtt")
PEER_NAMES = ("mosquitto", "amqtt")
NO_GATEWAY = "no MQTT gateway"
METHOD = {
    "protocol": "MQTT 3.1.1, clean sessions, keep-alive 600 s, no retain, one topic per "
                "workload run (bench/<pid>-<random>/...)",
    "publisher": "one paho-mqtt client in the bench process; at most --window messages "
                 "outstanding (QoS 1: not yet PUBACKed; QoS 0: not yet written)",
    "subscribers": "paho-mqtt clients in spawned processes (fan-out: --fanout-processes), "
                   "each on its own network thread, at the workload's QoS",
    "rates": "from the first publish to the last delivery; QoS 0 losses counted, not "
             "retried; QoS 1 must deliver every message",
    "idle": "paho-mqtt clients without a network thread, --idle-processes processes; "
            "broker VmRSS after all CONNACKs and --settle s, minus VmRSS before",
    "cpu": "broker: /proc/<pid>/stat utime+stime; client: getrusage of the bench process "
           "and of the subscriber processes",
    "order": "all brokers up at once; per round, each workload on each broker in turn, the "
             "order rotated by one each round",
}
RATIO_KEYS = {
    "qos0": ["msgs_per_s", "broker_cpu_us_per_msg"],
    "qos1": ["msgs_per_s", "broker_cpu_us_per_msg"],
    "fanout": ["deliveries_per_s", "broker_cpu_us_per_delivery"],
    "latency": ["p50_ms", "p99_ms", "max_ms", "broker_cpu_us_per_msg"],
    "idle": ["rss_kib_per_connection"],
}


def log(text: str) -> None:
    print(f"mqtt_bench: {text}", file=sys.stderr, flush=True)


# -- figures -------------------------------------------------------------------------


def headline(name: str, r: dict[str, Any]) -> dict[str, Any]:
    """The figures of RATIO_KEYS for one workload's result (latency's from its distribution)."""
    flat = {**r, **r["latency"]} if name == "latency" else r
    return {k: flat.get(k) for k in RATIO_KEYS[name]}


def summary(name: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"ERROR {r['error']}"
    if name == "latency":
        lat = r["latency"]
        return (f"p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f}, max {lat['max_ms']:.2f}, "
                f"sent {r['achieved_send_rate_per_s']:,.0f}/s"
                f"{'' if r['rate_kept'] else ' (RATE NOT KEPT)'}; "
                f"broker {r['broker_cpu_us_per_msg']:.1f} us/msg")
    if name == "idle":
        return (f"{r['connections']:,} connections, broker RSS +{r['rss_growth_mb']:.1f} MB = "
                f"{r['rss_kib_per_connection']:.1f} KiB/connection")
    unit, plural = ("delivery", "deliveries") if name == "fanout" else ("msg", "msgs")
    lost = f", {r['lost']:,} lost" if r.get("lost") else ""
    return (f"{r[plural + '_per_s']:,.0f} {plural}/s, "
            f"broker {r['broker_cpu_us_per_' + unit]:.1f} us/{unit}{lost}")


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def median_of(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return statistics.median([v for v in values if v is not None])


def medians(rounds: list[dict[str, Any]], label: str) -> dict[str, dict[str, float | None]]:
    """Per workload and figure, the median over the rounds of one broker's figures."""
    out: dict[str, dict[str, float | None]] = {}
    for name in RATIO_KEYS:
        per = [r[label][name] for r in rounds if name in r.get(label, {})]
        if per and all("error" not in p for p in per):
            figures = [headline(name, p) for p in per]
            out[name] = {k: median_of([f[k] for f in figures]) for k in RATIO_KEYS[name]}
    return out


def median_ratios(rounds: list[dict[str, Any]], peer: str) -> dict[str, dict[str, float | None]]:
    """Per workload and figure, the median over the rounds of each round's logbus / peer."""
    out: dict[str, dict[str, float | None]] = {}
    for name in RATIO_KEYS:
        pairs = [(r["logbus"][name], r[peer][name]) for r in rounds
                 if name in r.get("logbus", {}) and name in r.get(peer, {})]
        if pairs and all("error" not in lb and "error" not in pb for lb, pb in pairs):
            per = [(headline(name, lb), headline(name, pb)) for lb, pb in pairs]
            out[name] = {k: median_of([ratio(lb[k], pb[k]) for lb, pb in per])
                         for k in RATIO_KEYS[name]}
    return out


# -- brokers -------------------------------------------------------------------------


class LogbusBroker:
    """`logbus serve` with only an MQTT listener, on a port picked free here. ``error`` is
    set (and the server stopped) when nothing there answers an MQTT CONNECT."""

    name = "logbus"

    def __init__(self, directory: str | None, start_timeout: float, connect_timeout: float) -> None:
        self.workdir = tempfile.mkdtemp(prefix="logbus-mbench-", dir=directory)
        self.start_timeout, self.connect_timeout = start_timeout, connect_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.error: dict[str, str] | None = None
        self.listen = ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> LogbusBroker:
        (self.port,) = free_ports(1)
        self.listen = f"tcp:{self.port}:interface=127.0.0.1"
        try:
            # no queue limit per session, as Mosquitto is run here (max_queued_messages 0):
            # the default of 1,000 drops what a slower subscriber has not taken yet
            self.proc, addresses = start_logbus(self.workdir, {"mqtt": self.listen},
                                                ["--mqtt-max-queued-messages", "0"],
                                                timeout=self.start_timeout, expect=())
            why = mqtt_answers(self.port, self.connect_timeout)
            if why is not None:
                listed = "lists" if "mqtt" in addresses else "does not list"
                self.error = {"error": NO_GATEWAY,
                              "detail": f"nothing answers an MQTT CONNECT on 127.0.0.1:{self.port} "
                                        f"({why}); its ready file {listed} an MQTT listener"}
                stop_logbus(self.proc)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *_exc: Any) -> None:
        try:
            if self.proc is not None:
                stop_logbus(self.proc)
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def info(self) -> dict[str, Any]:
        return {"name": "logbus", "host": "127.0.0.1", "port": self.port, "pid": self.pid,
                "command": ["logbus", "serve", "--mqtt", self.listen, "--amqp", "off",
                            "--kafka", "off", "--http", "off"]}


def run_one(args: argparse.Namespace, name: str, broker: Any, label: str) -> dict[str, Any]:
    try:
        return dict(WORKLOADS[name](args, broker.port, broker.pid))
    except BenchError as exc:
        return {"error": f"{label} {name}: {exc}"}
    except Exception as exc:  # noqa: BLE001 -- recorded; the other brokers still run
        return {"error": f"{label} {name}: {exc!r}"}


def bench(args: argparse.Namespace) -> dict[str, Any]:
    targets = list(TARGETS) if args.target == "all" else [args.target]
    out: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        brokers: dict[str, Any] = {}
        for name in targets:
            log(f"starting {name}")
            try:
                if name == "logbus":
                    lb = stack.enter_context(LogbusBroker(args.dir, args.start_timeout,
                                                          args.connect_timeout))
                    if lb.error is not None:
                        log(f"logbus: {lb.error['error']}: {lb.error['detail']}")
                        out["logbus"] = lb.error
                        continue
                    brokers[name] = lb
                else:
                    brokers[name] = stack.enter_context(PEERS[name](args.dir, args.start_timeout))
            except BenchError as exc:  # the others are still measured
                log(f"{name} did not start: {exc}")
                out[name] = {"error": f"{name} did not start", "detail": str(exc)}
                continue
            out[name] = {"broker": brokers[name].info()}
        live = [t for t in targets if t in brokers]
        rounds: list[dict[str, Any]] = []
        for r in range(args.rounds if live else 0):
            k = r % len(live)
            order = live[k:] + live[:k]
            got: dict[str, Any] = {"order": order, **{t: {} for t in order}}
            for name in args.workloads:
                for t in order:
                    label = f"{t} round {r + 1}"
                    got[t][name] = run_one(args, name, brokers[t], label)
                    log(f"{label} {name}: {summary(name, got[t][name])}")
            rounds.append(got)
    out["rounds"] = rounds
    for t in live:
        out[t]["median"] = medians(rounds, t)
    if "logbus" in live:
        for peer in PEER_NAMES:
            if peer in live:
                out[f"median_ratios_logbus_over_{peer}"] = median_ratios(rounds, peer)
    out["errors"] = [res["error"] for r in rounds for t in r["order"]
                     for res in r[t].values() if "error" in res]
    return out


# -- command line --------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=["all", *TARGETS], default="all",
                    help="the broker(s) to start here and measure")
    ap.add_argument("--rounds", type=int, default=1,
                    help="every workload on every broker this many times, the order rotated")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="comma-separated subset of %(default)s")
    ap.add_argument("--messages", type=int, default=50_000, help="qos0 and qos1, 1 -> 1")
    ap.add_argument("--size", type=int, default=64, help="payload bytes")
    ap.add_argument("--window", type=int, default=1000,
                    help="publishes outstanding (QoS 1: not PUBACKed; QoS 0: not written)")
    ap.add_argument("--fanout-messages", type=int, default=10_000)
    ap.add_argument("--fanout-subscribers", type=int, default=10)
    ap.add_argument("--fanout-processes", type=int, default=2,
                    help="processes the fan-out subscribers are spread over")
    ap.add_argument("--latency-rate", type=float, default=1000.0, help="messages per second")
    ap.add_argument("--latency-client", choices=("paho", "raw"), default="raw",
                    help="latency: the clients; raw (bench/mqtt_raw.py, about 130 µs per message) so "
                         "that the broker and not the clients is measured, paho to see what its "
                         "users get (decision 0029)")
    ap.add_argument("--latency-seconds", type=float, default=10.0, help="measured, after warm-up")
    ap.add_argument("--latency-warmup", type=float, default=1.0,
                    help="seconds sent first, at the same rate, and not counted")
    ap.add_argument("--idle-connections", type=int, default=10_000)
    ap.add_argument("--idle-processes", type=int, default=4,
                    help="client processes holding the idle connections")
    ap.add_argument("--idle-batch", type=int, default=500,
                    help="idle connections opened before waiting for their CONNACKs")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds without a delivery after the last publish before QoS 0 "
                         "losses are counted; before each RSS reading")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="seconds any one step may take (latency: plus its paced duration)")
    ap.add_argument("--connect-timeout", type=float, default=5.0)
    ap.add_argument("--start-timeout", type=float, default=60.0,
                    help="seconds a broker may take to accept MQTT connections")
    ap.add_argument("--dir", default=None, help="parent of the brokers' temp dirs")
    ap.add_argument("--note", default="", help="free text kept in the JSON (machine state...)")
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = build_parser()
    args = ap.parse_args(argv)
    chosen = {w.strip() for w in args.workloads.split(",") if w.strip()}
    if chosen - set(WORKLOADS) or not chosen:
        ap.error(f"--workloads: choose from {','.join(WORKLOADS)}")
    args.workloads = [w for w in WORKLOADS if w in chosen]
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    for flag in ("messages", "fanout_messages", "fanout_subscribers", "fanout_processes",
                 "idle_connections", "idle_processes", "idle_batch", "window"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.latency_rate <= 0:
        ap.error("--latency-rate must be positive")
    if args.size < LATENCY_HEAD.size and "latency" in args.workloads:
        ap.error(f"--size must be at least {LATENCY_HEAD.size} for the latency workload")
    return args


def limits(args: argparse.Namespace) -> dict[str, Any]:
    """File descriptors and ports for the idle connections: ours (raised to the hard limit,
    so the brokers started here inherit it) and what the machine allows."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft, hard = raise_nofile()
    out: dict[str, Any] = {"nofile_soft_before": before[0], "nofile_soft": soft,
                           "nofile_hard": hard}
    for key, path in (("fs_nr_open", "/proc/sys/fs/nr_open"),
                      ("ip_local_port_range", "/proc/sys/net/ipv4/ip_local_port_range")):
        try:
            with open(path) as f:
                out[key] = f.read().split()
        except OSError:
            pass
    if "idle" in args.workloads and args.idle_connections + 100 > soft:
        log(f"WARNING: {args.idle_connections} idle connections need as many descriptors in "
            f"the broker, but RLIMIT_NOFILE is {soft} (hard {hard})")
    return out


def exit_on_sigterm(_signum: int, _frame: Any) -> None:
    """Exit through the finally blocks: the brokers and client processes we started stop."""
    sys.exit(143)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    import paho.mqtt

    out: dict[str, Any] = {
        "bench": "mqtt_bench", "args": vars(args), "method": METHOD,
        "client": {"paho_mqtt": paho.mqtt.__version__, "python": sys.version.split()[0]},
        "machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
        "limits": limits(args),
    }
    try:
        out.update(bench(args))
    except BenchError as exc:
        raise SystemExit(f"mqtt_bench: {exc}") from None
    out["machine"]["loadavg_end"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
