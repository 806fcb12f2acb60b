"""Which task held a CPU while the slowest messages of a latency run waited.

The latency workloads (``bench/mqtt_bench.py``, ``bench/amqp_bench.py``) list each
round's slowest messages with their send time on CLOCK_MONOTONIC. Record the scheduler
over the same run with the same clock, then give both here:

    perf sched record -k CLOCK_MONOTONIC -a -o sched.data &   # (kill -INT it after)
    python bench/mqtt_bench.py --target logbus --workloads latency --latency-client raw > run.json
    perf sched timehist -i sched.data > sched.txt
    python bench/sched_blame.py --run run.json --timehist sched.txt

For each round's slowest message, from its send to its delivery: every task of the
benched processes (``--comm``, python by default) that waited longer than --min-ms
for a CPU (its scheduling delay, and the CPU it waited on), and every other task that
ran longer than --min-ms on a CPU (a kernel thread such as kdamond, say). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any, Iterator


@dataclass(frozen=True)
class Slice:
    """One ``perf sched timehist`` line: ``task`` ran on ``cpu`` from ``start`` to ``end``
    (seconds), after waiting ``delay`` s for a CPU once woken."""

    end: float
    cpu: int
    task: str
    delay: float
    run: float

    @property
    def start(self) -> float:
        return self.end - self.run

    @property
    def comm(self) -> str:
        return self.task.split("[", 1)[0]


def parse_timehist(lines: Iterator[str]) -> Iterator[Slice]:
    """The slices of ``perf sched timehist`` output (its header and wake-up lines skipped)."""
    for line in lines:
        parts = line.split()
        if len(parts) != 6 or not parts[1].startswith("["):
            continue
        try:
            end, cpu = float(parts[0]), int(parts[1].strip("[]"))
            delay, run = float(parts[4]) / 1e3, float(parts[5]) / 1e3
        except ValueError:
            continue
        yield Slice(end, cpu, parts[2], delay, run)


def slowest_of(run: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, result) for every latency result in a bench's JSON that lists ``slowest``."""
    if isinstance(run, dict):
        if run.get("slowest"):
            yield path or "/", run
        for key, value in run.items():
            yield from slowest_of(value, f"{path}/{key}")
    elif isinstance(run, list):
        for i, value in enumerate(run):
            yield from slowest_of(value, f"{path}/{i}")


def blame(slices: list[Slice], sent: float, delivered: float, comm: str, min_s: float) -> dict[str, Any]:
    waits, holds = [], []
    for s in slices:
        if s.comm == comm:
            began = s.start - s.delay  # woken, waiting for a CPU
            if s.delay >= min_s and began < delivered and s.start > sent:
                waits.append({"task": s.task, "then_ran_on_cpu": s.cpu, "waited_ms": round(s.delay * 1e3, 3),
                              "from_s": round(began, 6)})
        elif s.run >= min_s and s.task != "<idle>" and s.start < delivered and s.end > sent:
            holds.append({"task": s.task, "cpu": s.cpu, "ran_ms": round(s.run * 1e3, 3), "from_s": round(s.start, 6)})
    return {"waits": waits, "holds": holds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="append", required=True, help="a latency bench's JSON (repeatable)")
    ap.add_argument("--timehist", required=True, help="perf sched timehist output over the same runs")
    ap.add_argument("--comm", default="python", help="the command name of the benched processes")
    ap.add_argument("--min-ms", type=float, default=1.0, help="waits and holds shorter than this are left out")
    a = ap.parse_args()
    with open(a.timehist) as f:
        slices = list(parse_timehist(f))
    if not slices:
        sys.exit(f"sched_blame: no scheduler slices in {a.timehist}")
    first, last = min(s.start for s in slices), max(s.end for s in slices)
    out = []
    for name in a.run:
        with open(name) as f:
            run = json.load(f)
        for where, result in slowest_of(run):
            top = result["slowest"][0]
            sent = top["sent_s"]
            delivered = sent + top["ms"] / 1e3
            entry: dict[str, Any] = {"run": name, "result": where, "max_ms": top["ms"], "sent_s": sent}
            if not first <= sent <= last:
                entry["recorded"] = False  # the scheduler was not recorded then
            else:
                entry.update(blame(slices, sent, delivered, a.comm, a.min_ms / 1e3))
            out.append(entry)
    print(json.dumps({"bench": "sched_blame", "min_ms": a.min_ms, "slowest": out}, indent=1))


if __name__ == "__main__":
    main()
