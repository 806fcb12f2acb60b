"""Kill -9 an appender 20 times: every acknowledged record survives, once, in order.

Theory of operation. ``crash_appender.py`` appends to topic ``crash`` (3 partitions,
``flush=sync``, 64 KiB segments) with up to 200 appends in flight and prints one ``ack``
line per append whose Deferred fired. Round ``r`` gives its records the sequence numbers
``r * SEQ_STRIDE`` on, so every value in the log says which round wrote it. Each round
the test waits for ``ready`` (recovery done), lets it run a random 0.05-0.6 s, sends
SIGKILL and reaps it. Only complete ``ack`` lines count: a line the kill cut short was
never acknowledged.

After every kill the segment files are read independently of the log code that wrote
and recovers them (``scan_partition``: every batch CRC-checked, base offsets followed
across segments; only the last segment may end in a torn batch), and the whole history
is checked (``check_log``): every acknowledged record at its acknowledged offset with
its sequence number, offsets gap-free from 0, no sequence number twice, sequence numbers
rising along each partition, each round's records between the offset its appender
resumed at and the offset the next one resumed at, unacknowledged records only after
the last acknowledged one of their round. The next round's ``ready`` must resume exactly
at the end of the valid prefix the scan found, and its recovery report must have cut
exactly the torn tail the scan saw. At the end a ``LogManager`` (on ``tests/loop.py``)
recovers the directory once more and must read back the same records, also batch by
batch through the indexes.

SIGKILL leaves the page cache alone, so this tests what recovery keeps and when acks
fire, not whether ``fdatasync`` reaches the disk (that needs power-loss testing).
Reproduce a run with ``LOGBUS_CRASH_SEED=<seed>`` (the seed is in every failure).
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator, Sequence, TypeVar

import pytest

from logbus.core.errors import CorruptBatch
from logbus.core.log import LogManager, topic_dirname
from logbus.core.log import batch as B
from tests.fault.crash_appender import PARTITIONS, TOPIC, record_value, topic_config
from tests.loop import LoopReactor
from tests.serverproc import logbus_env

APPENDER = Path(__file__).with_name("crash_appender.py")
ROUNDS = 20
SEQ_STRIDE = 10_000_000  # round r writes sequence numbers [r * SEQ_STRIDE, (r + 1) * SEQ_STRIDE)
KILL_AFTER = (0.05, 0.6)  # seconds after ``ready``
READY_TIMEOUT = 30.0
MAX_SECONDS = 20.0  # the appender's own bound: it must be killed long before
MAX_PROBLEMS = 20  # shown per failure

_ACK = re.compile(rb"ack (\d+) (\d+) (\d+) (\d+) (\d+)\n\Z")
_READY = re.compile(rb"ready((?: \d+:\d+)+)\n\Z")
T = TypeVar("T")


@dataclass(frozen=True)
class Ack:
    round: int
    partition: int
    base: int
    last: int
    first_seq: int
    last_seq: int


@dataclass
class Round:
    index: int
    ready: dict[int, int]  # partition -> log end offset its appender resumed at
    acks: list[Ack]
    recoveries: list[dict[str, object]]  # the appender's recovery reports
    partial_line: bool  # the kill cut an output line short
    acked_seqs: dict[int, list[int]] = field(default_factory=dict)  # partition -> seqs from ``ready`` on

    @property
    def acked_records(self) -> int:
        return sum(len(v) for v in self.acked_seqs.values())


@dataclass
class SegmentContents:
    """What one segment file holds, read on its own: records up to the first bad batch."""

    offsets: list[int]
    seqs: list[int]  # -1: a record nobody wrote
    valid_end: int  # bytes of valid batches
    size: int
    reason: str  # why the valid part ended before ``size``
    zeros_after: bool = False  # only zeros after the valid part: space written ahead of appends


@dataclass
class Scan:
    """One partition read straight from its segment files."""

    partition: int
    offsets: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    segments: int = 0
    torn_bytes: int = 0  # bytes after the last valid batch of the last segment
    torn_reason: str = ""
    problems: list[str] = field(default_factory=list)  # damage a crash cannot explain

    @property
    def end(self) -> int:
        return len(self.offsets)


# -- the appender process -------------------------------------------------------------------


class AppenderProcess:
    """``crash_appender.py`` with a thread collecting its complete stdout lines."""

    def __init__(self, data_dir: Path, start_seq: int, seed: int, stderr: IO[bytes]) -> None:
        cmd = [
            sys.executable, str(APPENDER), "--data-dir", str(data_dir), "--start-seq", str(start_seq),
            "--seed", str(seed), "--max-seconds", str(MAX_SECONDS),
        ]  # fmt: skip
        self.lines: list[bytes] = []
        self.partial = b""
        self.ready = threading.Event()
        self.proc = subprocess.Popen(
            cmd, env=logbus_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
            start_new_session=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, name="crash-appender-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.endswith(b"\n"):
                self.partial = line  # cut short by the kill: not an acknowledgement
                break
            self.lines.append(line)
            self.ready.set()
        self.ready.set()

    def kill(self) -> None:
        """SIGKILL by pid (only while it is still ours to signal) and reap."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def close(self) -> None:
        try:
            self.kill()
        finally:
            self._reader.join(30)
            assert self.proc.stdout is not None
            self.proc.stdout.close()


