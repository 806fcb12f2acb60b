#!/usr/bin/env python3
"""Kafka transactional produce against plain (idempotent) produce, on one `logbus serve`
(issue 47): records/s, broker CPU per record, and EndTxn's latency.

Two workloads, alternated in every round (the order swapped each round, so a slow phase
of the machine falls on both), each on a topic of its own (one partition):

    plain   kafka-python's default producer (idempotent, acks=all): --records records of
            --size bytes, flushed every --txn-size records, so both send the same batches
    txn     a transactional producer (transactional.id per round): the same records in
            transactions of --txn-size records; each ends with flush() then
            commit_transaction(), so the commit's time is EndTxn's round trip (the markers
            written and durable, the records routed)

Reported per workload and round: records/s (from the first send to the last
acknowledgement), broker CPU µs per record (/proc/<pid>/stat over the span), and for
txn EndTxn p50/p90/p99/max ms; then the medians over rounds and txn/plain of records/s.
The client is Python, so records/s is bounded by it: the ratio is the figure that
compares. JSON on stdout, progress on stderr.

    python bench/txn_bench.py --rounds 3 --records 20000 --txn-size 100
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LOOPBACK, BenchError, cpu_split, distribution_ms, start_logbus, stop_logbus

from kafka import KafkaProducer


def run_plain(addr: str, topic: str, records: int, size: int, per_flush: int) -> dict[str, Any]:
    p = KafkaProducer(bootstrap_servers=addr, acks="all", linger_ms=5)
    try:
        p.send(topic, b"warm-up").get(timeout=30)
        value = b"x" * size
        start = time.monotonic()
        for i in range(records):
            p.send(topic, value)
            if (i + 1) % per_flush == 0:
                p.flush()
        p.flush()
        return {"seconds": time.monotonic() - start}
    finally:
        p.close()


def run_txn(addr: str, topic: str, records: int, size: int, per_txn: int, txn_id: str) -> dict[str, Any]:
    p = KafkaProducer(bootstrap_servers=addr, transactional_id=txn_id, linger_ms=5)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"warm-up")
        p.commit_transaction()
        value = b"x" * size
        commits: list[float] = []
        start = time.monotonic()
        for first in range(0, records, per_txn):
            p.begin_transaction()
            for _ in range(min(per_txn, records - first)):
                p.send(topic, value)
            p.flush()
            t0 = time.monotonic()
            p.commit_transaction()
            commits.append((time.monotonic() - t0) * 1000)
        return {"seconds": time.monotonic() - start, "end_txn": distribution_ms(commits)}
    finally:
        p.close()


def measure(pid: int, fn: Any, *args: Any) -> dict[str, Any]:
    u0, s0 = cpu_split(pid)
    out = fn(*args)
    u1, s1 = cpu_split(pid)
    out["broker_cpu_s"] = (u1 - u0) + (s1 - s0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=100, help="bytes per record value")
    ap.add_argument("--txn-size", type=int, default=100, help="records per transaction (and per flush of plain)")
    args = ap.parse_args()
    if args.records < args.txn_size or args.txn_size < 1:
        raise SystemExit("--records must be at least --txn-size, which must be positive")
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="txn-bench-") as work:
        proc, addresses = start_logbus(work, {"kafka": LOOPBACK})
        try:
            addr = addresses["kafka"]
            for r in range(args.rounds):
                order = ["plain", "txn"] if r % 2 == 0 else ["txn", "plain"]
                result: dict[str, Any] = {}
                for name in order:
                    topic = f"bench-{name}-{r}"
                    if name == "plain":
                        out = measure(proc.pid, run_plain, addr, topic, args.records, args.size, args.txn_size)
                    else:
                        out = measure(proc.pid, run_txn, addr, topic, args.records, args.size, args.txn_size,
                                      f"bench-{r}")
                    out["records_per_s"] = args.records / out["seconds"]
                    out["broker_cpu_us_per_record"] = out["broker_cpu_s"] * 1e6 / args.records
                    result[name] = out
                    extra = ""
                    if "end_txn" in out:
                        e = out["end_txn"]
                        extra = f"; EndTxn p50/p99/max {e['p50_ms']:.2f}/{e['p99_ms']:.2f}/{e['max_ms']:.2f} ms"
                    print(f"txn_bench: round {r + 1} {name}: {out['records_per_s']:,.0f} records/s, broker "
                          f"{out['broker_cpu_us_per_record']:.1f} us/record{extra}", file=sys.stderr)
                result["txn_over_plain"] = result["txn"]["records_per_s"] / result["plain"]["records_per_s"]
                rounds.append(result)
        finally:
            stop_logbus(proc)
    med = statistics.median
    summary = {
        name: {
            "records_per_s": med(x[name]["records_per_s"] for x in rounds),
            "broker_cpu_us_per_record": med(x[name]["broker_cpu_us_per_record"] for x in rounds),
        } for name in ("plain", "txn")
    }
    summary["txn"]["end_txn_p50_ms"] = med(x["txn"]["end_txn"]["p50_ms"] for x in rounds)
    summary["txn"]["end_txn_p99_ms"] = med(x["txn"]["end_txn"]["p99_ms"] for x in rounds)
    summary["txn"]["end_txn_max_ms"] = max(x["txn"]["end_txn"]["max_ms"] for x in rounds)
    summary["txn_over_plain"] = med(x["txn_over_plain"] for x in rounds)
    json.dump({"method": {"records": args.records, "size": args.size, "txn_size": args.txn_size,
                          "rounds": args.rounds, "client": "kafka-python, linger_ms 5, acks all"},
               "rounds": rounds, "summary": summary}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"txn_bench: {e}", file=sys.stderr)
        sys.exit(1)
