#!/usr/bin/env python3
"""Many devices, few messages each (issue 32): the broker's CPU per message when every
read carries one packet. --devices connections each publish at --rate messages/s with
nothing else in flight (send one, wait for its acknowledgement, wait for the next
slot), spread evenly in time (device i's first send at i / (N * rate) s, then every
1 / rate s), and one consumer receives everything.

    mqtt    MQTT 3.1.1 at --qos 0, 1 or 2 to fleet-<run>/<device>: QoS 0 just sends at
            the slot, QoS 1 waits for PUBACK, QoS 2 for PUBREC, answers PUBREL and waits
            for PUBCOMP; one subscriber on fleet-<run>/# at the same QoS acknowledging
            as the protocol says. logbus (--mqtt-max-queued-messages 0) vs Mosquitto
    amqp    AMQP 0-9-1: a channel per connection in confirm mode, persistent messages
            (delivery_mode 2) to one durable queue via the default exchange, the next
            slot after basic.ack; one consumer (basic.consume, manual acks, --prefetch).
            logbus vs RabbitMQ
    kafka   one ProduceRequest per slot (acks=-1, one record, RecordBatch v2: a
            producer with linger.ms=0), the next slot after the response; one consumer
            fetching the topic. logbus only: there is no peer here

The clients are bench/fanin_clients.py: raw non-blocking sockets and packets encoded
once, the devices in --client-processes processes of one epoll loop each, the consumer
in a process of its own, so that the broker and not the clients is measured. Every
payload carries its seq and send time (common.LATENCY_HEAD), so the consumer takes the
delivery latency and finds losses and duplicates.

Per round and broker: all devices connect (not measured), --warmup s of sending, then
--seconds measured: broker user and system CPU (/proc/<pid>/stat) over that window per
message sent in it, the broker's cores, the clients' CPU, ack latency (send -> ack) and
delivery latency (send -> consumer) p50/p90/p99/max in ms, how late the clients sent
(send lag), the broker's RSS before the devices connect, once they have, and at the end
of the window. Then the last acks and deliveries are waited for, and every message
acknowledged (QoS 0: sent) but never delivered counts as lost (must be 0 but for QoS 0),
every second delivery as a duplicate. With --target both, both brokers are up at once
and the rounds alternate which goes first (logbus, peer; peer, logbus; ...), so that a
slow phase of the machine falls on both.

Prints one JSON object on stdout (progress on stderr): args, method, machine, limits,
brokers, rounds [{round, order, <broker>: figures | {error}}], summary {<broker>:
medians over rounds, ratio_logbus_over_<peer>: median of each round's ratio},
broker_log_problems, errors. Exit code 1 if a round failed or lost an acknowledged
message.

    python bench/fanin_bench.py --protocol mqtt --qos 1 --devices 2000 --rate 1 --seconds 10
    python bench/fanin_bench.py --protocol amqp --devices 500 --rate 2 --target both --rounds 3
    python bench/fanin_bench.py --protocol kafka --devices 1000 --rate 1 --target logbus
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing.connection
import os
import resource
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (LATENCY_HEAD, LOOPBACK, BenchError, cpu_split, distribution_ms, exit_on_sigterm,
                    log_problems, memory, start_logbus, stop_logbus)
from fanin_clients import ClientProcess, devices_main
from fanin_consumer import consumer_main

PEER = {"mqtt": "mosquitto", "amqp": "rabbitmq", "kafka": None}
METHOD = {
    "schedule": "device i of N sends seq k*N+i at t0 + seq/(N*rate); one message in flight per "
                "connection: a slot that comes while the previous message waits for its ack is "
                "sent the moment the ack arrives (owed_sends counts them); --send-clock timer (the "
                "default): each send is woken at its time by a timerfd in the devices' epoll, so "
                "sends are spread as scheduled; --send-clock poll: by epoll's own timeout, which "
                "counts whole milliseconds (sends then go in 1 ms bursts, before 2026-12-07)",
    "window": "after every device has connected: --warmup s of sending not measured, then the "
              "messages due in the next --seconds s; CPU is read at the window's start and end",
    "cpu": "broker: /proc/<pid>/stat utime and stime over the window / messages sent in it "
           "(RabbitMQ: beam.smp); clients: the same for the device and consumer processes",
    "latency": "ack: send -> PUBACK / PUBCOMP / basic.ack / Produce response, in the device's "
               "process; delivery: send -> the consumer's read (CLOCK_MONOTONIC in the payload); "
               "messages due in the window only",
    "loss": "lost: acknowledged (QoS 0: sent) and never delivered by the end of the drain; "
            "duplicates: deliveries of a seq already seen",
}


def log(text: str) -> None:
    print(f"fanin_bench: {text}", file=sys.stderr, flush=True)


# -- brokers -----------------------------------------------------------------------


class LogbusBroker:
    """`logbus serve` with one listener, the protocol's, on a free loopback port."""

    name = "logbus"

    def __init__(self, protocol: str, args: argparse.Namespace) -> None:
        self.protocol = protocol
        self.args = args
        self.workdir = tempfile.mkdtemp(prefix="logbus-fanin-", dir=args.dir)
        self.log = os.path.join(self.workdir, "broker.log")
        self.proc: Any = None
        self.port = 0
        self.extra: list[str] = []

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return int(self.proc.pid)

    def __enter__(self) -> LogbusBroker:
        # no queue limit per MQTT session, as Mosquitto is run (max_queued_messages 0)
        self.extra = ["--mqtt-max-queued-messages", "0"] if self.protocol == "mqtt" else []
        for a in self.args.logbus_arg:
            self.extra += shlex.split(a)
        try:
            self.proc, addresses = start_logbus(self.workdir, {self.protocol: LOOPBACK}, self.extra,
                                                timeout=self.args.start_timeout)
            self.port = int(addresses[self.protocol].rsplit(":", 1)[1])
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_exc: Any) -> None:
        try:
            if self.proc is not None:
                stop_logbus(self.proc)
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def info(self) -> dict[str, Any]:
        return {"name": "logbus", "port": self.port, "pid": self.pid, "extra_args": self.extra}

    def problems(self) -> dict[str, Any]:
        return log_problems(self.log)