def parse_round(index: int, lines: list[bytes], partial: bytes, stderr_text: str, ctx: str) -> Round:
    assert lines, f"{ctx}: the appender printed nothing; stderr:\n{stderr_text}"
    m = _READY.match(lines[0])
    assert m, f"{ctx}: first line is not 'ready': {lines[0]!r}; stderr:\n{stderr_text}"
    ready = {int(p): int(o) for p, o in (kv.split(b":") for kv in m.group(1).split())}
    assert sorted(ready) == list(range(PARTITIONS)), f"{ctx}: {lines[0]!r}"
    acks = []
    for line in lines[1:]:
        a = _ACK.match(line)
        assert a, f"{ctx}: unexpected appender output {line!r}; stderr:\n{stderr_text}"
        acks.append(Ack(index, *(int(g) for g in a.groups())))
    recoveries = [
        json.loads(s[len("recovery ") :]) for s in stderr_text.splitlines() if s.startswith("recovery ")
    ]
    return Round(index, ready, acks, recoveries, bool(partial))


# -- reading the log without the log ----------------------------------------------------------


def partition_dir(data_dir: Path, p: int) -> Path:
    return data_dir / "log" / topic_dirname(TOPIC) / str(p)


def seq_of(key: bytes | None, value: bytes | None) -> int:
    """The record's sequence number, or -1 if key and value are not what was written."""
    if key is None or value is None or not key.isdigit():
        return -1
    seq = int(key)
    return seq if value == record_value(seq) else -1


def read_segment(data: bytes, base_offset: int) -> SegmentContents:
    """CRC-check the batches of one segment file, base offsets following from its name."""
    seg = SegmentContents([], [], 0, len(data), "")
    pos, expected = 0, base_offset
    while pos < len(data):
        try:
            info = B.validate(data, pos)
            if info.base_offset != expected:
                raise CorruptBatch(f"batch base offset {info.base_offset}, expected {expected}")
        except CorruptBatch as e:
            seg.reason = str(e)
            break
        for r in B.decode(data[pos : pos + info.size]):
            seg.offsets.append(r.offset)
            seg.seqs.append(seq_of(r.key, r.value))
        expected = info.next_offset
        pos += info.size
    seg.valid_end = pos
    seg.zeros_after = pos < len(data) and data.count(0, pos) == len(data) - pos
    return seg


SegmentCache = dict[tuple[str, bytes], SegmentContents]  # (path, content digest) -> what it holds


def scan_partition(directory: Path, p: int, cache: SegmentCache) -> Scan:
    """Every record of the partition's segment files, oldest first; only the last segment
    may end in a torn batch. Files are re-read every time; parsing is reused for content
    already seen (by digest), which is what keeps 20 full scans cheap."""
    scan = Scan(p)
    names = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
    scan.segments = len(names)
    for i, name in enumerate(names):
        if int(name[:-4]) != scan.end:
            scan.problems.append(f"p{p}: segment {name} should start at offset {scan.end}")
            return scan
        data = (directory / name).read_bytes()
        key = (str(directory / name), hashlib.blake2b(data, digest_size=16).digest())
        seg = cache.get(key)
        if seg is None:
            seg = cache[key] = read_segment(data, int(name[:-4]))
        scan.offsets += seg.offsets
        scan.seqs += seg.seqs
        if seg.valid_end < seg.size:
            if i < len(names) - 1:  # zeros too: sealing cuts them off, durably
                scan.problems.append(
                    f"p{p}: sealed segment {name} is damaged at {seg.valid_end}: {seg.reason}"
                )
                return scan
            if not seg.zeros_after:  # recovery cuts zeros without counting them as damage
                scan.torn_bytes, scan.torn_reason = seg.size - seg.valid_end, seg.reason
    return scan


