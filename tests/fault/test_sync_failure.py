"""A failed sync under a real `logbus serve`: Debian's strace attaches to the broker and
makes every ``fdatasync`` and ``syncfs`` fail with EIO, and every ``io_uring_enter``
too, so the io_uring sync path falls back to ``fdatasync`` on the reactor thread and
fails the same way (no mock of the disk).

What must hold (docs/operations.md): nothing is confirmed that was not synced; the
partition goes offline and stays offline once the fault is gone (a later sync that
succeeds proves nothing about the pages the failed one lost), readable up to its last
durable offset; /healthz says so; a restart brings it back with every confirmed message.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.fault.faultkit import serving, KAFKA_TOPIC, HealthProbe, Publishers, read_back
from tests.serverproc import LogbusServer


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LogbusServer]:
    with serving(tmp_path, needs="strace") as s:
        yield s


class FailingSyncs:
    """strace attached to the broker: its syncs fail with EIO until ``detach``."""

    def __init__(self, pid: int) -> None:
        self.proc = subprocess.Popen(
            ["strace", "-f", "-p", str(pid), "-e", "trace=fdatasync,syncfs,io_uring_enter",
             "-e", "inject=fdatasync:error=EIO", "-e", "inject=syncfs:error=EIO",
             "-e", "inject=io_uring_enter:error=EIO", "-o", "/dev/null"],
            stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # "Process N attached" for each thread
            line = self.proc.stderr.readline()
            if "attached" in line:
                time.sleep(0.2)  # the other threads' lines follow at once
                return
            if not line and self.proc.poll() is not None:
                pytest.skip(f"strace cannot attach here (exit {self.proc.returncode})")
        raise AssertionError("strace did not attach")

    def detach(self) -> None:
        self.proc.send_signal(signal.SIGINT)  # strace detaches and leaves the broker running
        self.proc.wait(10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()


def test_a_failed_sync_takes_the_partition_offline_and_confirms_nothing_it_did_not_sync(
        server: LogbusServer) -> None:
    s = server
    with HealthProbe(s) as probe:
        pubs = Publishers(s)
        pubs.round(10)
        assert not any(pubs.refused.values()), pubs.refused
        confirmed_before = {p: list(v) for p, v in pubs.confirmed.items()}

        syncs = FailingSyncs(s.pid)
        pubs.round(5)
        syncs.detach()
        # every publish during the fault was refused: none of them was durable
        assert {p: len(v) for p, v in pubs.confirmed.items()} == {p: len(v) for p, v in confirmed_before.items()}
        assert all(pubs.refused.values()), pubs.refused
        failing = probe.wait_for(503)
        assert any("offline after a failed sync" in r for r in failing["reasons"]), failing

        pubs.round(3)  # the fault is gone, the partitions stay offline until a restart
        assert {p: len(v) for p, v in pubs.confirmed.items()} == {p: len(v) for p, v in confirmed_before.items()}
        assert probe.latest()[0] == 503
        pubs.close()
        # the reactor never stalled behind the failing syncs: every probe was answered (its
        # latency is a bench's business, bench/mqtt_sessions_bench.py measures /healthz p99)
        unanswered = [body for _, status, body in probe.samples if status == 0]
        assert probe.samples and not unanswered, unanswered

    assert "offline" in s.log_text() and f"{KAFKA_TOPIC}/0" in s.log_text()
    assert s.kill() == -9  # the operator's restart, the hard way
    s.start()
    with HealthProbe(s) as probe:
        probe.wait_for(200)
    got = read_back(s)
    for protocol, bodies in confirmed_before.items():
        missing = set(bodies) - set(got[protocol])
        assert not missing, f"{protocol}: {len(missing)} confirmed messages lost"
    pubs = Publishers(s)
    pubs.round(3)
    assert not any(pubs.refused.values()), pubs.refused
    pubs.close()