class MosquittoBroker:
    name = "mosquitto"

    def __init__(self, args: argparse.Namespace) -> None:
        from mqtt_peers import Mosquitto

        self.broker = Mosquitto(args.dir, args.start_timeout)

    def __enter__(self) -> MosquittoBroker:
        self.broker.__enter__()
        self.port, self.pid = self.broker.port, self.broker.pid
        return self

    def __exit__(self, *exc: Any) -> None:
        self.broker.__exit__(*exc)

    def info(self) -> dict[str, Any]:
        return self.broker.info()

    def problems(self) -> dict[str, Any]:
        # its config logs errors and warnings only: every line is one
        return log_problems_any(self.broker.log, lambda line: bool(line.strip()))


class RabbitBroker:
    name = "rabbitmq"

    def __init__(self, args: argparse.Namespace) -> None:
        from rabbitmq import RabbitMQ

        self.broker = RabbitMQ(args.dir, args.start_timeout)

    def __enter__(self) -> RabbitBroker:
        from rabbitmq import RabbitMQError

        try:
            self.broker.__enter__()
        except RabbitMQError as exc:
            raise BenchError(f"rabbitmq: {exc}") from None
        self.port, self.pid = self.broker.port, self.broker.pid
        return self

    def __exit__(self, *exc: Any) -> None:
        self.broker.__exit__(*exc)

    def info(self) -> dict[str, Any]:
        return {"name": "rabbitmq", "port": self.port, "pid": self.pid, "nodename": self.broker.nodename}

    def problems(self) -> dict[str, Any]:
        path = os.path.join(self.broker.workdir, "log", self.broker.nodename + ".log")
        return log_problems_any(path, lambda line: "[error]" in line or "[warning]" in line)


def log_problems_any(path: str, bad: Any) -> dict[str, Any]:
    try:
        with open(path, errors="replace") as f:
            lines = [line.rstrip() for line in f if bad(line)]
    except OSError:
        return {"count": None, "first": []}
    return {"count": len(lines), "first": lines[:10]}


