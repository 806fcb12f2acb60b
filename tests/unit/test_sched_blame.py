"""bench/sched_blame.py on a known scheduler trace: which task waited for a CPU, and
which held one, while the slowest message of a run was on its way."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bench_path import BENCH, bench_on_path

# perf sched timehist's layout: time, [cpu], task, wait, sched delay, run (ms); a
# wake-up line and the header have other shapes and are skipped
TIMEHIST = """\
           time    cpu  task name                       wait time  sch delay   run time
                        [tid/pid]                          (msec)     (msec)     (msec)
--------------- ------  ------------------------------  ---------  ---------  ---------
   100.001000 [0000]  python[10]                          0.500      0.010      0.100
   100.001500 [0001]  python[11]                                               awakened: python[10]
   100.006000 [0001]  kdamond.0[77]                     510.000      0.000      4.500
   100.006300 [0000]  python[10]                          4.200      4.100      0.200
   100.006400 [0000]  <idle>                              0.000      0.000      9.000
   100.020000 [0001]  kworker/1:1[44]                     0.000      0.000      0.500
   100.030000 [0001]  kdamond.0[77]                     510.000      0.000      3.000
"""


@pytest.fixture(scope="module")
def blame_mod() -> Iterator[Any]:
    with bench_on_path():
        import sched_blame
        yield sched_blame


def test_lines_are_parsed_into_slices(blame_mod: Any) -> None:
    slices = list(blame_mod.parse_timehist(iter(TIMEHIST.splitlines())))
    assert [s.task for s in slices] == ["python[10]", "kdamond.0[77]", "python[10]", "<idle>",
                                         "kworker/1:1[44]", "kdamond.0[77]"]
    k = slices[1]
    assert (k.cpu, k.comm) == (1, "kdamond.0")
    assert k.start == pytest.approx(100.0015) and k.end == pytest.approx(100.006)


def test_the_wait_and_the_holder_in_the_window_are_named(blame_mod: Any) -> None:
    slices = list(blame_mod.parse_timehist(iter(TIMEHIST.splitlines())))
    found = blame_mod.blame(slices, sent=100.0015, delivered=100.0063, comm="python", min_s=0.001)
    assert found["waits"] == [{"task": "python[10]", "then_ran_on_cpu": 0, "waited_ms": 4.1, "from_s": 100.002}]
    # the idle task and what ran outside the window (the later kdamond run) are not blamed
    assert found["holds"] == [{"task": "kdamond.0[77]", "cpu": 1, "ran_ms": 4.5, "from_s": 100.0015}]
    quiet = blame_mod.blame(slices, sent=100.010, delivered=100.011, comm="python", min_s=0.001)
    assert quiet == {"waits": [], "holds": []}


def test_the_script_reads_a_run_and_a_trace(tmp_path: Path) -> None:
    trace = tmp_path / "sched.txt"
    trace.write_text(TIMEHIST)
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"rounds": [{"logbus": {"latency": {"slowest": [{"sent_s": 100.0015, "ms": 4.8}]}}},
                                          {"logbus": {"latency": {"slowest": [{"sent_s": 200.0, "ms": 1.0}]}}}]}))
    proc = subprocess.run([sys.executable, f"{BENCH}/sched_blame.py", "--run", str(run), "--timehist", str(trace)],
                          capture_output=True, text=True, timeout=60, check=True)
    out = json.loads(proc.stdout)["slowest"]
    assert [(e["result"], e["max_ms"]) for e in out] == [("/rounds/0/logbus/latency", 4.8),
                                                         ("/rounds/1/logbus/latency", 1.0)]
    assert out[0]["holds"][0]["task"] == "kdamond.0[77]"
    assert out[1]["recorded"] is False  # sent after the trace ended