def scan_log(data_dir: Path, cache: SegmentCache) -> list[Scan]:
    if not data_dir.exists():
        return [Scan(p) for p in range(PARTITIONS)]
    return [scan_partition(partition_dir(data_dir, p), p, cache) for p in range(PARTITIONS)]


# -- the checks ---------------------------------------------------------------------------------


def check_acks(rnd: Round, ctx: str) -> list[str]:
    """An appender's acks, on their own: whole batches, in append order per partition, the
    first one at the offset it said it resumed at. Fills ``rnd.acked_seqs``."""
    problems = []
    lo, hi = rnd.index * SEQ_STRIDE, (rnd.index + 1) * SEQ_STRIDE
    next_offset = dict(rnd.ready)
    rnd.acked_seqs = {p: [] for p in range(PARTITIONS)}
    for a in rnd.acks:
        if not (0 <= a.partition < PARTITIONS and lo <= a.first_seq <= a.last_seq < hi):
            problems.append(f"{ctx}: malformed {a}")
        elif a.last - a.base != a.last_seq - a.first_seq or not 1 <= a.last_seq - a.first_seq + 1 <= 5:
            problems.append(f"{ctx}: offsets and sequence numbers disagree in {a}")
        elif a.base != next_offset[a.partition]:
            problems.append(
                f"{ctx}: {a} should start at offset {next_offset[a.partition]} (ready {rnd.ready})"
            )
        else:
            next_offset[a.partition] = a.last + 1
            rnd.acked_seqs[a.partition].extend(range(a.first_seq, a.last_seq + 1))
    return problems


def first_difference(found: Sequence[T], expected: Sequence[T]) -> int:
    """Index of the first element that differs (or the shorter length)."""
    diffs = (i for i, (f, e) in enumerate(zip(found, expected)) if f != e)
    return next(diffs, min(len(found), len(expected)))


def check_log(scans: list[Scan], rounds: list[Round], ctx: str) -> list[str]:
    """The log as scanned after ``rounds[-1]`` was killed, against everything ever acked.

    Per partition: offsets 0..end-1; every record one that was written; sequence numbers
    strictly rising (append order; no record twice); round r's records exactly the offsets
    [ready of r, ready of r+1), starting with every record r acked, in acked order (so
    unacked records are allowed only after r's last ack). No sequence number in two
    partitions."""
    problems = [pr for s in scans for pr in s.problems]
    for s in scans:
        p, seqs = s.partition, s.seqs
        if s.offsets != list(range(s.end)):
            i = first_difference(s.offsets, list(range(s.end)))
            problems.append(
                f"{ctx}: p{p} record #{i} has offset {s.offsets[i]}: offsets must be 0..{s.end - 1}"
            )
            continue
        if -1 in seqs:
            o = seqs.index(-1)
            problems.append(f"{ctx}: p{p}@{o} holds a record nobody wrote")
        if not all(map(operator.lt, seqs, seqs[1:])):
            o = next(o for o in range(1, s.end) if seqs[o] <= seqs[o - 1])
            problems.append(
                f"{ctx}: p{p}@{o} seq {seqs[o]} after seq {seqs[o - 1]}: repeated or out of order"
            )
        for rnd in rounds:
            r = rnd.index
            start = rnd.ready[p]
            stop = rounds[r + 1].ready[p] if r + 1 < len(rounds) else s.end
            part = seqs[start:stop]
            if part and not (r * SEQ_STRIDE <= part[0] and part[-1] < (r + 1) * SEQ_STRIDE):
                problems.append(
                    f"{ctx}: p{p} offsets [{start}, {stop}) should hold round {r}'s records, hold seqs "
                    f"{part[0]}..{part[-1]}: the log did not continue where it resumed"
                )
            expected = rnd.acked_seqs[p]
            if part[: len(expected)] != expected:
                i = first_difference(part, expected)
                o = start + i
                held = f"seq {seqs[o]}" if o < s.end else f"nothing (the log ends at {s.end})"
                torn = f"; torn tail {s.torn_bytes} bytes: {s.torn_reason}" if s.torn_bytes else ""
                problems.append(
                    f"{ctx}: p{p}@{o} was acked in round {r} as seq {expected[i]}, holds {held}; "
                    f"{len(expected) - i} of round {r}'s acked records in p{p} from there on are "
                    f"not where acked{torn}"
                )
    every = [q for s in scans for q in s.seqs]
    if len(set(every)) != len(every):
        where: dict[int, str] = {}
        for s in scans:
            for o, q in enumerate(s.seqs):
                if q in where:
                    problems.append(f"{ctx}: seq {q} at p{s.partition}@{o} and at {where[q]}")
                    break
                where[q] = f"p{s.partition}@{o}"
    return problems