def open_broker(name: str, args: argparse.Namespace) -> Any:
    if name == "logbus":
        return LogbusBroker(args.protocol, args)
    return MosquittoBroker(args) if name == "mosquitto" else RabbitBroker(args)


# -- one round on one broker -------------------------------------------------------


def sleep_until(t_ns: int, procs: list[ClientProcess], watch_until: int | None = None) -> None:
    """Until ``t_ns``; a client process says nothing before ``watch_until`` (default
    ``t_ns``) but that it failed. A fleet sends its last message one period before the
    window's end and may say "done" from then on."""
    watch_ns = t_ns if watch_until is None else min(t_ns, watch_until)
    while (left := (watch_ns - time.monotonic_ns()) / 1e9) > 0:
        for conn in multiprocessing.connection.wait([p.pipe for p in procs], left):
            failed = next(p for p in procs if p.pipe is conn)
            failed.expect("nothing before the window's end", 1.0)  # raises with what it said
    if (left := (t_ns - time.monotonic_ns()) / 1e9) > 0:
        time.sleep(left)


def child_cpu(pid: int) -> float:
    """User + system CPU seconds of a client process (NaN once it is gone: its own
    error, read from its pipe, is the one to report)."""
    try:
        return sum(cpu_split(pid))
    except BenchError:
        return math.nan


def merged(maps: list[bytes]) -> int:
    """The union of disjoint 0/1 byte maps, as one int (bit i*8 of byte i)."""
    out = 0
    for m in maps:
        out |= int.from_bytes(m, "big")
    return out


def ones(x: int) -> int:
    """How many bytes of a merged map are 1."""
    return x.bit_count()


