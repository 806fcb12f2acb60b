#!/usr/bin/env python3
"""The Kafka gateway's calls into the core, per call: what the ``Streams`` port costs on
the paths a Produce, a Fetch and a Heartbeat take (decision 0051), without sockets and
without the Kafka codec.

A core broker (tests/loop.py's reactor) on a temp dir, topic "t" (flush none, one
partition); per round, each call is timed over --calls calls: ``produce`` of a one-record
batch (the reactor run every 256 calls, so appends drain as in a server's turns),
``read_spans`` (4 KiB: a few batches) and ``offsets`` of the partition, ``heartbeat`` of an unknown group (the
coordinator's quickest answer), ``partition_count``, in 10 passes (the garbage collector
off during each) of which the quickest counts. Prints one JSON object: ns per call, the median over --rounds.

With ``--a TREE --b TREE`` it runs itself from each source tree in turn (PYTHONPATH), the
order alternating per round, and adds the median of the per-round ratios B/A: the A/B of
a change on this machine, whose speed drifts within minutes. A tree from before decision
0051 (the calls on the Broker itself) is measured through the Broker.

    python bench/kafka_calls_bench.py --calls 20000 --rounds 5
    python bench/kafka_calls_bench.py --a /tmp/base --b . --rounds 10 --dir /dev/shm
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

CALLS = ("produce", "read_spans", "offsets", "heartbeat", "partition_count")
REPEATS = 10  # passes per call and round; the quickest counts


def measure(calls: int, directory: str | None = None) -> dict[str, float]:
    """ns per call of each of CALLS, one round, in this process's logbus."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    from logbus.core.broker import Broker
    from logbus.core.log import TopicConfig
    from tests.loop import LoopReactor

    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    builder.append(0, 1000, b"k", b"v" * 100, [])
    data = bytes(builder.build())
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="kafka-calls-", dir=directory) as tmp:
        loop = LoopReactor()
        b = Broker(Path(tmp), reactor=loop, topic_defaults=TopicConfig(flush="none"))
        b.start()
        try:
            streams: Any = getattr(b, "streams", b)  # before decision 0051: the Broker's own methods
            admin: Any = getattr(b, "topics", b)
            admin.create_topic("t", {"partitions": 1})

            def timed(name: str, call: Callable[[int], object]) -> None:
                """The quickest of REPEATS passes of calls / REPEATS calls: the pass another
                process's work on this machine interrupted least."""
                n = calls // REPEATS
                best = None
                for r in range(REPEATS):
                    gc.collect()
                    gc.disable()  # a collection's pause falls on whichever pass it happens in
                    t0 = time.perf_counter_ns()
                    for i in range(r * n, (r + 1) * n):
                        call(i)
                    elapsed = time.perf_counter_ns() - t0
                    gc.enable()
                    best = elapsed if best is None else min(best, elapsed)
                assert best is not None
                out[name] = best / n

            produce, read_spans, offsets = streams.produce, streams.read_spans, streams.offsets
            heartbeat, partition_count = streams.heartbeat, streams.partition_count

            def produce_one(i: int) -> None:
                produce("t", 0, data)
                if i & 255 == 255:
                    while loop.run_once():
                        pass

            timed("produce", produce_one)
            while loop.run_once():
                pass
            timed("read_spans", lambda i: read_spans("t", 0, i, 4096))
            timed("offsets", lambda i: offsets("t", 0))
            timed("heartbeat", lambda i: heartbeat("g", 1, "m"))
            timed("partition_count", lambda i: partition_count("t"))
        finally:
            b.stop()
            while loop.run_once():
                pass
    return out


def run_tree(tree: str, calls: int, directory: str | None) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), LOGBUS_PURE="1")
    here = os.path.abspath(__file__)
    where = ["--dir", directory] if directory else []
    proc = subprocess.run([sys.executable, here, "--calls", str(calls), "--rounds", "1", "--raw", *where],
                          env=env, cwd=os.path.abspath(tree), capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(proc.stdout)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--a", default=None, help="source tree A (with --b: an interleaved A/B)")
    ap.add_argument("--b", default=None, help="source tree B")
    ap.add_argument("--dir", default=None, help="where the data directories go (a tmpfs such as /dev/shm "
                    "keeps other processes' disk writes out of produce's figure)")
    ap.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)  # one round, as run_tree reads it
    args = ap.parse_args()
    if args.raw:
        print(json.dumps(measure(args.calls, args.dir)))
        return
    if args.a is None or args.b is None:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        runs = [measure(args.calls, args.dir) for _ in range(args.rounds)]
        print(json.dumps({"bench": "kafka_calls_bench", "python": sys.version.split()[0], "calls": args.calls,
                          "ns_per_call": {c: statistics.median(r[c] for r in runs) for c in CALLS}}, indent=2))
        return
    a_runs: list[dict[str, float]] = []
    b_runs: list[dict[str, float]] = []
    for r in range(args.rounds):
        order = (("a", args.a), ("b", args.b)) if r % 2 == 0 else (("b", args.b), ("a", args.a))
        for name, tree in order:
            (a_runs if name == "a" else b_runs).append(run_tree(tree, args.calls, args.dir))
    print(json.dumps({
        "bench": "kafka_calls_bench", "python": sys.version.split()[0], "calls": args.calls, "rounds": args.rounds,
        "a": args.a, "b": args.b,
        "ns_per_call": {c: {"a": statistics.median(x[c] for x in a_runs), "b": statistics.median(x[c] for x in b_runs),
                            "ratio_b_over_a": statistics.median(y[c] / x[c] for x, y in zip(a_runs, b_runs)),
                            "ratios": sorted(round(y[c] / x[c], 3) for x, y in zip(a_runs, b_runs))}
                        for c in CALLS},
    }, indent=2))


if __name__ == "__main__":
    main()
