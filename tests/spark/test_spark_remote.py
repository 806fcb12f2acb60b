"""Spark and ``logbus export parquet`` reading a tiered topic from object storage with no
broker running: the remote segments alone (option ``remote``), or under the data
directory's local ones (``path`` too), from a real SeaweedFS, through pyarrow's S3
filesystem."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from logbus.core.log import LogManager, Record, TopicConfig
from logbus.spark.plan import OffsetRange, read_range
from logbus.spark.remotefiles import Location, RemoteDir
from tests.loop import LoopReactor
from tests.remote_store import RemoteStore
from tests.serverproc import REPO_ROOT

N = 3000
PARTITIONS = 2
KEYS = 7


class Tiered:
    def __init__(self, store: RemoteStore, data: Path) -> None:
        self.data, self.url, self.endpoint = data, store.url("spark"), store.endpoint
        self.remote_counts: dict[int, int] = {}


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    """A tiered topic written by the real log, uploaded, its local copies mostly gone, and
    the log closed: no broker runs while it is read."""
    work = tmp_path_factory.mktemp("tiered")
    (work / "s3").mkdir()
    store = RemoteStore(work / "s3")
    store.start()
    saved = {k: os.environ.get(k) for k in store.env}
    os.environ.update(store.env)  # for pyarrow here and in Spark's workers
    try:
        t = Tiered(store, work / "data")
        loop = LoopReactor()
        lm = LogManager(t.data, loop, remote_storage=t.url, remote_storage_endpoint=t.endpoint)
        topic = lm.open_topic("tele", TopicConfig(partitions=PARTITIONS, flush="none", segment_bytes=16 << 10,
                                                  remote_storage_enable=True, local_retention_bytes=32 << 10))
        now = int(time.time() * 1000)
        for i in range(N):
            loop.wait(topic.partitions[i % PARTITIONS].append(
                [Record(b"dev-%d" % (i % KEYS), b"%06d" % i + b"x" * 200, now)]))
        deadline = time.monotonic() + 60
        while not all(p.remote is not None and p.remote.end_offset == p.segments[-2].next_offset
                      and len(p.segments) <= 4 for p in topic.partitions):
            assert time.monotonic() < deadline, "uploads did not catch up"
            lm.housekeeping()
            loop.run_once(block=0.05)
        t.remote_counts = {p.index: p.remote.end_offset for p in topic.partitions}  # type: ignore[union-attr]
        assert all(p.segments[0].base_offset > 0 for p in topic.partitions)
        lm.close()
        while loop.run_once():
            pass
        yield t
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        store.stop()


def values(where: Location, partition: int, hi: int) -> list[bytes]:
    return [v[:6] for rb in read_range(where, OffsetRange("tele", partition, 0, hi), ("value",), True)
            for v in rb.column(0).to_pylist()]


def test_the_bucket_alone_and_under_the_data_directory(tiered: Tiered) -> None:
    remote = Location(remote=tiered.url, endpoint=tiered.endpoint)
    both = Location(str(tiered.data), tiered.url, tiered.endpoint)
    assert RemoteDir(tiered.url, tiered.endpoint).topics() == ["tele"]
    for p in range(PARTITIONS):
        end = tiered.remote_counts[p]
        mine = [b"%06d" % i for i in range(p, N, PARTITIONS)]
        assert values(remote, p, end) == mine[:end]
        pf = both.open().partition("tele", p)
        assert (pf.start(), pf.end()) == (0, N // PARTITIONS)
        assert values(both, p, N // PARTITIONS) == mine


def test_export_parquet_reads_the_bucket_and_writes_to_it(tiered: Tiered, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from logbus.spark.export import export_parquet
    from logbus.spark.remotefiles import filesystem

    done = export_parquet(Location(str(tiered.data), tiered.url, tiered.endpoint), "tele",
                          "s3://logbus-test/exported")
    assert [(d.partition, d.records) for d in done] == [(p, N // PARTITIONS) for p in range(PARTITIONS)]
    table = pq.read_table("logbus-test/exported/tele-0.parquet", filesystem=filesystem(tiered.endpoint))
    assert table.num_rows == N // PARTITIONS


def spark_job(tiered: Tiered, master: str) -> dict[str, Any]:
    """The Spark job in a process of its own: its workers get the store's credentials
    from its environment (a session already running in this process would not)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(REPO_ROOT / "tests/spark/remote_cluster_job.py"), "tele",
                           str(tiered.data), tiered.url, tiered.endpoint, master],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result




def test_spark_counts_and_groups_the_topic_from_s3_in_several_executor_jvms(tiered: Tiered) -> None:
    """local-cluster mode: two executor JVMs, each with its own Python workers, read the
    ranges Spark hands them; together, every record once (bucket and data directory), and
    the bucket alone holds what was uploaded. (One job: each Spark application here costs a
    minute of the suite's CPU.)"""
    result = spark_job(tiered, "local-cluster[2,1,1024]")
    assert result["remote_only_count"] == sum(tiered.remote_counts.values())
    assert result["count"] == result["read"] == N
    assert result["by_key"] == {f"dev-{k}": v for k, v in Counter(i % KEYS for i in range(N)).items()}
