#!/usr/bin/env python3
"""What a group commit's sync costs through io_uring, by how many files it covers.

    python bench/uring_sync_probe.py --syncs 1000 --rounds 2

Modes, interleaved round by round, each on fresh files: 200 B written to each file, then
synced through ``logbus.core.log.uring.Ring`` and waited for:

- ``one``: one file with zeros ahead (a segment, decision 0016);
- ``two``: that file and one that grows at each write (the state store's WAL, decision
  0025), synced in parallel (two kernel workers);
- ``two_linked``: the same two, one after the other by one worker (``IOSQE_IO_LINK``).

Prints one JSON document: per mode and round, the time from submission to completion
(p50/p99/max, µs) and the process's CPU per sync (µs; the kernel workers are threads of
the process, so their time counts).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import shutil
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from logbus.core.log.uring import Ring  # noqa: E402

MODES = ("one", "two", "two_linked")


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def run(ring: Ring, directory: str, mode: str, syncs: int, size: int) -> dict[str, Any]:
    zeros = os.open(os.path.join(directory, f"{mode}.segment"), os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    grows = os.open(os.path.join(directory, f"{mode}.wal"), os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        os.pwrite(zeros, bytes(syncs * size + 4096), 0)
        os.fsync(zeros)
        fds = [zeros] if mode == "one" else [zeros, grows]
        record = b"x" * size
        took: list[float] = []
        cpu0 = cpu_seconds()
        for i in range(syncs):
            os.pwrite(zeros, record, i * size)
            if len(fds) > 1:
                os.write(grows, record)
            t0 = time.perf_counter()
            ring.fdatasync(fds, i, linked=mode == "two_linked")
            while not ring.reap():
                select.select([ring.eventfd], [], [], 5.0)
            took.append((time.perf_counter() - t0) * 1e6)
        cpu = (cpu_seconds() - cpu0) / syncs * 1e6
    finally:
        os.close(zeros)
        os.close(grows)
    took.sort()
    return {"p50_us": took[len(took) // 2], "p99_us": took[int(len(took) * 0.99)], "max_us": took[-1],
            "cpu_us_per_sync": cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--syncs", type=int, default=1000, help="syncs per mode and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", type=int, default=200, help="bytes written to each file before a sync")
    ap.add_argument("--dir", default=None, help="a directory on the disk to measure (default: a temp dir)")
    args = ap.parse_args()
    if args.syncs < 1 or args.rounds < 1:
        ap.error("--syncs and --rounds must be at least 1")
    ring = Ring.open()
    if ring is None:
        print(json.dumps({"error": "io_uring is not available here"}))
        sys.exit(1)
    directory = tempfile.mkdtemp(prefix="uring-probe-", dir=args.dir)
    out: dict[str, Any] = {"bench": "uring_sync_probe", "args": vars(args), "rounds": []}
    try:
        for _ in range(args.rounds):
            out["rounds"].append({mode: run(ring, directory, mode, args.syncs, args.size) for mode in MODES})
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
