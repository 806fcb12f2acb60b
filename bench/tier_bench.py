#!/usr/bin/env python3
"""Kafka fetch throughput from remote segments against local ones (issue 48), on one
`logbus serve --remote-storage` and a real S3-compatible store (SeaweedFS, `weed mini`).

Two topics get the same --mb MB of records: ``local`` (not tiered) and ``tiered``
(remote.storage.enable, local.retention.bytes of one segment, so all but its last
segment are read from the bucket once uploaded). Each round restarts the broker (its
read cache is emptied at start) and reads, with librdkafka (confluent-kafka), every
record of each topic from offset 0:

    remote-cold   tiered, the cache empty: every byte fetched from the store first
    remote-warm   tiered again: from the cache
    local         the local topic (from the page cache)

(the order of local and the remote pair swapped each round). Reported per read: MB/s,
records/s and the broker's CPU seconds; then medians over rounds and the ratios
remote/local. JSON on stdout, progress on stderr.

    python bench/tier_bench.py --rounds 3 --mb 300
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import LOOPBACK, BenchError, cpu_split, start_logbus, stop_logbus  # noqa: E402

from tests.remote_store import RemoteStore  # noqa: E402

SEGMENT = 8 << 20


def produce(addr: str, topic: str, mb: int, size: int) -> int:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": addr, "linger.ms": 5, "batch.size": 1 << 20, "acks": "all"})
    n = (mb << 20) // size
    value = b"v" * size
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, key=b"%d" % (i % 16))
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(120)
    del p  # librdkafka's handle goes with it (no reconnects to a broker restarted later)
    if left:
        raise BenchError(f"records of {topic} not acknowledged")
    return n


def read_all(addr: str, topic: str, n: int, pid: int) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": addr, "group.id": f"bench-{time.time_ns()}", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100, "queued.max.messages.kbytes": 256 << 10})
    c.assign([TopicPartition(topic, 0, 0)])
    got = size = 0
    cpu0 = sum(cpu_split(pid))
    start = time.monotonic()
    deadline = start + 600
    while got < n:
        if time.monotonic() > deadline:
            raise BenchError(f"{topic}: {got} of {n} records read in 600 s")
        for m in c.consume(1000, 1.0):
            if m.error():
                raise BenchError(f"{topic}: {m.error()}")
            got += 1
            size += len(m.value())
    took = time.monotonic() - start
    cpu = sum(cpu_split(pid)) - cpu0
    c.close()
    return {"mb_s": round(size / took / 1e6, 1), "records_s": round(got / took), "seconds": round(took, 2),
            "broker_cpu_s": round(cpu, 2)}


def uploaded(store: RemoteStore, data: Path) -> bool:
    from logbus.core.log.manifest import MANIFEST_NAME, Manifest

    try:
        m = Manifest.decode(store.read(f"bench/tiered/0/{MANIFEST_NAME}"))
    except Exception:  # noqa: BLE001 (not written yet)
        return False
    logs = sorted((data / "log" / "tiered" / "0").glob("*.log"))
    return len(logs) <= 2 and all(int(f.name[:20]) < m.end_offset for f in logs[:-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mb", type=int, default=200, help="MB produced to each topic")
    ap.add_argument("--size", type=int, default=10_000, help="bytes per record value")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tier-bench-"))
    (work / "s3").mkdir()
    store = RemoteStore(work / "s3")
    store.start()
    os.environ.update(store.env)
    extra = ["--remote-storage", store.url("bench"), "--remote-storage-endpoint", store.endpoint]
    proc = None
    try:
        proc, addrs = start_logbus(str(work), {"kafka": LOOPBACK}, extra)
        addr = addrs["kafka"]
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": addr})
        common = {"segment.bytes": str(SEGMENT), "flush": "none"}
        for f in admin.create_topics([
                NewTopic("local", 1, 1, config=common),
                NewTopic("tiered", 1, 1, config={**common, "remote.storage.enable": "true",
                                                 "local.retention.bytes": str(SEGMENT)})]).values():
            f.result(30)
        del admin
        n = produce(addr, "local", args.mb, args.size)
        produce(addr, "tiered", args.mb, args.size)
        print(f"produced {n} records of {args.size} bytes to each topic", file=sys.stderr)
        deadline = time.monotonic() + 600
        while not uploaded(store, work / "data"):
            if time.monotonic() > deadline:
                raise BenchError("uploads did not catch up in 600 s")
            time.sleep(0.5)
        rounds = []
        for r in range(args.rounds):
            stop_logbus(proc)
            proc, addrs = start_logbus(str(work), {"kafka": LOOPBACK}, extra)
            addr = addrs["kafka"]
            got: dict[str, Any] = {}
            order = ["remote", "local"] if r % 2 == 0 else ["local", "remote"]
            for what in order:
                if what == "local":
                    got["local"] = read_all(addr, "local", n, proc.pid)
                else:
                    got["remote_cold"] = read_all(addr, "tiered", n, proc.pid)
                    got["remote_warm"] = read_all(addr, "tiered", n, proc.pid)
            print(f"round {r + 1}: {json.dumps(got)}", file=sys.stderr)
            rounds.append(got)
        med = {k: statistics.median(x[k]["mb_s"] for x in rounds) for k in ("remote_cold", "remote_warm", "local")}
        print(json.dumps({
            "records": n, "record_bytes": args.size, "segment_bytes": SEGMENT, "rounds": rounds,
            "median_mb_s": med,
            "remote_cold_over_local": round(med["remote_cold"] / med["local"], 3),
            "remote_warm_over_local": round(med["remote_warm"] / med["local"], 3),
        }, indent=2))
    finally:
        if proc is not None:
            stop_logbus(proc)
        store.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
