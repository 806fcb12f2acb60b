"""The process that tests/fault/test_crash.py kills: appends with ``flush=sync`` until killed.

    python tests/fault/crash_appender.py --data-dir D --start-seq N [--seed S] ...

It opens (creating if missing) topic ``crash`` on D with the real Twisted reactor, writes
what recovery did to stderr, then says where each partition resumed, on stdout:

    ready 0:<log end offset> 1:<log end offset> 2:<log end offset>

and keeps up to ``--inflight`` appends outstanding, each a batch of 1-5 records on a
random partition. Record ``seq`` (a global sequence number, from N up) has key
``b"<seq>"`` and value ``record_value(seq)``. When an append's Deferred fires (the batch
is durable) it writes one line, with a single ``write(2)`` so that a kill cannot leave
half of it in the pipe unnoticed (the parent ignores a last line with no newline):

    ack <partition> <base_offset> <last_offset> <first_seq> <last_seq>

An append that fails writes ``error <partition> <message>`` and the process exits with
code 3. It is meant to be killed; as a safety net it stops issuing appends after
``--max-seconds`` or ``--max-records`` (or if its parent goes away), closes the log
cleanly, writes ``done`` and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path
from typing import Any, Sequence

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from logbus.core.log import AppendResult, LogManager, Record, TopicConfig, topic_dirname  # noqa: E402

TOPIC = "crash"
PARTITIONS = 3
SEGMENT_BYTES = 64 * 1024
PAD = b"." * 48  # makes segments roll every couple of hundred batches


def topic_config() -> TopicConfig:
    return TopicConfig(partitions=PARTITIONS, flush="sync", segment_bytes=SEGMENT_BYTES)


def record_value(seq: int) -> bytes:
    return b"seq=%d;" % seq + PAD


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--start-seq", type=int, required=True, help="sequence number of the first record")
    ap.add_argument("--seed", type=int, default=0, help="seeds the batch sizes and partitions")
    ap.add_argument("--inflight", type=int, default=200, help="appends outstanding at once")
    ap.add_argument("--max-records", type=int, default=1_000_000, help="stop issuing after this many")
    ap.add_argument("--max-seconds", type=float, default=30.0, help="stop issuing after this long")
    return ap.parse_args(argv)


def write_line(text: str) -> None:
    try:
        os.write(1, (text + "\n").encode())
    except BrokenPipeError:  # nobody is listening any more: stop at once
        os._exit(4)


def recovery_lines(lm: LogManager) -> list[str]:
    return [
        "recovery "
        + json.dumps(
            {
                "directory": r.directory,
                "truncated_bytes": r.truncated_bytes,
                "removed_segments": r.removed_segments,
                "rebuilt_indexes": r.rebuilt_indexes,
                "notes": r.notes,
            },
            sort_keys=True,
        )
        for r in lm.reports
    ]


class Appender:
    def __init__(self, lm: LogManager, reactor: Any, args: argparse.Namespace) -> None:
        self.lm = lm
        self.reactor = reactor
        self.partitions = lm.topic(TOPIC).partitions
        self.rng = random.Random(args.seed)
        self.next_seq = args.start_seq
        self.last_seq = args.start_seq + args.max_records - 1
        self.max_inflight = args.inflight
        self.inflight = 0
        self.stopping = False
        self.exit_code = 0
        self.parent = os.getppid()

    def start(self, max_seconds: float) -> None:
        self.reactor.callLater(max_seconds, self.stop)
        self.reactor.callLater(0.2, self.watch_parent)
        self.fill()

    def fill(self) -> None:
        while not self.stopping and self.inflight < self.max_inflight:
            n = self.rng.randint(1, 5)
            if self.next_seq + n - 1 > self.last_seq:
                self.stop()
                return
            first = self.next_seq
            self.next_seq += n
            p = self.rng.randrange(len(self.partitions))
            records = [Record(b"%d" % s, record_value(s)) for s in range(first, first + n)]
            d = self.partitions[p].append(records)
            self.inflight += 1
            d.addCallbacks(self.acked, self.failed, callbackArgs=(p, first, n), errbackArgs=(p,))

    def acked(self, result: AppendResult, p: int, first: int, n: int) -> None:
        self.inflight -= 1
        write_line(f"ack {p} {result.base_offset} {result.last_offset} {first} {first + n - 1}")
        if self.stopping:
            self.maybe_finish()
        else:
            self.fill()

    def failed(self, failure: Any, p: int) -> None:
        self.inflight -= 1
        write_line(f"error {p} {failure.getErrorMessage()}")
        self.exit_code = 3
        self.stop()

    def watch_parent(self) -> None:
        if os.getppid() != self.parent:
            self.stop()
        elif not self.stopping:
            self.reactor.callLater(0.2, self.watch_parent)

    def stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            self.maybe_finish()

    def maybe_finish(self) -> None:
        if self.inflight == 0 and self.reactor.running:
            self.lm.close()
            write_line("done")
            self.reactor.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from twisted.internet import epollreactor

    epollreactor.install()
    from twisted.internet import reactor

    lm = LogManager(args.data_dir, reactor)
    exists = os.path.isdir(os.path.join(lm.root, topic_dirname(TOPIC)))
    topic = lm.open_topic(TOPIC, topic_config(), create=not exists)
    for line in recovery_lines(lm):
        print(line, file=sys.stderr, flush=True)
    write_line("ready " + " ".join(f"{p.index}:{p.log_end_offset}" for p in topic.partitions))
    appender = Appender(lm, reactor, args)
    reactor.callWhenRunning(appender.start, args.max_seconds)
    reactor.run()
    return appender.exit_code


if __name__ == "__main__":
    sys.exit(main())
