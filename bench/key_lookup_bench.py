#!/usr/bin/env python3
"""Message search through the key index: lookup latency by key and by message id.

Builds one topic in a temp dir through the log's append API (as bench/log_append.py
does: ``Partition.append`` with callbacks, ``--outstanding`` appends in flight on the
reactor): ``--records`` records over ``--keys`` distinct keys, each with an envelope
message id (``--no-message-ids``: without), while the background pass indexes them. Then
waits until every key index is up to date, and measures, with the reactor stopped:

- lookups (``core.search.search``, as ``Admin.search_messages``): ``--lookups`` each of
  keys present, keys absent and message ids present, p50/p90/p99/max in ms;
- the background pass's reactor time while the topic was written, and how far it lagged;
- a rebuild from the log alone (every ``.keyindex`` removed, reopened, indexed in one
  go) and a restart that checks the files instead; the files' size on disk.

Prints one JSON document.

    python bench/key_lookup_bench.py --records 2000000 --keys 500000 --lookups 2000
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from twisted.internet import reactor  # noqa: E402

from common import BenchError, distribution_ms  # noqa: E402
from logbus.core.log import LogManager, TopicConfig  # noqa: E402
from logbus.core.message import Envelope, Message  # noqa: E402
from logbus.core.search import search  # noqa: E402

TOPIC = "search"


def key_of(i: int) -> bytes:
    return b"customer-%08d" % i


def build(directory: str, args: argparse.Namespace) -> dict[str, Any]:
    """Append the records from inside the running reactor; wait until indexed."""
    lm = LogManager(directory, reactor, max_open_files=4096)
    cfg = TopicConfig(partitions=args.partitions, flush="none", segment_bytes=args.segment_bytes)
    parts = lm.open_topic(TOPIC, cfg, create=True).partitions
    rng = random.Random(1)
    value = os.urandom(args.value_bytes)
    issued = done = 0
    looping = False
    t: dict[str, float] = {}
    failed: list[object] = []

    def record(i: int) -> Any:
        env = Envelope(protocol=Envelope.AMQP, exchange="orders", message_id=f"msg-{i:010d}") if args.message_ids \
            else Envelope(protocol=Envelope.AMQP, exchange="orders")
        return Message(key_of(rng.randrange(args.keys)), value, None, [], env).to_record()

    def on_done(r: object) -> None:
        nonlocal done
        if isinstance(r, Exception):
            failed.append(r)
            reactor.crash()
            return
        done += 1
        if done == args.records:
            t["acked"] = time.perf_counter()
        elif not looping:
            pump()

    def pump() -> None:
        nonlocal issued, looping
        looping = True
        try:
            while issued - done < args.outstanding and issued < args.records:
                parts[issued % len(parts)].append([record(issued)], callback=on_done)
                issued += 1
        finally:
            looping = False

    def check() -> None:
        if "acked" in t and lm.keys.settled():
            t["settled"] = time.perf_counter()
            reactor.crash()
        else:
            reactor.callLater(0.01, check)

    t["start"] = time.perf_counter()
    reactor.callLater(0, pump)
    reactor.callLater(0, check)
    reactor.run(installSignalHandlers=False)
    if failed:
        raise BenchError(f"an append failed: {failed[0]}")
    if "settled" not in t:
        raise BenchError("the reactor stopped before the key index was up to date")
    return {
        "manager": lm,
        "append_seconds": t["acked"] - t["start"],
        "indexed_after_acked_seconds": t["settled"] - t["acked"],
        "background_pass_seconds": lm.keys.busy_seconds,
        "background_pass_us_per_record": lm.keys.busy_seconds / args.records * 1e6,
        "background_pass_cpu_us_per_record": lm.keys.cpu_seconds / args.records * 1e6,
        "records_indexed": lm.keys.records_indexed,
        "files_written": lm.keys.files_written,
        "segments": sum(len(p.segments) for p in parts),
    }


def lookups(lm: LogManager, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(2)
    out: dict[str, Any] = {}
    cases = {
        "key_hit": lambda: {"key": key_of(rng.randrange(args.keys))},
        "key_miss": lambda: {"key": key_of(args.keys + rng.randrange(10**7))},
    }
    if args.message_ids:
        cases["message_id_hit"] = lambda: {"message_id": f"msg-{rng.randrange(args.records):010d}"}
    for name, criteria in cases.items():
        for _ in range(min(50, args.lookups)):  # warm the page cache and the fences
            search(lm, TOPIC, **criteria())
        times: list[float] = []
        found = 0
        for _ in range(args.lookups):
            c = criteria()
            t0 = time.perf_counter()
            res = search(lm, TOPIC, limit=args.limit, **c)
            times.append((time.perf_counter() - t0) * 1000)
            found += len(res)
        out[name] = {**distribution_ms(times), "found_per_lookup": found / args.lookups}
    return out


def sizes(directory: str) -> dict[str, int]:
    def total(pattern: str) -> int:
        return sum(os.path.getsize(p) for p in glob.glob(os.path.join(directory, "log", "*", "*", pattern)))

    return {"log_bytes": total("*.log"), "keyindex_bytes": total("*.keyindex"),
            "index_bytes": total("*.index"), "timeindex_bytes": total("*.timeindex")}


def rebuild(directory: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every .keyindex removed: reopen and index everything in one go (the background
    pass's work without its slicing); then reopen again and check the files written."""
    for path in glob.glob(os.path.join(directory, "log", "*", "*", "*.keyindex")):
        os.unlink(path)
    cfg = TopicConfig(partitions=args.partitions, flush="none", segment_bytes=args.segment_bytes)
    out: dict[str, Any] = {}
    for phase in ("rebuild_from_log", "check_files_at_start"):
        lm = LogManager(directory, reactor, key_index=False)
        lm.open_topic(TOPIC, cfg)
        t0 = time.perf_counter()
        while lm.keys.work(math.inf):
            pass
        if not lm.keys.settled():
            raise BenchError(f"{phase}: the key index is not up to date after a whole pass")
        out[f"{phase}_seconds"] = time.perf_counter() - t0
        out[f"{phase}_files_rebuilt"] = lm.keys.files_rebuilt
        lm.close()
    out["rebuild_records_per_s"] = args.records / out["rebuild_from_log_seconds"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=500_000, help="distinct record keys")
    ap.add_argument("--lookups", type=int, default=2000, help="timed lookups of each kind")
    ap.add_argument("--limit", type=int, default=100, help="limit of each lookup")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--segment-bytes", type=int, default=128 * 1024 * 1024)
    ap.add_argument("--outstanding", type=int, default=1000, help="appends in flight")
    ap.add_argument("--no-message-ids", dest="message_ids", action="store_false",
                    help="records without an envelope message id")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args()

    out: dict[str, Any] = {
        "bench": "key_lookup_bench",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "args": vars(args),
    }
    scratch = tempfile.mkdtemp(prefix="logbus-keys-", dir=args.dir)
    try:
        built = build(scratch, args)
        lm = built.pop("manager")
        out["build"] = built
        print(json.dumps(built), file=sys.stderr)
        out["lookups"] = lookups(lm, args)
        print(json.dumps(out["lookups"]), file=sys.stderr)
        lm.close()
        out["disk"] = sizes(scratch)
        out["disk"]["keyindex_bytes_per_record"] = out["disk"]["keyindex_bytes"] / args.records
        out["rebuild"] = rebuild(scratch, args)
    except BenchError as e:
        print(f"key_lookup_bench: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
