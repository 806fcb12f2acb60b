#!/usr/bin/env python3
"""AMQP 0-9-1 throughput, broker CPU and latency with aio-pika on uvloop: logbus vs RabbitMQ.

Four workloads against one broker, each on fresh durable queues deleted at its end:

    publish   --messages persistent messages (delivery_mode 2) of --size bytes to a
              durable queue via the default exchange, publisher confirms, at most
              --window unconfirmed; msg/s and broker CPU us per confirmed message
    consume   those messages, manual ack (one basic.ack each), prefetch --prefetch;
              msg/s and broker CPU us per consumed+acked message (deletes the queue)
    fanout    --fanout-messages to a durable fanout exchange bound to --fanout-queues
              durable queues: one confirming publisher (same settings), one consumer
              per queue (manual ack, own connection); deliveries/s, CPU us per delivery
    latency   --latency-rate msg/s for --latency-seconds (after --latency-warmup
              seconds not counted), published as above, paced without drift; the body
              carries the monotonic send time and the consumer (manual ack) takes the
              latency on arrival; p50/p90/p99/max in ms. Both ends are
              bench/amqp_raw.py (pre-encoded frames, one basic.ack per delivery), about
              90 µs of client CPU per message; --latency-client aio-pika takes about 440
              µs, 0.9 core at 2,000 msg/s, and then the clients are measured
              (decision 0029)

Broker CPU is user+system from /proc/<pid>/stat (for RabbitMQ: the beam.smp process).
The client's CPU is reported too: a Python client costs about as much per message as
the broker, so on a small machine msg/s is bounded by the client and CPU per message is
the figure that compares brokers. For that reason the fanout and latency consumers run
in a process of their own. Every workload has a deadline (--timeout) and fails with a
clear message instead of hanging; the broker closing a connection or channel fails it
at once.

    python bench/amqp_bench.py --url amqp://guest:guest@127.0.0.1:5672/ --broker-pid 1234
    python bench/amqp_bench.py --target rabbitmq   # a private node (bench/rabbitmq.py)
    python bench/amqp_bench.py --target logbus     # `logbus serve` with an AMQP listener
    python bench/amqp_bench.py --target both       # rabbitmq, then logbus, and ratios
    python bench/amqp_bench.py --target both --rounds 4   # both up, interleaved, medians

This file is the command line and the orchestration (brokers, workloads in turn, JSON);
bench/amqp_workloads.py has the workloads, bench/amqp_client.py the measuring, the AMQP
plumbing and the consumer process, bench/common.py what the bench scripts share (/proc,
quantiles, starting and stopping logbus).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from typing import Any

import aio_pika
import uvloop

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from amqp_client import Run, proc_comm
from amqp_workloads import w_consume, w_fanout, w_latency, w_publish
from common import LATENCY_HEAD, LOOPBACK, BenchError, cancelled_by_sigterm, cpu_split, exit_on_sigterm, start_logbus, stop_logbus
from rabbitmq import RabbitMQ, RabbitMQError

WORKLOADS = ("publish", "consume", "fanout", "latency")
METHOD = {
    "queues": "durable, server-default type (RabbitMQ: classic), declared fresh per workload",
    "messages": "delivery_mode 2 (persistent), default exchange unless fanout, mandatory off",
    "publisher": "publisher confirms; --window publishes in flight, each awaiting its confirm",
    "consumers": "manual ack, one basic.ack per message, basic.qos prefetch_count --prefetch",
    "processes": "publish, consume: one client process; fanout, latency: the consumers in a "
                 "second process (spawned), the publisher in the first",
    "cpu": "broker: /proc/<pid>/stat utime+stime; client: getrusage of both client processes",
}


# -- orchestration -----------------------------------------------------------------


def summary(name: str, r: dict[str, Any]) -> str:
    if name == "latency":
        lat = r["latency"]
        return (f"p50 {lat['p50_ms']:.2f} ms, p90 {lat['p90_ms']:.2f}, p99 {lat['p99_ms']:.2f}, "
                f"max {lat['max_ms']:.2f}, sent {r['achieved_send_rate_per_s']:,.0f}/s"
                f"{'' if r['rate_kept'] else ' (RATE NOT KEPT: the figures show a backlog)'}; "
                f"broker {r['broker_cpu_us_per_msg']:.1f} us/msg")
    unit, plural = ("delivery", "deliveries") if name == "fanout" else ("msg", "msgs")
    return (f"{r[plural + '_per_s']:,.0f} {plural}/s, "
            f"broker {r['broker_cpu_us_per_' + unit]:.1f} us/{unit}")


async def server_properties(url: str, args: argparse.Namespace) -> dict[str, Any]:
    try:
        conn = await aio_pika.connect(url, timeout=args.connect_timeout)
    except Exception as exc:
        raise BenchError(f"cannot connect to {url}: {exc!r}") from exc
    try:
        props = getattr(conn.transport, "connection", None)
        props = dict(getattr(props, "server_properties", None) or {})
    finally:
        await conn.close()
    return {k: v.decode(errors="replace") if isinstance(v, bytes) else v
            for k, v in props.items() if k in ("product", "version", "platform")}


async def run_workloads(url: str, pid: int, args: argparse.Namespace,
                        label: str) -> dict[str, Any]:
    """All the workloads against one broker. SIGTERM cancels them like Ctrl-C does, so
    connections close, queues are deleted and consumer processes end before we exit."""
    result: dict[str, Any] = await cancelled_by_sigterm(_run_workloads(url, pid, args, label), label)
    return result


async def _run_workloads(url: str, pid: int, args: argparse.Namespace,
                         label: str) -> dict[str, Any]:
    props = await server_properties(url, args)
    comm = proc_comm(pid)
    if props.get("product") == "RabbitMQ" and comm != "beam.smp":
        raise BenchError(f"broker pid {pid} is {comm!r}: RabbitMQ's CPU is in beam.smp")
    out: dict[str, Any] = {"broker": {"url": url, "pid": pid, "process": comm, **props},
                           "client_event_loop": type(asyncio.get_running_loop()).__module__,
                           "loadavg_start": os.getloadavg()}
    if args.idle_seconds > 0:
        user0, sys0 = cpu_split(pid)
        await asyncio.sleep(args.idle_seconds)
        user1, sys1 = cpu_split(pid)
        out["broker_idle_cpu_percent"] = (user1 - user0 + sys1 - sys0) / args.idle_seconds * 100

    work_queue: str | None = None
    for name in args.workloads:
        run = Run(url, pid, args)
        limit = args.timeout
        if name == "latency":
            limit += args.latency_seconds + args.latency_warmup
        try:
            async with asyncio.timeout(limit):
                if name == "publish":
                    result = await w_publish(run)
                    if "consume" in args.workloads:  # consume drains and deletes its queue
                        work_queue = run.queues.pop()
                elif name == "consume":
                    if work_queue is None:
                        raise BenchError("consume needs the publish workload before it")
                    result = await w_consume(run, work_queue)
                elif name == "fanout":
                    result = await w_fanout(run)
                else:
                    result = await w_latency(run)
        except TimeoutError:
            raise BenchError(f"{label} {name}: not finished within {limit:g} s "
                             f"(progress {run.progress}); see --timeout") from None
        except BenchError as exc:
            raise BenchError(f"{label} {name}: {exc}") from None
        except Exception as exc:
            raise BenchError(f"{label} {name}: {exc!r} (progress {run.progress})") from exc
        finally:
            await run.close()
        out[name] = result
        print(f"amqp_bench: {label} {name}: {summary(name, result)}", file=sys.stderr)
    out["loadavg_end"] = os.getloadavg()
    return out


# -- brokers -----------------------------------------------------------------------


def start_amqp_logbus(workdir: str, timeout: float) -> tuple[subprocess.Popen[bytes], str]:
    """`logbus serve` listening for AMQP (and HTTP) only; its AMQP address."""
    proc, addresses = start_logbus(workdir, {"amqp": LOOPBACK, "http": LOOPBACK}, timeout=timeout)
    return proc, addresses["amqp"]


def check_logbus(args: argparse.Namespace) -> None:
    """Start and stop logbus once: fail before a long RabbitMQ run if it cannot serve AMQP."""
    workdir = tempfile.mkdtemp(prefix="logbus-abench-", dir=args.dir)
    try:
        stop_logbus(start_amqp_logbus(workdir, args.start_timeout)[0])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def bench_rabbitmq(args: argparse.Namespace) -> dict[str, Any]:
    try:
        with RabbitMQ(args.dir, args.start_timeout) as rmq:
            out = uvloop.run(run_workloads(rmq.url, rmq.pid, args, "rabbitmq"))
            out["broker"]["nodename"] = rmq.nodename
            return out
    except RabbitMQError as exc:
        raise BenchError(f"rabbitmq: {exc}") from None


def bench_interleaved(args: argparse.Namespace) -> dict[str, Any]:
    """--target both --rounds N: both brokers up at once; each round runs every group of
    workloads (publish+consume, fanout, latency) on one broker and then on the other,
    the order swapped each round, so a slow phase of the machine falls on both."""
    groups = [[w for w in unit if w in args.workloads]
              for unit in (["publish", "consume"], ["fanout"], ["latency"])]
    groups = [g for g in groups if g]
    workdir = tempfile.mkdtemp(prefix="logbus-abench-", dir=args.dir)
    proc = None
    rounds: list[dict[str, Any]] = []
    try:
        with RabbitMQ(args.dir, args.start_timeout) as rmq:
            proc, address = start_amqp_logbus(workdir, args.start_timeout)
            brokers = {"rabbitmq": (rmq.url, rmq.pid), "logbus": (f"amqp://guest:guest@{address}/", proc.pid)}
            for r in range(args.rounds):
                order = ["rabbitmq", "logbus"] if r % 2 == 0 else ["logbus", "rabbitmq"]
                got: dict[str, dict[str, Any]] = {"rabbitmq": {}, "logbus": {}}
                for group in groups:
                    for label in order:
                        url, pid = brokers[label]
                        sub = argparse.Namespace(**{**vars(args), "workloads": group,
                                                    "idle_seconds": args.idle_seconds if r == 0 else 0})
                        got[label].update(uvloop.run(run_workloads(url, pid, sub, f"{label} round {r + 1}")))
                rounds.append({"order": order, **got, "ratios_logbus_over_rabbitmq": ratios(got["logbus"], got["rabbitmq"])})
    except RabbitMQError as exc:
        raise BenchError(f"rabbitmq: {exc}") from None
    finally:
        if proc is not None:
            stop_logbus(proc)
        shutil.rmtree(workdir, ignore_errors=True)
    return {"rounds": rounds, "median_ratios_logbus_over_rabbitmq": median_ratios(rounds)}


def median_ratios(rounds: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per figure, the median over the rounds of each round's logbus / rabbitmq."""
    out: dict[str, dict[str, float | None]] = {}
    for name, keys in RATIO_KEYS.items():
        per = [r["ratios_logbus_over_rabbitmq"].get(name) for r in rounds]
        if all(p is not None for p in per) and per:
            figures = {k: [p[k] for p in per] for k in keys}
            out[name] = {k: (None if None in v else statistics.median(v)) for k, v in figures.items()}
    return out


