#!/usr/bin/env python3
"""The compiled modules against their pure-Python source: the gain that puts a module in
logbus/compiled.py's MODULES (decision 0044).

Each workload calls one module's per-message function in a loop: the MQTT decoder on a
buffer of QoS 1 PUBLISH packets (3.1.1 and 5.0), the encoder's PUBLISH and PUBACK, the topic
trie's match over a thousand patterns. Every measurement runs in a fresh process, one per
build ("variant") and round, the variants alternating in order from round to round: this
machine's speed drifts by a quarter within minutes, so only ratios taken within a round
are worth reading. A variant is a source tree (its own in-place build) and whether
LOGBUS_PURE=1 is set; the default is this tree pure against this tree compiled. Each
process reports which build it ran (logbus.compiled.status()), and the run fails when a
variant ran another build than it names.

    python bench/compiled_bench.py --rounds 8
    python bench/compiled_bench.py --variant pure=.:pure --variant three=.:compiled \\
        --variant wire=/tmp/variant-wire:compiled --rounds 8

Prints one JSON document: per workload, each variant's median ns per call and the median
(min-max) over rounds of each variant's time over the first variant's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _workloads() -> dict[str, tuple[Callable[[], object], int]]:
    """name -> (one call, how many operations it makes)."""
    from logbus.core.routing.topic_trie import TopicTrie
    from logbus.gateway.mqtt.decoder import Decoder
    from logbus.gateway.mqtt.encoder import encode, encode_publish
    from logbus.gateway.mqtt.packets import PubAck, Publish
    from logbus.gateway.mqtt.properties import NO_PROPERTIES

    payload = bytes(range(64))
    per_buffer = 100

    def publishes(version: int) -> bytes:
        return b"".join(encode(Publish(f"devices/{i}/telemetry", payload, 1, False, False, i + 1), version)
                        for i in range(per_buffer))  # fmt: skip

    def decoding(version: int) -> Callable[[], object]:
        data = publishes(version)

        def run() -> object:
            decoder = Decoder(version=version)
            return decoder.feed(data)

        return run

    trie: TopicTrie[int] = TopicTrie()
    for i in range(1000):
        trie.add(f"devices.{i}.telemetry", i)
        if i % 10 == 0:
            trie.add(f"devices.{i}.#", -i)
    trie.add("devices.*.telemetry", 1_000_001)
    trie.add("#", 1_000_002)
    keys = [f"devices.{i}.telemetry" for i in range(0, 1000, 7)]

    def matching() -> object:
        return [trie.match(k) for k in keys]

    def publishing() -> object:
        return [encode_publish("devices/17/telemetry", payload, 1, False, False, i, NO_PROPERTIES, 4)
                for i in range(1, 101)]  # fmt: skip

    acks = [PubAck(i) for i in range(1, 101)]

    def acking() -> object:
        return [encode(a, 4) for a in acks]

    return {
        "decode_publish_3.1.1": (decoding(4), per_buffer),
        "decode_publish_5.0": (decoding(5), per_buffer),
        "encode_publish": (publishing, 100),
        "encode_puback": (acking, 100),
        "trie_match": (matching, len(keys)),
    }


def worker(seconds: float) -> dict[str, Any]:
    """ns per operation of each workload in this process (the best of five spans)."""
    from logbus import compiled

    built, why = compiled.status()
    out: dict[str, Any] = {"compiled": built, "why": why, "ns": {}}
    for name, (run, ops) in _workloads().items():
        calls = 1
        while True:  # calibrate: a span of about seconds/5
            t0 = time.perf_counter()
            for _ in range(calls):
                run()
            spent = time.perf_counter() - t0
            if spent >= seconds / 25:
                break
            calls *= 2
        calls = max(1, int(calls * (seconds / 5) / spent))
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls):
                run()
            best = min(best, time.perf_counter() - t0)
        out["ns"][name] = best / (calls * ops) * 1e9
    return out


def run_variant(tree: str, pure: bool, seconds: float) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("LOGBUS_PURE", None)
    if pure:
        env["LOGBUS_PURE"] = "1"
    env["PYTHONPATH"] = os.path.abspath(tree)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", "--seconds", str(seconds)],
                          cwd=os.path.abspath(tree), env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"compiled_bench: the worker in {tree} failed:\n{proc.stderr[-3000:]}")
    doc: dict[str, Any] = json.loads(proc.stdout)
    if doc["compiled"] == pure:
        raise SystemExit(f"compiled_bench: {tree} ran {'compiled' if doc['compiled'] else 'pure'}, "
                         f"not as asked ({doc['why']})")  # fmt: skip
    return doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=1.0, help="per workload and process")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME=TREE:pure|compiled (the first is the reference)")  # fmt: skip
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.seconds)))
        return 0
    specs = args.variant or [f"pure={ROOT}:pure", f"compiled={ROOT}:compiled"]
    variants: list[tuple[str, str, bool]] = []
    for spec in specs:
        name, _, rest = spec.partition("=")
        tree, _, mode = rest.rpartition(":")
        if mode not in ("pure", "compiled") or not tree:
            parser.error(f"--variant {spec!r}: NAME=TREE:pure|compiled")
        variants.append((name, tree, mode == "pure"))
    rounds: list[dict[str, dict[str, float]]] = []
    for r in range(args.rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        results = {name: run_variant(tree, pure, args.seconds)["ns"] for name, tree, pure in order}
        rounds.append(results)
        print(f"compiled_bench: round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    reference = variants[0][0]
    workloads: dict[str, Any] = {}
    for w in rounds[0][reference]:
        entry: dict[str, Any] = {}
        for name, _, _ in variants:
            ns = [rd[name][w] for rd in rounds]
            ratios = [rd[name][w] / rd[reference][w] for rd in rounds]
            entry[name] = {"ns_per_op_median": round(statistics.median(ns), 1),
                           f"time_over_{reference}_median": round(statistics.median(ratios), 3),
                           f"time_over_{reference}_min": round(min(ratios), 3),
                           f"time_over_{reference}_max": round(max(ratios), 3)}  # fmt: skip
        workloads[w] = entry
    print(json.dumps({
        "python": sys.version.split()[0], "executable": os.path.realpath(sys.executable),
        "rounds": args.rounds, "seconds_per_workload": args.seconds,
        "variants": {name: {"tree": os.path.abspath(tree), "pure": pure} for name, tree, pure in variants},
        "workloads": workloads,
    }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
