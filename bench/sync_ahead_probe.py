#!/usr/bin/env python3
"""What a small write + fdatasync costs on this disk, by what lies ahead of the write.

    python bench/sync_ahead_probe.py --writes 3000 --rounds 3

Modes, interleaved round by round, each on a fresh file:

- ``append``: every write makes the file longer (a log without zeros ahead);
- ``zeros``: the file's space was written with zeros first (decision 0016);
- ``falloc``: the space was reserved with ``fallocate`` (unwritten extents, size set);
- ``falloc_keep``: reserved with ``FALLOC_FL_KEEP_SIZE`` (the size still grows).

Prints one JSON document: per mode and round, the fdatasync time's p50/p90/p99/max (µs).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import shutil
import tempfile
import time

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
FALLOC_FL_KEEP_SIZE = 1
MODES = ("append", "zeros", "falloc", "falloc_keep")


def prepare(fd: int, mode: str, total: int) -> None:
    if mode == "zeros":
        os.pwrite(fd, bytes(total), 0)
    elif mode.startswith("falloc"):
        flags = FALLOC_FL_KEEP_SIZE if mode == "falloc_keep" else 0
        if _libc.fallocate(fd, flags, 0, total) != 0:
            raise OSError(ctypes.get_errno(), "fallocate")
    os.fsync(fd)


def run(directory: str, mode: str, writes: int, size: int) -> dict[str, float]:
    path = os.path.join(directory, mode)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        prepare(fd, mode, writes * size + 4096)
        data = b"a" * size
        took = []
        for i in range(writes):
            os.pwrite(fd, data, i * size)
            t0 = time.perf_counter_ns()
            os.fdatasync(fd)
            took.append((time.perf_counter_ns() - t0) / 1000)
    finally:
        os.close(fd)
        os.unlink(path)
    took.sort()
    n = len(took)
    return {
        "p50_us": round(took[n // 2], 1),
        "p90_us": round(took[n * 9 // 10], 1),
        "p99_us": round(took[n * 99 // 100], 1),
        "max_us": round(took[-1], 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writes", type=int, default=3000, help="write + fdatasync per mode and round")
    ap.add_argument("--size", type=int, default=300, help="bytes per write")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="a directory on the disk to measure")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="logbus-sync-ahead-", dir=args.dir)
    out: dict[str, object] = {"bench": "sync_ahead_probe", "args": vars(args)}
    rounds = []
    try:
        for r in range(args.rounds):
            order = MODES[r % len(MODES):] + MODES[: r % len(MODES)]
            rounds.append({m: run(d, m, args.writes, args.size) for m in order})
    finally:
        shutil.rmtree(d, ignore_errors=True)
    out["rounds"] = rounds
    out["median_p50_us"] = {m: sorted(x[m]["p50_us"] for x in rounds)[len(rounds) // 2] for m in MODES}
    out["median_p99_us"] = {m: sorted(x[m]["p99_us"] for x in rounds)[len(rounds) // 2] for m in MODES}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
