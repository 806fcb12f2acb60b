#!/usr/bin/env python3
"""Start-up's redo (core/queues/redo.py, decision 0045): how long a start takes to route
again the records a power loss took from the queue journal.

A core broker (tests/loop.py's reactor, no sockets) on a temp dir: --messages persistent
AMQP messages published to a direct exchange bound to --queues durable queues, stopped;
then what a power loss of every journal batch after the first would leave is written
(the exchange's journal mark set back to 0, every queue's entries deleted), and the
broker is started again, timed, --rounds times (each on a copy of the same directory).
Prints one JSON object: seconds per start and microseconds per record routed again, and
the same start without the loss (nothing to redo) for comparison.

    python bench/redo_bench.py --messages 100000 --queues 2
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from logbus.core.broker import Broker  # noqa: E402
from logbus.core.log import TopicConfig  # noqa: E402
from logbus.core.state import CF_QUEUES, StateStore, journal_mark_key, pack_uint64, queue_entries_prefix  # noqa: E402
from logbus.gateway.amqp.codec import Properties, Publish, encode_properties  # noqa: E402
from logbus.gateway.amqp.mapping import to_message  # noqa: E402
from logbus.gateway.amqp.model import room  # noqa: E402
from logbus.gateway.amqp.model.forms import AMQP_FORMS  # noqa: E402
from tests.loop import LoopReactor  # noqa: E402


def settle(loop: LoopReactor) -> None:
    while loop.run_once():
        pass


def fill(path: Path, messages: int, queues: int) -> None:
    loop = LoopReactor()
    b = Broker(path, reactor=loop, forms=AMQP_FORMS, topic_defaults=TopicConfig(flush="none"))
    b.start()
    v = b.vhosts["/"]
    room.declare_exchange(v, "xd", "direct", durable=True)
    for i in range(queues):
        room.declare_queue(v, f"q{i}", durable=True)
        room.bind(v, "xd", f"q{i}", "k")
    props = Properties(delivery_mode=2)
    raw = encode_properties(props)
    rows = [to_message(Publish(1, "xd", "k", False, False, props, raw, b"x" * 100)) for _ in range(1000)]
    for _ in range(messages // 1000):
        b.pipeline.publish(v, rows)
        settle(loop)
    b.stop()
    settle(loop)


def lose(path: Path, queues: int) -> None:
    store = StateStore(path / "state")
    try:
        with store.batch(sync=True) as batch:
            batch.put(CF_QUEUES, journal_mark_key("xd", 0), pack_uint64(0))
            for i in range(queues):
                batch.delete_many(CF_QUEUES, [k for k, _ in store.scan_prefix(CF_QUEUES,
                                                                               queue_entries_prefix("/", f"q{i}"))])
    finally:
        store.close()


def timed_start(path: Path) -> tuple[float, int, int]:
    loop = LoopReactor()
    b = Broker(path, reactor=loop, forms=AMQP_FORMS)
    t0 = time.perf_counter()
    b.start()
    seconds = time.perf_counter() - t0
    redone = b.redone
    b.stop()
    settle(loop)
    return seconds, redone.records, redone.entries


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--queues", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="redo-bench-") as tmp:
        base = Path(tmp) / "base"
        fill(base, args.messages, args.queues)
        lost = Path(tmp) / "lost"
        shutil.copytree(base, lost)
        lose(lost, args.queues)
        runs: dict[str, list[tuple[float, int, int]]] = {"lost": [], "intact": []}
        for _ in range(args.rounds):
            for name, src in (("lost", lost), ("intact", base)):
                work = Path(tmp) / "work"
                shutil.copytree(src, work)
                runs[name].append(timed_start(work))
                shutil.rmtree(work)
    lost_s = statistics.median(r[0] for r in runs["lost"])
    intact_s = statistics.median(r[0] for r in runs["intact"])
    records = runs["lost"][0][1]
    print(json.dumps({
        "bench": "redo_bench", "args": vars(args), "python": sys.version.split()[0],
        "start_seconds_after_loss": round(lost_s, 3), "start_seconds_intact": round(intact_s, 3),
        "records_routed_again": records, "entries_made_again": runs["lost"][0][2],
        "us_per_record_routed_again": round((lost_s - intact_s) / records * 1e6, 1) if records else None,
        "runs": {k: [[round(s, 3), n, e] for s, n, e in v] for k, v in runs.items()},
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