def bench_logbus(args: argparse.Namespace) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="logbus-abench-", dir=args.dir)
    proc = None
    try:
        proc, address = start_amqp_logbus(workdir, args.start_timeout)
        url = f"amqp://guest:guest@{address}/"
        return uvloop.run(run_workloads(url, proc.pid, args, "logbus"))
    finally:
        if proc is not None:
            stop_logbus(proc)
        shutil.rmtree(workdir, ignore_errors=True)


RATIO_KEYS = {
    "publish": ["msgs_per_s", "broker_cpu_us_per_msg"],
    "consume": ["msgs_per_s", "broker_cpu_us_per_msg"],
    "fanout": ["deliveries_per_s", "broker_cpu_us_per_delivery"],
    "latency": ["p50_ms", "p90_ms", "p99_ms", "max_ms", "broker_cpu_us_per_msg"],
}


def ratios(logbus: dict[str, Any], rabbit: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """logbus / rabbitmq for each headline figure."""
    out: dict[str, dict[str, float | None]] = {}
    for name, keys in RATIO_KEYS.items():
        if name not in logbus or name not in rabbit:
            continue
        lb, rb = logbus[name], rabbit[name]
        if name == "latency":
            lb, rb = {**lb, **lb["latency"]}, {**rb, **rb["latency"]}
        out[name] = {k: (lb[k] / rb[k] if rb[k] else None) for k in keys}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=["rabbitmq", "logbus", "both"],
                    help="start the broker(s) here; otherwise give --url and --broker-pid")
    ap.add_argument("--url", help="AMQP URL of a broker started elsewhere")
    ap.add_argument("--broker-pid", type=int,
                    help="its pid, for CPU from /proc (RabbitMQ: the beam.smp process)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="comma-separated subset of %(default)s (consume needs publish)")
    ap.add_argument("--messages", type=int, default=50_000, help="publish and consume")
    ap.add_argument("--size", type=int, default=256, help="message body bytes")
    ap.add_argument("--window", type=int, default=1000, help="unconfirmed publishes in flight")
    ap.add_argument("--prefetch", type=int, default=500, help="consumer prefetch (basic.qos)")
    ap.add_argument("--fanout-messages", type=int, default=20_000)
    ap.add_argument("--fanout-queues", type=int, default=4)
    ap.add_argument("--latency-rate", type=float, default=2000.0, help="messages per second")
    ap.add_argument("--latency-seconds", type=float, default=10.0, help="measured, after warm-up")
    ap.add_argument("--latency-warmup", type=float, default=1.0,
                    help="seconds sent first, at the same rate, and not counted")
    ap.add_argument("--latency-client", choices=("aio-pika", "raw"), default="raw",
                    help="latency: the clients; raw (bench/amqp_raw.py, about 90 µs per message) so "
                         "that the broker and not the clients is measured, aio-pika to see what "
                         "its users get (decision 0029)")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="seconds each workload may take (latency: plus its paced duration)")
    ap.add_argument("--connect-timeout", type=float, default=10.0)
    ap.add_argument("--start-timeout", type=float, default=90.0,
                    help="seconds a broker started here may take to accept connections")
    ap.add_argument("--idle-seconds", type=float, default=2.0,
                    help="broker CPU measured idle before the workloads")
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --target both: both brokers up at once, each workload run on "
                         "one and then the other, this many times, the order swapped each round")
    ap.add_argument("--dir", default=None, help="parent of the brokers' temp dirs")
    ap.add_argument("--note", default="", help="free text kept in the JSON (machine state...)")
    args = ap.parse_args()
    chosen = {w.strip() for w in args.workloads.split(",") if w.strip()}
    if chosen - set(WORKLOADS) or not chosen:
        ap.error(f"--workloads: choose from {','.join(WORKLOADS)}")
    args.workloads = [w for w in WORKLOADS if w in chosen]
    if args.target is None and (args.url is None or args.broker_pid is None):
        ap.error("give --target, or --url and --broker-pid")
    if args.target is not None and (args.url or args.broker_pid):
        ap.error("--url and --broker-pid are for a broker started elsewhere, not with --target")
    if args.rounds < 1 or (args.rounds > 1 and args.target != "both"):
        ap.error("--rounds N > 1 needs --target both")
    if args.size < LATENCY_HEAD.size and "latency" in args.workloads:
        ap.error(f"--size must be at least {LATENCY_HEAD.size} for the latency workload")
    signal.signal(signal.SIGTERM, exit_on_sigterm)

    out: dict[str, Any] = {
        "bench": "amqp_bench", "args": vars(args), "method": METHOD,
        "client": {"aio_pika": aio_pika.__version__, "uvloop": uvloop.__version__,
                   "python": sys.version.split()[0]},
        "machine": {"cpus": os.cpu_count()},
    }
    try:
        if args.target is None:
            out["external"] = uvloop.run(run_workloads(args.url, args.broker_pid, args, "broker"))
        else:
            if args.rounds > 1:
                out.update(bench_interleaved(args))
            else:
                if args.target == "both":
                    check_logbus(args)  # fail before a long RabbitMQ run, not after it
                if args.target in ("rabbitmq", "both"):
                    out["rabbitmq"] = bench_rabbitmq(args)
                if args.target in ("logbus", "both"):
                    out["logbus"] = bench_logbus(args)
                if args.target == "both":
                    out["ratios_logbus_over_rabbitmq"] = ratios(out["logbus"], out["rabbitmq"])
    except BenchError as exc:
        raise SystemExit(f"amqp_bench: {exc}") from None
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