def check_resume(rnd: Round, earlier: list[Round], before: list[Scan], ctx: str) -> list[str]:
    """A restart resumes each partition past every record acked before, exactly at the end
    of the valid prefix on disk, and its recovery cut exactly the torn tail that was there."""
    problems = []
    last: dict[int, Ack] = {}  # partition -> the last ack ever (acks come in offset order)
    for r in earlier:
        mine: dict[int, Ack] = {}
        for a in reversed(r.acks):
            mine.setdefault(a.partition, a)
            if len(mine) == PARTITIONS:
                break
        last.update(mine)
    for p, a in sorted(last.items()):
        if rnd.ready[p] < a.last + 1:
            problems.append(f"{ctx}: p{p} resumed at {rnd.ready[p]}, before the record acked in {a}")
    cut = {Path(str(r["directory"])).name: int(str(r["truncated_bytes"])) for r in rnd.recoveries}
    for s in before:
        if rnd.ready[s.partition] != s.end:
            problems.append(
                f"{ctx}: p{s.partition} resumed at {rnd.ready[s.partition]}, the valid log on disk "
                f"ended at {s.end}"
            )
        if cut.get(str(s.partition), 0) != s.torn_bytes:
            problems.append(
                f"{ctx}: p{s.partition} recovery cut {cut.get(str(s.partition), 0)} bytes, the torn "
                f"tail was {s.torn_bytes} bytes ({s.torn_reason})"
            )
    for r in rnd.recoveries:
        if r["removed_segments"]:
            problems.append(f"{ctx}: recovery removed segments after a plain kill: {r}")
    return problems


def read_back(
    data_dir: Path, scans: list[Scan], rounds: list[Round], ctx: str
) -> tuple[list[str], list[int]]:
    """Recover once more with the log itself; it must serve what the scan found, as one
    stream and batch by batch through the sparse indexes (each segment's first batch, and
    of every round the first, every 50th and the last ack). Returns problems and segment
    counts."""
    problems: list[str] = []
    loop = LoopReactor()
    lm = LogManager(data_dir, loop)
    try:
        topic = lm.open_topic(TOPIC, topic_config())
        for s in scans:
            p = topic.partition(s.partition)
            if p.log_end_offset != s.end:
                problems.append(
                    f"{ctx}: LogManager p{s.partition} ends at {p.log_end_offset}, scan at {s.end}"
                )
                continue
            offsets: list[int] = []
            seqs: list[int] = []
            offset = 0
            while offset < p.log_end_offset:
                res = p.read(offset, 1 << 20)
                for r in B.decode(res.data):
                    if r.offset >= offset:
                        offsets.append(r.offset)
                        seqs.append(seq_of(r.key, r.value))
                offset = res.next_offset
            if offsets != s.offsets or seqs != s.seqs:
                i = first_difference(list(zip(offsets, seqs)), list(zip(s.offsets, s.seqs)))
                problems.append(
                    f"{ctx}: LogManager p{s.partition} reads back other records than the scan from #{i}"
                )
            probes = {seg.base_offset: -2 for seg in p.segments if seg.size}
            for rnd in rounds:
                mine = [a for a in rnd.acks if a.partition == s.partition]
                probes.update((a.base, a.first_seq) for a in mine[::50] + mine[-1:])
            for base, seq in sorted(probes.items()):
                got = p.read_records(base, 1)[:1]
                ok = got and got[0].offset == base and seq in (-2, seq_of(got[0].key, got[0].value))
                if not ok:
                    problems.append(
                        f"{ctx}: LogManager p{s.partition} read at {base} (seq {seq}) returned {got}"
                    )
        segments = [len(p.segments) for p in topic.partitions]
        problems += [f"{ctx}: final recovery removed segments: {r}" for r in lm.reports if r.removed_segments]
    finally:
        lm.close()
        while loop.run_once():
            pass
    return problems, segments