def measure(args: argparse.Namespace, broker: Any, label: str) -> dict[str, Any]:
    n, rate = args.devices, args.rate
    # (less a hair: 1.4 * 100 must be 140 slots, not 141)
    total = math.ceil((args.warmup + args.seconds) * n * rate - 1e-6)
    warm = math.ceil(args.warmup * n * rate - 1e-6)
    run_id = f"fanin-{os.getpid()}-{os.urandom(3).hex()}"
    spec: dict[str, Any] = {
        "protocol": args.protocol, "qos": args.qos, "port": broker.port, "size": args.size, "run_id": run_id,
        "topic": run_id, "queue": run_id, "devices": n, "rate": rate, "total": total, "warmup_msgs": warm,
        "timeout": args.timeout, "prefetch": args.prefetch, "connect_timeout": args.connect_timeout,
        "concurrency": args.concurrency, "drain_timeout": args.drain_timeout, "processes": args.client_processes,
        "send_clock": args.send_clock,
        "start_timeout": args.timeout + args.connect_timeout * (n / args.concurrency + 1),
    }
    acks = not (args.protocol == "mqtt" and args.qos == 0)
    procs: list[ClientProcess] = []
    try:
        consumer = ClientProcess(consumer_main, spec, "consumer")
        procs.append(consumer)
        consumer.expect("ready", args.timeout + 30)
        mem_before = memory(broker.pid)
        fleet = [ClientProcess(devices_main, {**spec, "process": p}, f"devices {p}")
                 for p in range(args.client_processes)]
        procs += fleet
        connected = [f.expect("connected", spec["start_timeout"]) for f in fleet]
        mem_connected = memory(broker.pid)
        t0 = time.monotonic_ns() + 200_000_000
        for f in fleet:
            f.send("start", t0)
        period = 1e9 / (n * rate)
        sleep_until(t0 + int(warm * period), procs)
        b_user0, b_sys0 = cpu_split(broker.pid)
        c0 = [child_cpu(p.pid) for p in procs]
        w0 = time.monotonic_ns()
        sleep_until(t0 + int(total * period), procs, watch_until=t0 + int((total - 1) * period))
        b_user1, b_sys1 = cpu_split(broker.pid)
        c1 = [child_cpu(p.pid) for p in procs]
        w1 = time.monotonic_ns()
        mem_end = memory(broker.pid)
        results = [f.expect("done", args.drain_timeout + args.timeout) for f in fleet]
        sent = merged([r["sent_map"] for r in results])
        acked = merged([r["acked_map"] for r in results])
        consumer.send("expect", {"count": ones(acked), "settle": args.settle,
                                 "quiet": args.drain_timeout if acks else max(args.settle, 1.0)})
        got = consumer.expect("done", args.drain_timeout + args.timeout)
    finally:
        for p in procs:
            p.stop()
    seen = int.from_bytes(got["seen"], "big")
    seconds = (w1 - w0) / 1e9
    window_mask = int.from_bytes(bytes(warm) + b"\x01" * (total - warm), "big")
    measured = ones(sent & window_mask)
    per = max(measured, 1)
    user, system = b_user1 - b_user0, b_sys1 - b_sys0
    client = [b - a for a, b in zip(c0, c1)]
    ack_ns = [v for r in results for v in r["ack_ns"]]
    lag_ns = [v for r in results for v in r["lag_ns"]]
    out: dict[str, Any] = {
        "devices": n, "rate_per_device": rate, "offered_msgs_per_s": n * rate,
        "warmup_seconds": args.warmup, "seconds": seconds,
        "connect_seconds": max(c["seconds"] for c in connected),
        "sent": ones(sent), "acked": ones(acked), "delivered": ones(seen),
        "lost": ones(acked & ~seen), "duplicates": got["duplicates"],
        "unacked": sum(r["unacked"] for r in results), "unsent": sum(r["unsent"] for r in results),
        "delivered_unacked": ones(seen & sent & ~acked), "never_sent_delivered": ones(seen & ~sent),
        "owed_sends": sum(r["owed_sends"] for r in results),
        "measured_msgs": measured, "measured_msgs_per_s": measured / seconds if seconds > 0 else None,
        "rate_kept": measured >= 0.99 * (total - warm),
        "broker_cpu_us_per_msg": (user + system) / per * 1e6,
        "broker_user_us_per_msg": user / per * 1e6,
        "broker_system_us_per_msg": system / per * 1e6,
        "broker_cores": (user + system) / seconds if seconds > 0 else None,
        "client_cpu_us_per_msg": sum(client) / per * 1e6,
        "client_cores": {"consumer": client[0] / seconds if seconds > 0 else None,
                         "devices": [c / seconds if seconds > 0 else None for c in client[1:]]},
        "ack_latency": distribution_ms([v / 1e6 for v in ack_ns]) if acks else None,
        "delivery_latency": distribution_ms([v / 1e6 for v in got["latencies"]]),
        "send_lag": distribution_ms([v / 1e6 for v in lag_ns]),
        "broker_memory": {"before_connect": mem_before, "connected": mem_connected, "end": mem_end,
                          "rss_kib_per_connection": (mem_connected.get("vmrss_mb", 0) - mem_before.get("vmrss_mb", 0))
                          * 1e6 / 1024 / n},
    }
    if args.protocol == "amqp":
        out["redelivered"] = got["redelivered"]
    return out


