#!/usr/bin/env python3
"""What durability costs on this disk: fdatasync per file vs syncfs, for 1 and N files.

    python bench/fsync_probe.py --files 1000 --rounds 3 --dir /path/on/the/data/disk

Prints one JSON document (microseconds). Used for docs/decisions/0002.
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
from concurrent.futures import ThreadPoolExecutor

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--single", type=int, default=300, help="write+fdatasync loops on one file")
    ap.add_argument("--size", type=int, default=170, help="bytes appended per write")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="logbus-fsync-", dir=args.dir)
    buf = b"x" * args.size
    out: dict[str, object] = {"bench": "fsync_probe", "args": vars(args)}
    try:
        fd = os.open(os.path.join(d, "one"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        t0 = time.perf_counter()
        for _ in range(args.single):
            os.write(fd, buf)
            os.fdatasync(fd)
        out["one_file_write_fdatasync_us"] = (time.perf_counter() - t0) / args.single * 1e6
        os.close(fd)
        fds = [os.open(os.path.join(d, f"p{i}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND) for i in range(args.files)]

        def round_(sync: object) -> float:
            t = 0.0
            for _ in range(args.rounds):
                for f in fds:
                    os.write(f, buf)
                t0 = time.perf_counter()
                sync()  # type: ignore[operator]
                t += time.perf_counter() - t0
            return t / args.rounds * 1e6

        out["n_files_fdatasync_each_us_per_round"] = round_(lambda: [os.fdatasync(f) for f in fds])
        with ThreadPoolExecutor(16) as ex:
            out["n_files_fdatasync_16_threads_us_per_round"] = round_(lambda: list(ex.map(os.fdatasync, fds)))
        out["n_files_syncfs_us_per_round"] = round_(lambda: _libc.syncfs(fds[0]))
        for f in fds:
            os.close(f)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
