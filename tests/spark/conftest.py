"""Spark tests: a real local Spark (``local[2]``, Java 17), one session per module.

``spark`` is module-scoped: start-up costs ~10 s, so each test module shares one. The
workers import this repository's ``logbus`` (PYTHONPATH), so a test exercises the code
under test, not an installed copy. ``LogWriter`` appends with the real log
(``LogManager`` on a temporary directory), as the broker does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from logbus.core.envelope_pb2 import Envelope
from logbus.core.log import LogManager, Record, TopicConfig
from logbus.core.message import Message
from tests.loop import LoopReactor
from tests.serverproc import REPO_ROOT


class LogWriter:
    """A log on ``data_dir`` to append to; ``close()`` it (or not: readers must cope)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.loop = LoopReactor()
        self.lm = LogManager(data_dir, self.loop)

    def topic(self, name: str, partitions: int = 1, **config: Any) -> Any:
        config.setdefault("flush", "none")
        return self.lm.open_topic(name, TopicConfig(partitions=partitions, **config), create=True)

    def append(self, topic: str, partition: int, records: Sequence[Record | Message]) -> list[int]:
        """Append as one tick (one batch); returns the records' offsets."""
        recs = [r.to_record() if isinstance(r, Message) else r for r in records]
        res = self.loop.wait(self.lm.partition(topic, partition).append(recs))
        return list(range(res.base_offset, res.last_offset + 1))

    def close(self) -> None:
        self.lm.close()
        while self.loop.run_once():
            pass


def written(data_dir: Path, batches: Sequence[Sequence[Record | Message]], topic: str = "t") -> Path:
    """A closed log on ``data_dir`` holding ``batches`` in partition 0 of ``topic``, one
    batch each; returns ``data_dir``."""
    w = LogWriter(data_dir)
    w.topic(topic)
    for b in batches:
        w.append(topic, 0, b)
    w.close()
    return data_dir


@pytest.fixture
def log_writer(tmp_path: Path) -> Iterator[LogWriter]:
    w = LogWriter(tmp_path / "data")
    yield w
    if not w.lm._closed:
        w.close()


def spark_session(name: str) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    paths = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One SparkSession (one JVM) for every Spark test of a worker: the tests share one
    xdist unit of work (tests/conftest.py), so the JVM starts once per run."""
    session = spark_session("logbus-tests")
    from logbus.spark import register

    register(session)
    yield session
    session.stop()


def env(**fields: Any) -> Envelope:
    return Envelope(**fields)