def headline(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"ERROR {r['error']}"
    ack = r["ack_latency"]
    d = r["delivery_latency"]
    return (f"{r['measured_msgs']:,} msgs in {r['seconds']:.1f} s{'' if r['rate_kept'] else ' (RATE NOT KEPT)'}; "
            f"broker {r['broker_cpu_us_per_msg']:.1f} us/msg (user {r['broker_user_us_per_msg']:.1f} + "
            f"sys {r['broker_system_us_per_msg']:.1f}), {r['broker_cores']:.2f} cores; "
            + (f"ack p50/p99/max {ack['p50_ms']:.2f}/{ack['p99_ms']:.2f}/{ack['max_ms']:.1f} ms; " if ack else "")
            + f"delivery {d['p50_ms']:.2f}/{d['p99_ms']:.2f}/{d['max_ms']:.1f} ms; "
            f"lost {r['lost']}, duplicates {r['duplicates']}, client {r['client_cpu_us_per_msg']:.1f} us/msg")


# -- summary -----------------------------------------------------------------------

FIGURES = {
    "broker_cpu_us_per_msg": lambda r: r["broker_cpu_us_per_msg"],
    "broker_user_us_per_msg": lambda r: r["broker_user_us_per_msg"],
    "broker_system_us_per_msg": lambda r: r["broker_system_us_per_msg"],
    "broker_cores": lambda r: r["broker_cores"],
    "ack_p99_ms": lambda r: r["ack_latency"]["p99_ms"] if r["ack_latency"] else None,
    "delivery_p50_ms": lambda r: r["delivery_latency"]["p50_ms"],
    "delivery_p99_ms": lambda r: r["delivery_latency"]["p99_ms"],
    "delivery_max_ms": lambda r: r["delivery_latency"]["max_ms"],
    "broker_vmrss_mb": lambda r: r["broker_memory"]["end"].get("vmrss_mb"),
}


def median_or_none(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(vals) if vals and len(vals) == len(values) else None


def summarize(rounds: list[dict[str, Any]], targets: list[str]) -> dict[str, Any]:
    ok = {t: [r[t] for r in rounds if "error" not in r.get(t, {"error": 1})] for t in targets}
    out: dict[str, Any] = {t: {"rounds": len(ok[t]), **{k: median_or_none([f(r) for r in ok[t]])
                                                          for k, f in FIGURES.items()}}
                           for t in targets}
    for t in targets:
        out[t]["lost"] = sum(r["lost"] for r in ok[t])
        out[t]["duplicates"] = sum(r["duplicates"] for r in ok[t])
    peers = [t for t in targets if t != "logbus"]
    if "logbus" in targets and peers:
        peer = peers[0]
        pairs = [(r["logbus"], r[peer]) for r in rounds
                 if "error" not in r.get("logbus", {"error": 1}) and "error" not in r.get(peer, {"error": 1})]
        ratios: dict[str, float | None] = {}
        for k, f in FIGURES.items():
            per = [f(lb) / f(pb) if f(lb) is not None and f(pb) else None for lb, pb in pairs]
            defined = [v for v in per if v is not None]
            ratios[k] = statistics.median(defined) if defined else None  # (a 0 in a short round: skipped)
        out[f"ratio_logbus_over_{peer}"] = ratios
    return out


# -- command line --------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--protocol", choices=sorted(PEER), default="mqtt")
    ap.add_argument("--qos", type=int, choices=(0, 1, 2), default=1, help="mqtt: the devices' and the subscriber's QoS")
    ap.add_argument("--devices", type=int, default=1000, help="connections, one device each")
    ap.add_argument("--rate", type=float, default=1.0, help="messages per second per device")
    ap.add_argument("--seconds", type=float, default=10.0, help="the measured window")
    ap.add_argument("--warmup", type=float, default=2.0,
                    help="seconds of sending after every device has connected, before the window")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--target", choices=("logbus", "peer", "both"), default="both",
                    help="logbus, the peer (mqtt: Mosquitto, amqp: RabbitMQ, kafka: none) or both, "
                         "the order alternating each round")
    ap.add_argument("--client-processes", type=int, default=1, help="processes the devices are split over")
    ap.add_argument("--send-clock", choices=("timer", "poll"), default="timer",
                    help="what wakes a device's send: a timerfd at its time (spread as scheduled) or "
                         "epoll's millisecond timeout (1 ms bursts)")
    ap.add_argument("--size", type=int, default=64, help=f"payload bytes (at least {LATENCY_HEAD.size})")
    ap.add_argument("--prefetch", type=int, default=1000, help="amqp: the consumer's basic.qos")
    ap.add_argument("--concurrency", type=int, default=100,
                    help="connections opening at once, per client process")
    ap.add_argument("--connect-timeout", type=float, default=30.0, help="seconds one connection may take to open")
    ap.add_argument("--drain-timeout", type=float, default=30.0,
                    help="seconds after the window for the last acks and deliveries")
    ap.add_argument("--settle", type=float, default=0.5,
                    help="seconds the consumer goes on reading once it has everything (duplicates); "
                         "QoS 0: without a delivery before losses are counted")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds any other step may take")
    ap.add_argument("--start-timeout", type=float, default=90.0, help="seconds a broker may take to start")
    ap.add_argument("--logbus-arg", action="append", default=[],
                    help="extra `logbus serve` arguments (repeatable, split as a shell would)")
    ap.add_argument("--dir", default=None, help="parent of the brokers' temp dirs")
    ap.add_argument("--note", default="", help="free text kept in the JSON")
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.devices < 1 or args.rounds < 1 or args.client_processes < 1 or args.concurrency < 1:
        ap.error("--devices, --rounds, --client-processes and --concurrency must be at least 1")
    if args.client_processes > args.devices:
        ap.error("--client-processes must not exceed --devices")
    if args.rate <= 0 or args.seconds <= 0 or args.warmup < 0:
        ap.error("--rate and --seconds must be positive, --warmup not negative")
    if args.size < LATENCY_HEAD.size:
        ap.error(f"--size must be at least {LATENCY_HEAD.size}")
    if args.protocol == "kafka" and args.target == "peer":
        ap.error("kafka has no peer here: --target logbus")
    if args.protocol != "mqtt":
        args.qos = None
    return args


def limits(devices: int, processes: int) -> dict[str, Any]:
    """Descriptors for every connection in the brokers (they inherit ours, started after
    this) and in each client process (each raises its own)."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = devices + 1024
    soft, hard = before
    if soft < need:
        hard = max(hard, need)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(need, min(hard, 65536)), hard))
    out: dict[str, Any] = {"nofile_before": list(before), "nofile": list(resource.getrlimit(resource.RLIMIT_NOFILE))}
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = map(int, f.read().split())
        out["ip_local_port_range"] = [low, high]
        if devices + 100 > high - low:
            log(f"WARNING: {devices} connections from 127.0.0.1 but only {high - low} local ports")
    except OSError:
        pass
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    peer = PEER[args.protocol]
    if args.target == "logbus" or peer is None:
        targets = ["logbus"]
    else:
        targets = [peer] if args.target == "peer" else ["logbus", peer]
    out: dict[str, Any] = {"bench": "fanin_bench", "args": vars(args), "method": METHOD,
                           "machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
                           "limits": limits(args.devices, args.client_processes)}
    if args.target == "both" and not peer:
        out["note_peer"] = f"no peer broker for {args.protocol}: logbus only"
    errors: list[str] = []
    rounds: list[dict[str, Any]] = []
    try:
        with contextlib.ExitStack() as stack:
            brokers: dict[str, Any] = {}
            for name in targets:
                log(f"starting {name}")
                brokers[name] = stack.enter_context(open_broker(name, args))
            out["brokers"] = {name: b.info() for name, b in brokers.items()}
            for r in range(args.rounds):
                order = targets if r % 2 == 0 else targets[::-1]
                got: dict[str, Any] = {"round": r + 1, "order": order}
                for name in order:
                    label = f"{name} round {r + 1}"
                    try:
                        got[name] = measure(args, brokers[name], label)
                    except BenchError as exc:
                        got[name] = {"error": f"{label}: {exc}"}
                    except Exception as exc:  # noqa: BLE001 -- recorded; the other broker still runs
                        got[name] = {"error": f"{label}: {exc!r}"}
                    log(f"{label}: {headline(got[name])}")
                    if "error" in got[name]:
                        errors.append(got[name]["error"])
                    elif got[name]["lost"] and (args.protocol != "mqtt" or args.qos):
                        errors.append(f"{label}: {got[name]['lost']} acknowledged messages never delivered")
                rounds.append(got)
            out["broker_log_problems"] = {name: b.problems() for name, b in brokers.items()}
    except BenchError as exc:
        raise SystemExit(f"fanin_bench: {exc}") from None
    out["rounds"] = rounds
    out["summary"] = summarize(rounds, targets)
    out["errors"] = errors
    out["machine"]["loadavg_end"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
