"""The Spark source's isolation level (``isolationLevel``, or Spark's Kafka source name
``kafka.isolation.level``): read_committed stops at the last stable offset found in the
files and leaves out aborted transactions' records; read_uncommitted (the default) reads
every record. The log is written by the broker's own stream service (tests/core)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from logbus.core.log import format as F
from logbus.spark.logfiles import DataDir
from logbus.spark.options import OptionError, Options
from logbus.spark.plan import OffsetRange, read_range
from tests.core.test_produce import batch, outcome
from tests.core.test_stream_services import Services
from tests.core.test_transactions import begin, txn_batch


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Topic ``t``: p0, a committed transaction (c1 c2), p1, an aborted one (a1), p2, and a
    transaction still open (o1) with p3 after it."""
    path = tmp_path_factory.mktemp("txn")
    s = Services(path)
    try:
        s.topics.create_topic("t", {"partitions": 1})
        pid, epoch = begin(s)
        outcome(s.loop, s.streams.produce("t", 0, batch(b"p0")))
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 0, b"c1", b"c2")))
        outcome(s.loop, s.streams.end_txn("tx", pid, epoch, True))
        s.streams.add_partitions_to_txn("tx", pid, epoch, [("t", 0)])
        outcome(s.loop, s.streams.produce("t", 0, batch(b"p1")))
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid, epoch, 2, b"a1")))
        outcome(s.loop, s.streams.end_txn("tx", pid, epoch, False))
        outcome(s.loop, s.streams.produce("t", 0, batch(b"p2")))
        pid2, epoch2 = begin(s, "tx2")
        outcome(s.loop, s.streams.produce("t", 0, txn_batch(pid2, epoch2, 0, b"o1")))
        outcome(s.loop, s.streams.produce("t", 0, batch(b"p3")))
        assert s.streams.last_stable_offset("t", 0) == 8
    finally:
        s.close()
    return path


COMMITTED = [b"p0", b"c1", b"c2", b"p1", b"p2"]
EVERYTHING = [b"p0", b"c1", b"c2", b"p1", b"a1", b"p2", b"o1", b"p3"]


def values(data: Path, lo: int, hi: int, committed: bool) -> list[bytes]:
    return [v for rb in read_range(str(data), OffsetRange("t", 0, lo, hi), ("value",), True, committed=committed)
            for v in rb.column(0).to_pylist()]


def test_the_stable_end_and_the_committed_records_from_the_files(data: Path) -> None:
    pf = DataDir(data).partition("t", 0)
    end = pf.end()
    assert end == 10 and pf.stable_end(end) == 8  # the open transaction's first record
    assert values(data, 0, 8, True) == COMMITTED
    assert values(data, 0, end, False) == EVERYTHING
    assert [(a.first_offset, a.last_offset) for a in pf.aborted()] == [(5, 6)]  # a1, and its marker
    assert pf.stable_end(end) == 8  # again, from where the walk stopped


def test_an_abort_marker_not_yet_indexed_holds_the_stable_end(data: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    os.unlink(copy / "log" / "t" / "0" / F.TXNINDEX_NAME)  # the broker writes it just after the marker
    pf = DataDir(copy).partition("t", 0)
    assert pf.stable_end(pf.end()) == 5  # the aborted transaction's first record


def test_the_option_is_checked() -> None:
    base = {"path": "/x", "subscribe": "t"}
    assert not Options.parse(base, False).committed
    assert Options.parse({**base, "isolationLevel": "read_committed"}, False).committed
    assert Options.parse({**base, "kafka.isolation.level": "READ_COMMITTED"}, True).committed
    with pytest.raises(OptionError, match="isolationLevel"):
        Options.parse({**base, "isolationLevel": "serializable"}, False)


def test_spark_reads_committed_records(spark: Any, data: Path) -> None:
    def read(**options: str) -> list[bytes]:
        reader = spark.read.format("logbus").option("path", str(data)).option("subscribe", "t")
        for k, v in options.items():
            reader = reader.option(k, v)
        return [r.value for r in reader.load().orderBy("offset").collect()]

    assert read(isolationLevel="read_committed") == COMMITTED
    assert read() == EVERYTHING
