#!/usr/bin/env python3
"""Append throughput of the log, against plain sequential write + fdatasync.

For each record size x flush policy x partition count: keep ``--outstanding`` appends
in flight (each of ``--batch`` records, round-robin over the partitions; completion by
callback, or by Deferred with ``--api deferred``) until
``--records`` records are acknowledged (durable under the policy), then close the log
(one final flush). The baseline writes the same batch bytes with ``os.write`` to one file
and calls ``fdatasync`` once at the end. Prints one JSON document.

    python bench/log_append.py --records 200000 --sizes 100,1024 --partitions 1,1000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from twisted.internet import reactor  # noqa: E402

from logbus.core.log import LogManager, Record, TopicConfig  # noqa: E402
from logbus.core.log import batch as B  # noqa: E402


def baseline(directory: str, payload_: bytes, appends: int, batch: int) -> dict[str, float]:
    """The same records, each append's batch written with one os.write; one fdatasync."""
    data = bytes(B.build([Record(None, payload_)] * batch, 0))
    path = os.path.join(directory, "baseline.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t0 = time.perf_counter()
    for _ in range(appends):
        os.write(fd, data)
    os.fdatasync(fd)
    dt = time.perf_counter() - t0
    os.close(fd)
    os.unlink(path)
    total = len(data) * appends
    payload = len(payload_) * appends * batch
    return {
        "seconds": dt,
        "records_per_s": appends * batch / dt,
        "payload_mb_per_s": payload / dt / 1e6,
        "disk_mb_per_s": total / dt / 1e6,
        "disk_bytes": total,
    }


def run_log(directory: str, payload: bytes, records: int, batch: int, policy: str, partitions: int,
            outstanding: int, segment_bytes: int, use_deferred: bool = False) -> dict[str, float]:
    """Drive the log from inside a running reactor; returns the figures."""
    lm = LogManager(directory, reactor, max_open_files=4096)
    cfg = TopicConfig(partitions=partitions, flush=policy, segment_bytes=segment_bytes)
    topic = lm.open_topic("bench", cfg, create=True)
    parts = topic.partitions
    recs = [Record(None, payload)] * batch
    appends = records // batch
    state = {"t0": 0.0}
    issued = done = inflight = 0
    looping = False
    finished: list[float] = []

    def on_done(r: object) -> None:
        nonlocal done, inflight
        if isinstance(r, Exception):
            print(r, file=sys.stderr)
            reactor.crash()
            return
        inflight -= 1
        done += 1
        if done == appends:
            finished.append(time.perf_counter())
        elif not looping:
            pump()

    def on_deferred_done(r: object) -> None:
        on_done(r)

    def on_err(f: object) -> None:
        print(f, file=sys.stderr)
        reactor.crash()

    def pump() -> None:
        """Keep ``outstanding`` appends in flight (completions may run inside append)."""
        nonlocal issued, inflight, looping
        looping = True
        try:
            while True:
                room = min(outstanding - inflight, appends - issued)
                if room <= 0:
                    break
                i = issued
                issued += room
                inflight += room
                for k in range(i, i + room):
                    if use_deferred:
                        parts[k % partitions].append(recs).addCallbacks(on_deferred_done, on_err)
                    else:
                        parts[k % partitions].append(recs, callback=on_done)
        finally:
            looping = False

    cpu0 = time.process_time()
    state["t0"] = time.perf_counter()
    pump()

    result: dict[str, float] = {}

    def check() -> None:
        if finished:
            t_ack = finished[0]
            lm.close()  # final flush of every policy, clean marker
            t_end = time.perf_counter()
            size = sum(p.size_bytes for p in parts)
            n = appends * batch
            acked, total = t_ack - state["t0"], t_end - state["t0"]
            cpu = time.process_time() - cpu0
            result.update(
                seconds_acked=acked,
                seconds_with_close=total,
                records_per_s=n / acked,
                payload_mb_per_s=n * len(payload) / acked / 1e6,
                records_per_s_with_close=n / total,
                payload_mb_per_s_with_close=n * len(payload) / total / 1e6,
                disk_bytes=size,
                cpu_seconds=cpu,
                cpu_us_per_record=cpu / n * 1e6,
            )
            reactor.crash()
        else:
            reactor.callLater(0.005, check)

    reactor.callLater(0, check)
    reactor.run(installSignalHandlers=False)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000, help="records per case")
    ap.add_argument("--sizes", default="100,1024", help="record value sizes in bytes")
    ap.add_argument("--policies", default="none,interval:50,sync")
    ap.add_argument("--partitions", default="1,1000")
    ap.add_argument("--outstanding", type=int, default=1000, help="appends in flight")
    ap.add_argument("--batch", type=int, default=1, help="records per append call")
    ap.add_argument("--segment-bytes", type=int, default=128 * 1024 * 1024)
    ap.add_argument("--api", choices=["callback", "deferred"], default="callback",
                    help="how completions are delivered: Partition.append(callback=) or its Deferred")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args()

    out: dict[str, object] = {
        "bench": "log_append",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "args": vars(args),
        "baseline": {},
        "cases": [],
    }
    scratch = tempfile.mkdtemp(prefix="logbus-bench-", dir=args.dir)
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            payload = os.urandom(size)
            out["baseline"][str(size)] = baseline(scratch, payload, args.records // args.batch, args.batch)  # type: ignore[index]
            for parts in [int(p) for p in args.partitions.split(",")]:
                for policy in args.policies.split(","):
                    d = os.path.join(scratch, f"{size}-{parts}-{policy.replace(':', '')}")
                    r = run_log(d, payload, args.records, args.batch, policy, parts, args.outstanding, args.segment_bytes,
                                args.api == "deferred")
                    r.update(size=size, partitions=parts, policy=policy)
                    out["cases"].append(r)  # type: ignore[union-attr]
                    shutil.rmtree(d, ignore_errors=True)
                    print(json.dumps(r), file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    out["ratios"] = ratios(out)
    print(json.dumps(out, indent=2))


def ratios(out: dict[str, Any]) -> dict[str, float]:
    """The issue's targets as ratios: policy none vs the baseline (payload MB/s, the log's
    final flush included as the baseline's fdatasync is), and N partitions vs 1
    (acknowledged records/s) for each size and policy."""
    r: dict[str, float] = {}
    cases = {(c["size"], c["partitions"], c["policy"]): c for c in out["cases"]}
    for (size, parts, policy), c in cases.items():
        if policy == "none":
            base = out["baseline"][str(size)]
            r[f"none_vs_baseline/{size}B/{parts}p"] = c["payload_mb_per_s_with_close"] / base["payload_mb_per_s"]
        one = cases.get((size, 1, policy))
        if parts != 1 and one:
            r[f"{parts}p_vs_1p/{size}B/{policy}"] = c["records_per_s"] / one["records_per_s"]
    return r


if __name__ == "__main__":
    main()