# -- the test ---------------------------------------------------------------------------------------


def report(problems: list[str], seed: int) -> str:
    shown = "\n".join(problems[:MAX_PROBLEMS])
    return f"{len(problems)} problems (seed {seed}, rerun with LOGBUS_CRASH_SEED={seed}):\n{shown}"


def crash_seed() -> int:
    env = os.environ.get("LOGBUS_CRASH_SEED")
    return int(env) if env else random.SystemRandom().randrange(2**32)


def run_rounds(
    data_dir: Path, logs: Path, rng: random.Random, seed: int
) -> Iterator[tuple[Round, list[Scan]]]:
    """Start, wait for ready, kill at a random moment; yield each round with the scan after it."""
    rounds: list[Round] = []
    cache: SegmentCache = {}
    before = scan_log(data_dir, cache)
    for r in range(ROUNDS):
        ctx = f"seed {seed} round {r}"
        stderr_path = logs / f"appender-{r}.stderr"
        with stderr_path.open("wb") as stderr:
            proc = AppenderProcess(data_dir, r * SEQ_STRIDE, rng.randrange(2**32), stderr)
            try:
                assert proc.ready.wait(READY_TIMEOUT), f"{ctx}: no 'ready' within {READY_TIMEOUT} s"
                time.sleep(rng.uniform(*KILL_AFTER))
            finally:  # kills it if still running: if it stopped by itself, the next check says so
                proc.close()
        stderr_text = stderr_path.read_text(errors="replace")
        assert proc.proc.returncode == -signal.SIGKILL, (
            f"{ctx}: the appender was not killed, it exited with {proc.proc.returncode}:\n{stderr_text}"
        )
        for bad in ("Traceback", "Unhandled error"):
            assert bad not in stderr_text, f"{ctx}: appender stderr:\n{stderr_text}"
        rnd = parse_round(r, proc.lines, proc.partial, stderr_text, ctx)
        problems = check_resume(rnd, rounds, before, ctx) + check_acks(rnd, ctx)
        rounds.append(rnd)
        after = scan_log(data_dir, cache)
        problems += check_log(after, rounds, ctx)
        assert not problems, report(problems, seed)
        yield rnd, after
        before = after


@pytest.mark.slow
def test_sigkill_during_sync_appends_keeps_every_acked_record(tmp_path: Path) -> None:
    seed = crash_seed()
    rng = random.Random(seed)
    data_dir = tmp_path / "data"
    started = time.monotonic()
    rounds: list[Round] = []
    scans: list[Scan] = []
    for rnd, scans in run_rounds(data_dir, tmp_path, rng, seed):
        rounds.append(rnd)
    assert len(rounds) == ROUNDS

    problems, segments = read_back(data_dir, scans, rounds, f"seed {seed} final read")
    assert not problems, report(problems, seed)

    acked = [r.acked_records for r in rounds]
    with_acks = sum(1 for n in acked if n)
    reports = [rep for r in rounds for rep in r.recoveries]
    cuts = [int(str(rep["truncated_bytes"])) for rep in reports]
    print(
        f"\ncrash test seed {seed}: {ROUNDS} kills in {time.monotonic() - started:.1f} s; acked records per "
        f"round {acked} (total {sum(acked)}, {sum(s.end for s in scans) - sum(acked)} more written but not "
        f"acked); log ends {[s.end for s in scans]}, segments {segments}; {len(reports)} recovery reports: "
        f"{sum(1 for c in cuts if c)} cut a torn tail ({sum(cuts)} bytes), "
        f"{sum(1 for rep in reports if rep['rebuilt_indexes'])} rebuilt indexes; "
        f"{sum(r.partial_line for r in rounds)} kills cut an output line"
    )
    assert with_acks >= ROUNDS // 4, f"seed {seed}: {with_acks} of {ROUNDS} rounds acked anything: {acked}"
    assert max(segments) > 1, f"seed {seed}: no partition ever rolled a segment: {segments}"
