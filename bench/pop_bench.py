#!/usr/bin/env python3
"""Pop consumption, delayed delivery and pending-timer memory over HTTP (issue 16).

Three workloads, each on a topic of its own (``pop-bench-<workload>-<pid>-<time>``,
one partition, the broker's default flush policy unless ``--flush``) read by one pop
group (``--group``), which is created by an empty receive before anything is published:

    pop    --messages messages of --size bytes published first (by --publishers client
           processes, --publish-batch per request); then --members client processes
           (processes, not threads: the GIL) each on its own HTTP keep-alive connection
           receive --batch messages with --invisible-ms and ack their handles in one
           request, until a receive comes back empty. msg/s, broker CPU us per message,
           and the receive+ack round trip (one receive and its ack) p50/p99 in ms.
    delay  --delayed messages published with ``deliver_at`` spread over one second that
           starts --delay-lead seconds ahead (--delay-spread-ms 0: all due in the same
           millisecond). --delay-members processes poll receive (--delay-batch, an empty
           receive waits --poll-ms) from half a second before that second; each message
           carries its due time in its value, so the lateness of each is the time a
           receive returned it minus its due time (p50/p99/max). Messages are acked at
           the end, so a sampler polling GET /api/pop every --sample-ms sees how many
           are released (ready + invisible) over time: the release rate, and the release
           lateness of every message (the k-th message in due order counts as released
           at the first sample showing k released; an upper bound by the sample
           interval), with its p50/p90/p99/max over all the messages.
           --delay-members 0: nobody receives, only the release is measured.
    rss    broker VmRSS (and VmHWM) from /proc before and after publishing --pending
           messages with ``delay_ms`` one hour (--pending-delay-ms), and the publish rate;
           with --ready N, then after N more messages that wait ready in the group.

The broker is a `logbus serve` of its own (temp data dir, HTTP only, loopback, a free
port) unless --url and --broker-pid name a running one; only the pid it started is
stopped. Broker CPU is utime+stime from /proc/<pid>/stat; client CPU is each client
process's own getrusage. Every loop is bounded (--timeout per phase). Progress goes to
stderr, one JSON document to stdout. Lost, duplicated, redelivered or early messages
fail the run, and so does an ack that reports a failure.

    python bench/pop_bench.py                           # pop, delay, rss with the defaults
    python bench/pop_bench.py --workloads pop --messages 200000
    python bench/pop_bench.py --url http://127.0.0.1:15672 --broker-pid 1234 --workloads delay

This file is the command line and the orchestration (the broker, the workloads in turn,
JSON); bench/pop_workloads.py has the workloads, bench/pop_client.py the HTTP client
processes, bench/common.py what the bench scripts share (/proc, quantiles, the broker).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LOOPBACK, BenchError, log_problems, start_logbus, stop_logbus, tail
from pop_client import MAX_PUBLISH, MAX_RECEIVE, Http, log
from pop_workloads import RUN

WORKLOADS = ("pop", "delay", "rss")


# -- broker ------------------------------------------------------------------------------


def start_broker(workdir: str, extra: list[str], timeout: float) -> tuple[subprocess.Popen[bytes], str]:
    """`logbus serve` with an HTTP listener only, on a free loopback port (from its ready file)."""
    proc, addresses = start_logbus(workdir, {"http": LOOPBACK}, extra, timeout)
    return proc, "http://" + addresses["http"]


def stop_broker(proc: subprocess.Popen[bytes]) -> None:
    stop_logbus(proc, grace=60)


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: pop,delay,rss")
    ap.add_argument("--url", help="a running broker's HTTP listener, http://[user:password@]host:port"
                    " (default credentials guest/guest; needs --broker-pid)")
    ap.add_argument("--broker-pid", type=int, help="its pid, for CPU and RSS from /proc")
    ap.add_argument("--broker-arg", action="append", default=[],
                    help="an extra `logbus serve` argument for the broker this script starts (repeatable)")
    ap.add_argument("--dir", help="scratch directory for the broker's data (default: a temp dir)")
    ap.add_argument("--group", default="bench", help="the pop group")
    ap.add_argument("--flush", help="flush policy of the bench topics (default: the broker's)")
    ap.add_argument("--size", type=int, default=100, help="message value bytes")
    ap.add_argument("--publishers", type=int, default=4, help="publishing client processes")
    ap.add_argument("--publish-batch", type=int, default=MAX_PUBLISH, help="messages per publish request")
    ap.add_argument("--members", type=int, default=4, help="pop group member processes")
    ap.add_argument("--messages", type=int, default=100_000, help="pop: messages")
    ap.add_argument("--batch", type=int, default=32, help="pop: messages per receive")
    ap.add_argument("--invisible-ms", type=int, default=30_000, help="invisible time of every receive")
    ap.add_argument("--delayed", type=int, default=100_000, help="delay: messages")
    ap.add_argument("--delay-lead", type=float, default=20.0,
                    help="delay: seconds from the start of publishing to the due second")
    ap.add_argument("--delay-spread-ms", type=int, default=1000, help="delay: due times spread over this")
    ap.add_argument("--delay-members", type=int, default=4,
                    help="delay: member processes (0: nobody receives, only the release is measured)")
    ap.add_argument("--delay-batch", type=int, default=MAX_RECEIVE, help="delay: messages per receive")
    ap.add_argument("--poll-ms", type=float, default=10.0, help="delay: a member's wait after an empty receive")
    ap.add_argument("--sample-ms", type=float, default=10.0, help="delay: GET /api/pop interval")
    ap.add_argument("--pending", type=int, default=1_000_000, help="rss: pending delayed messages")
    ap.add_argument("--pending-delay-ms", type=int, default=3_600_000, help="rss: their delay")
    ap.add_argument("--ready", type=int, default=0,
                    help="rss: then this many messages ready in the group (not delayed), for comparison")
    ap.add_argument("--settle", type=float, default=2.0, help="rss: seconds before each RSS reading")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per phase")
    args = ap.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    bad = [w for w in workloads if w not in RUN]
    if bad or not workloads:
        ap.error(f"unknown workloads {bad}; choose from {','.join(WORKLOADS)}")
    if (args.url is None) != (args.broker_pid is None):
        ap.error("--url and --broker-pid go together")
    if not 1 <= args.batch <= MAX_RECEIVE or not 1 <= args.delay_batch <= MAX_RECEIVE:
        ap.error(f"--batch and --delay-batch take 1 to {MAX_RECEIVE}")
    if min(args.messages, args.delayed, args.pending, args.members, args.publishers) < 1 or args.delay_members < 0:
        ap.error("message counts, --members and --publishers must be at least 1")
    if not 1 <= args.publish_batch <= MAX_PUBLISH:
        ap.error(f"--publish-batch takes 1 to {MAX_PUBLISH}")

    out: dict[str, Any] = {
        "bench": "pop_bench", "args": vars(args), "commit": git_commit(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release()},
        "loadavg_start": os.getloadavg(),
    }
    proc = None
    workdir = None
    try:
        if args.url is None:
            workdir = tempfile.mkdtemp(prefix="logbus-popbench-", dir=args.dir)
            proc, url = start_broker(workdir, args.broker_arg, 60)
            pid = proc.pid
            log(f"started logbus serve (pid {pid}) at {url} in {workdir}")
        else:
            url, pid = args.url, args.broker_pid
        out["broker"] = {"url": url, "pid": pid, "started_here": proc is not None}
        http_ = Http(url, args.timeout)
        for name in workloads:
            out[name] = RUN[name](args, url, pid, http_)
            out[name]["loadavg_end"] = os.getloadavg()
        http_.close()
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"the broker exited with {proc.returncode}")
        if workdir is not None:  # a broker that complained is worth a look, whatever the figures
            problems = out["broker_log_problems"] = log_problems(os.path.join(workdir, "broker.log"))
            if problems["count"]:
                log(f"the broker logged {problems['count']} warnings or errors, first: {problems['first'][0]}")
    except BenchError as exc:
        log(f"FAILED: {exc}")
        if workdir is not None:
            log("broker log tail:\n" + tail(os.path.join(workdir, "broker.log")))
        return 1
    finally:
        if proc is not None:
            stop_broker(proc)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    out["loadavg_end"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
