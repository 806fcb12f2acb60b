"""examples/iot_pipeline.py against a real ``logbus serve`` holding the data directory:
its ``--demo`` never writes that directory itself. With the broker's Kafka listener it
produces through the broker (and the pipeline aggregates what it produced); without
one it stops with an error that says why, and nothing is written."""

from __future__ import annotations

import runpy
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.serverproc import REPO_ROOT, LogbusServer, logbus_env

EXAMPLE = REPO_ROOT / "examples" / "iot_pipeline.py"


def run_example(server: LogbusServer, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLE), "--data-dir", str(server.data_dir), *args],
                          cwd=cwd, env=logbus_env(), capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def log_files(server: LogbusServer) -> dict[str, bytes]:
    root = server.data_dir / "log"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_demo_refuses_a_held_data_directory_without_a_broker_to_produce_to(logbus_server: Any,
                                                                           tmp_path: Path) -> None:
    server = logbus_server(listeners={"amqp": "off", "mqtt": "off", "kafka": "off", "http": "off"})
    before = log_files(server)
    done = run_example(server, tmp_path, "--demo", "2000", "--once", "--bootstrap", "127.0.0.1:1",
                       "--out", str(tmp_path / "agg"))
    assert done.returncode != 0
    assert f"data directory {server.data_dir} is in use by another logbus (pid {server.pid})" in done.stderr
    assert "--bootstrap" in done.stderr and "nothing was written" in done.stderr
    assert "Traceback" not in done.stderr
    assert log_files(server) == before and not (server.data_dir / "log" / "telemetry").exists()
    assert not (tmp_path / "agg").exists() and server.running()


def test_demo_produces_through_the_running_broker_and_the_pipeline_reads_it(logbus_server: Any,
                                                                           tmp_path: Path) -> None:
    server = logbus_server(listeners={"amqp": "off", "mqtt": "off", "http": "off"}, anonymous_admin=False)
    out = tmp_path / "agg"
    done = run_example(server, tmp_path, "--demo", "6000", "--once", "--bootstrap", server.addresses["kafka"],
                       "--out", str(out))
    assert done.returncode == 0, done.stderr[-5000:]
    assert f"6000 sample readings produced through the broker at {server.addresses['kafka']}" in done.stdout
    assert "created topic 'telemetry' with 2 partitions" in server.log_text()
    got = {(r["minute"].timestamp(), r["device"]): r["readings"] for r in pq.read_table(out).to_pylist()}
    # readings over 300 s in one-minute windows: those that end 2 minutes (the watermark)
    # before the last reading are closed and written
    demo = runpy.run_path(str(EXAMPLE))
    sample = list(demo["readings"](6000))
    watermark = sample[-1][2] // 1000 - 120
    expected: Counter[tuple[float, str]] = Counter()
    for dev, _body, ts in sample:
        minute = ts // 1000 // 60 * 60
        if minute + 60 <= watermark:
            expected[(float(minute), dev.decode())] += 1
    assert got == expected and 0 < sum(got.values()) < 6000
    assert server.running()
