#!/usr/bin/env python3
"""The compiled modules against their pure-Python source: the gain that puts a module in
logbus/compiled.py's MODULES (decision 0044).

Each workload calls one module's per-message function in a loop: the MQTT decoder on a
buffer of QoS 1 PUBLISH packets (3.1.1 and 5.0), the encoder's PUBLISH and PUBACK, the topic
trie's match over a thousand patterns. Each build ("variant": a source tree with its own
in-place build, and whether LOGBUS_PURE=1 is set; by default this tree pure against this
tree compiled) runs in a process of its own, and the processes take turns: one span of
``--span-ms`` each, the order alternating from round to round. This machine's speed drifts
by a quarter within minutes and other work comes and goes, so only the ratio of two spans
run one after the other is worth reading. Each process says which build it runs
(logbus.compiled.status()); the run fails when a variant runs another build than it names.

    python bench/compiled_bench.py --rounds 200
    python bench/compiled_bench.py --variant pure=.:pure --variant three=.:compiled \\
        --variant wire=/tmp/variant-wire:compiled
    python bench/compiled_bench.py --variant debian=.:pure \\
        --variant pyenv=/tmp/tree-pyenv:pure@/tmp/tree-pyenv/.venv/bin/python

A variant runs on the interpreter after its @ (default: the one running this script), so
that builds and interpreters can be compared in the same rounds.

Prints one JSON document: per workload, each variant's best and median ns per operation,
and the 10th, 50th and 90th percentiles over rounds of its span's time over the first
variant's span in the same round.
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


def worker() -> None:
    """Serve spans over stdin/stdout: ``WORKLOAD CALLS`` in, the seconds they took out."""
    from logbus import compiled

    built, why = compiled.status()
    workloads = _workloads()
    print(json.dumps({"compiled": built, "why": why, "python": sys.version.split()[0],
                      "ops": {k: ops for k, (_, ops) in workloads.items()}}), flush=True)  # fmt: skip
    for line in sys.stdin:
        name, calls = line.split()
        run = workloads[name][0]
        t0 = time.perf_counter()
        for _ in range(int(calls)):
            run()
        print(time.perf_counter() - t0, flush=True)


class Variant:
    """A worker process of one build, kept for the whole run."""

    def __init__(self, name: str, tree: str, pure: bool, python: str) -> None:
        self.name, self.tree, self.pure, self.python = name, os.path.abspath(tree), pure, python
        env = dict(os.environ)
        env.pop("LOGBUS_PURE", None)
        if pure:
            env["LOGBUS_PURE"] = "1"
        env["PYTHONPATH"] = self.tree
        self.proc = subprocess.Popen([python, os.path.abspath(__file__), "--worker"], cwd=self.tree,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert self.proc.stdout is not None
        hello = json.loads(self.proc.stdout.readline())
        if hello["compiled"] == pure:
            raise SystemExit(f"compiled_bench: {tree} runs {'compiled' if hello['compiled'] else 'pure'}, "
                             f"not as asked ({hello['why']})")  # fmt: skip
        self.why: str = hello["why"]
        self.version: str = hello["python"]
        self.ops: dict[str, int] = hello["ops"]

    def span(self, workload: str, calls: int) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{workload} {calls}\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200, help="spans per variant and workload")
    parser.add_argument("--span-ms", type=float, default=20.0, help="the length of one span")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME=TREE:pure|compiled[@PYTHON] (the first is the reference)")  # fmt: skip
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return 0
    specs = args.variant or [f"pure={ROOT}:pure", f"compiled={ROOT}:compiled"]
    variants: list[Variant] = []
    for spec in specs:
        name, _, rest = spec.partition("=")
        rest, _, python = rest.partition("@")
        tree, _, mode = rest.rpartition(":")
        if mode not in ("pure", "compiled") or not tree:
            parser.error(f"--variant {spec!r}: NAME=TREE:pure|compiled[@PYTHON]")
        variants.append(Variant(name, tree, mode == "pure", python or sys.executable))
    reference = variants[0]
    workloads: dict[str, Any] = {}
    try:
        for workload, ops in reference.ops.items():
            calls = 1  # calibrated on the reference: a span of about --span-ms
            while (spent := reference.span(workload, calls)) < args.span_ms / 1000 / 4:
                calls *= 2
            calls = max(1, round(calls * args.span_ms / 1000 / spent))
            for v in variants:
                v.span(workload, calls)  # warm
            times: dict[str, list[float]] = {v.name: [] for v in variants}
            for r in range(args.rounds):
                for v in variants if r % 2 == 0 else variants[::-1]:
                    times[v.name].append(v.span(workload, calls))
            entry: dict[str, Any] = {}
            for v in variants:
                ratios = [t / ref for t, ref in zip(times[v.name], times[reference.name])]
                entry[v.name] = {
                    "ns_per_op_best": round(min(times[v.name]) / (calls * ops) * 1e9, 1),
                    "ns_per_op_median": round(statistics.median(times[v.name]) / (calls * ops) * 1e9, 1),
                    f"time_over_{reference.name}": {q: round(_quantile(ratios, f), 3) for q, f in
                                                    (("p10", 0.1), ("median", 0.5), ("p90", 0.9))},
                }  # fmt: skip
            workloads[workload] = entry
            print(f"compiled_bench: {workload} done", file=sys.stderr, flush=True)
    finally:
        for v in variants:
            v.close()
    print(json.dumps({
        "python": sys.version.split()[0], "executable": os.path.realpath(sys.executable),
        "rounds": args.rounds, "span_ms": args.span_ms,
        "variants": {v.name: {"tree": v.tree, "pure": v.pure, "build": v.why, "python": v.python,
                              "version": v.version} for v in variants},  # fmt: skip
        "workloads": workloads,
    }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
