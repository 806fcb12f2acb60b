"""The read-only log reader and the Arrow decoder, without Spark: against logs the real
log wrote, against the slow reference decoder, and against damaged tails."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from logbus.core.log import Record
from logbus.core.message import Message
from logbus.spark import schema as S
from logbus.spark.decode import decode_chunk, reference_rows
from logbus.spark.logfiles import DataDir, DataLoss, LogReadError
from logbus.spark.plan import OffsetRange, read_range
from tests.serverproc import REPO_ROOT, run_logbus
from tests.spark.conftest import LogWriter, env, written

ALL = S.columns(True)


def rows_of(data_dir: Path, topic: str, partition: int, lo: int, hi: int) -> list[dict]:
    out = []
    for rb in read_range(str(data_dir), OffsetRange(topic, partition, lo, hi), ALL, True):
        assert rb.schema.equals(S.arrow_schema(ALL))
        out.extend(rb.to_pylist())
    return out


def as_reference(row: dict) -> dict:
    """A decoded row in reference_rows' shape."""
    r = dict(row)
    r["timestamp_ms"] = round(r.pop("timestamp").timestamp() * 1000)
    r["headers"] = [(h["key"], h["value"]) for h in r["headers"]]
    return r


def test_reader_sees_what_the_log_wrote(log_writer: LogWriter) -> None:
    log_writer.topic("t", partitions=2)
    msgs = [
        Message(b"k1", b"v1", 1_000, [("a", b"1"), ("b", None)],
                env(protocol=1, tag="red", exchange="ex", routing_key="rk", priority=3, keys=["x", "y"])),
        Message(None, b"no key", 2_000, [], env(protocol=2, mqtt_topic="a/b", mqtt_qos=1, correlation_data=b"\x01\xff")),
        Message(b"k3", None, 3_000),  # no envelope, no value
        Message(b"", b"", 4_000, [("h", b"")]),
    ]
    assert log_writer.append("t", 1, msgs) == [0, 1, 2, 3]
    log_writer.append("t", 1, [Record(b"plain", b"kafka", 5_000, [("logbus.envelope", b"\xff\xff")])])
    data = DataDir(log_writer.data_dir)
    assert data.topics() == ["t"] and data.partitions("t") == [0, 1]
    pf = data.partition("t", 1)
    assert (pf.start(), pf.end()) == (0, 5)
    rows = rows_of(log_writer.data_dir, "t", 1, 0, 5)
    assert [r["offset"] for r in rows] == [0, 1, 2, 3, 4]
    assert [(r["key"], r["value"]) for r in rows] == [
        (b"k1", b"v1"), (None, b"no key"), (b"k3", None), (b"", b""), (b"plain", b"kafka")]
    assert [round(r["timestamp"].timestamp() * 1000) for r in rows] == [1000, 2000, 3000, 4000, 5000]
    assert {r["topic"] for r in rows} == {"t"} and {r["partition"] for r in rows} == {1}
    assert [r["timestampType"] for r in rows] == [0] * 5
    assert rows[0]["headers"] == [{"key": "a", "value": b"1"}, {"key": "b", "value": None}]
    assert (rows[0]["protocol"], rows[0]["tag"]) == ("AMQP", "red")
    assert dict(rows[0]["properties"]) == {"exchange": "ex", "routing_key": "rk", "priority": "3", "keys": "x y"}
    assert (rows[1]["protocol"], rows[1]["tag"]) == ("MQTT", None)
    assert dict(rows[1]["properties"]) == {"mqtt_topic": "a/b", "mqtt_qos": "1", "correlation_data": "01ff"}
    assert (rows[2]["protocol"], rows[2]["tag"], rows[2]["properties"], rows[2]["headers"]) == (None, None, [], [])
    assert rows[3]["headers"] == [{"key": "h", "value": b""}]
    # a last header named like the envelope that does not parse stays a user header
    assert rows[4]["headers"] == [{"key": "logbus.envelope", "value": b"\xff\xff"}] and rows[4]["protocol"] is None
    # a sub-range starts and stops inside the batch
    assert [r["offset"] for r in rows_of(log_writer.data_dir, "t", 1, 1, 3)] == [1, 2]
    assert rows_of(log_writer.data_dir, "t", 0, 0, 0) == []


record = st.builds(
    lambda k, v, ts, hs, tag, proto: Message(k, v, ts, hs, env(tag=tag, protocol=proto)),
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=300),
    st.integers(0, 2**41),
    st.lists(st.tuples(st.text(max_size=8).filter(lambda s: s != "logbus.envelope"),
                       st.none() | st.binary(max_size=20)), max_size=3),
    st.text(max_size=5),
    st.integers(0, 4),
)


@settings(max_examples=30)
@given(batches=st.lists(st.lists(record, min_size=1, max_size=20), min_size=1, max_size=6),
       cut=st.integers(0, 200))
def test_fast_decoder_matches_the_reference(tmp_path_factory: pytest.TempPathFactory,
                                            batches: list[list[Message]], cut: int) -> None:
    pf = DataDir(written(tmp_path_factory.mktemp("d") / "data", batches)).partition("t", 0)
    end = pf.end()
    lo = min(cut, end)
    fast, ref = [], []
    for data, infos in pf.chunks(lo, end):
        rb = decode_chunk(data, infos, lo, end, "t", 0, ALL)
        if rb is not None:
            fast.extend(as_reference(r) for r in rb.to_pylist())
        ref.extend(r for r in reference_rows(data, infos, "t", 0) if r["offset"] >= lo)
    assert fast == ref
    assert len(fast) == end - lo


def test_compressed_batches_are_decoded(tmp_path: Path) -> None:
    """A Kafka producer's gzip batch, stored as sent (append_raw)."""
    w = LogWriter(tmp_path / "data")
    w.topic("z")
    builder = DefaultRecordBatchBuilder(2, 1, 0, -1, -1, -1, 2**31 - 1)  # codec 1: gzip
    for i in range(50):
        builder.append(i, 10_000 + i, b"k%d" % i, b"value %d " % i * 10, [("n", b"%d" % i)])
    w.loop.wait(w.lm.partition("z", 0).append_raw(bytes(builder.build())))
    w.append("z", 0, [Record(b"after", b"plain", 99)])
    w.close()
    rows = rows_of(w.data_dir, "z", 0, 0, 51)
    assert [r["key"] for r in rows] == [b"k%d" % i for i in range(50)] + [b"after"]
    assert rows[7]["value"] == b"value 7 " * 10 and rows[7]["headers"] == [{"key": "n", "value": b"7"}]


def test_the_end_is_the_last_complete_valid_batch(log_writer: LogWriter) -> None:
    """A torn or damaged tail (a broker mid-write, a crash) is not read, and reading
    does not change a byte of any file."""
    log_writer.topic("t")
    for i in range(3):
        log_writer.append("t", 0, [Record(b"k", b"v%d" % i, 1000)] * 10)
    log_writer.close()
    seg = log_writer.data_dir / "log" / "t" / "0" / "00000000000000000000.log"
    whole = seg.read_bytes()
    pf = DataDir(log_writer.data_dir).partition("t", 0)
    assert pf.end() == 30
    last = len(whole) - (len(whole) // 3)  # about where the third batch starts
    first_two = [r["offset"] for r in rows_of(log_writer.data_dir, "t", 0, 0, 30)]
    assert first_two == list(range(30))
    # a half-written next batch
    seg.write_bytes(whole + whole[: len(whole) // 3 // 2])
    assert DataDir(log_writer.data_dir).partition("t", 0).end() == 30
    # a flipped byte in the last batch: CRC fails, the end moves back
    damaged = bytearray(whole)
    damaged[-3] ^= 0xFF
    seg.write_bytes(bytes(damaged))
    before = {p: p.read_bytes() for p in seg.parent.iterdir()}
    assert DataDir(log_writer.data_dir).partition("t", 0).end() == 20
    with pytest.raises(LogReadError):
        rows_of(log_writer.data_dir, "t", 0, 0, 30)
    assert {p: p.read_bytes() for p in seg.parent.iterdir()} == before
    assert last > 0


def test_a_remembered_end_is_not_trusted_after_the_partition_is_recreated(log_writer: LogWriter) -> None:
    """A stream's reader remembers where its last end() scan stopped; a topic deleted
    and created again has a new active segment of the same name, shorter or longer."""
    log_writer.topic("t")
    for i in range(4):
        log_writer.append("t", 0, [Record(b"k", b"old", 1000)] * 10)
    pf = DataDir(log_writer.data_dir).partition("t", 0)
    assert pf.end() == 40
    log_writer.lm.delete_topic("t")
    log_writer.topic("t")
    log_writer.append("t", 0, [Record(b"k", b"new", 1000)] * 3)
    assert pf.end() == 3  # shorter than where the scan stopped
    log_writer.lm.delete_topic("t")
    log_writer.topic("t")
    for i in range(3):
        log_writer.append("t", 0, [Record(b"key", b"a longer value %d" % i, 1000)] * 7)
    assert pf.end() == 21  # longer: the remembered position is inside another batch
    log_writer.append("t", 0, [Record(b"k", b"more", 1000)] * 2)
    assert pf.end() == 23


def test_index_seek_and_time_lookup_over_segments(log_writer: LogWriter) -> None:
    log_writer.topic("t", segment_bytes=4096, index_interval_bytes=256)
    for i in range(100):
        log_writer.append("t", 0, [Record(b"k%d" % i, b"x" * 100, 1_000 + 10 * i)])
    log_writer.close()
    pf = DataDir(log_writer.data_dir).partition("t", 0)
    assert len(pf.segments()) > 3 and pf.end() == 100
    floors: list[int] = []
    for off in (0, 1, 37, 64, 99):
        base, _, batch_base = pf.locate(off)
        assert batch_base == off and base <= off
        # the walk starts at the sparse index's entry, not at the segment's first byte
        pos, floor = pf._floor(base, off)
        assert floor <= off and (pos > 0) == (floor > base)
        floors.append(pos)
    assert sum(pos > 0 for pos in floors) >= 2  # seeks landed mid-segment
    assert [r["key"] for r in rows_of(log_writer.data_dir, "t", 0, 37, 40)] == [b"k37", b"k38", b"k39"]
    assert pf.offset_for_time(1_000 + 10 * 55, 100) == 55
    assert pf.offset_for_time(1_000 + 10 * 55 - 5, 100) == 55
    assert pf.offset_for_time(10**12, 100) is None
    # retention deleting the first segment: reading from 0 is data loss
    first = pf.segments()[0]
    os.unlink(pf._path(first, ".log"))
    with pytest.raises(DataLoss):
        rows_of(log_writer.data_dir, "t", 0, 0, 100)
    after = list(read_range(str(log_writer.data_dir), OffsetRange("t", 0, 0, 100), ("offset",), False))
    assert pa.concat_arrays([b.column(0) for b in after]).to_pylist() == list(range(pf.start(), 100))


def test_export_parquet_command(log_writer: LogWriter, tmp_path: Path) -> None:
    log_writer.topic("orders eu", partitions=2)
    log_writer.append("orders eu", 0, [Message(b"a", b"1", 1000, [], env(protocol=4, tag="t"))])
    log_writer.append("orders eu", 1, [Record(b"b", b"2", 2000), Record(b"c", b"3", 3000)])
    out = tmp_path / "out"
    res = run_logbus("export", "parquet", "--topic", "orders eu", "--out", str(out),
                     "--data-dir", str(log_writer.data_dir))
    assert res.returncode == 0, res.stderr
    assert "2 records" in res.stdout
    t0 = pq.read_table(out / "orders%20eu-0.parquet")
    t1 = pq.read_table(out / "orders%20eu-1.parquet")
    assert t0.schema.equals(S.arrow_schema(S.columns(False)))
    assert t0.to_pylist()[0]["protocol"] == "HTTP" and t0.to_pylist()[0]["tag"] == "t"
    assert t1.column("value").to_pylist() == [b"2", b"3"]
    missing = run_logbus("export", "parquet", "--topic", "nope", "--out", str(out),
                         "--data-dir", str(log_writer.data_dir))
    assert missing.returncode == 1 and "no topic 'nope'" in missing.stderr


def test_export_shows_progress_on_a_terminal(log_writer: LogWriter, tmp_path: Path) -> None:
    """On a terminal (a pty here) stderr gets a progress bar; through a pipe it gets
    nothing (the test above)."""
    import pty

    log_writer.topic("big", partitions=1)
    log_writer.append("big", 0, [Record(b"k", b"v%d" % i, 1000 + i) for i in range(50)])
    out = tmp_path / "out"
    controller, terminal = pty.openpty()
    child = subprocess.Popen([sys.executable, "-m", "logbus", "export", "parquet", "--topic", "big", "--out",
                              str(out), "--data-dir", str(log_writer.data_dir)],
                             cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal)
    os.close(terminal)
    seen = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        seen += chunk
    os.close(controller)
    assert child.wait(timeout=60) == 0, seen
    assert b"exporting big [" + b"#" * 30 + b"] 50/50" in seen, seen
    assert b"50 records" in seen


def test_spark_package_imports_neither_twisted_nor_the_broker() -> None:
    """Of the log, only its byte layout (``core.log.format``, and the bucket's,
    ``core.log.manifest``) is loaded."""
    code = ("import sys; import logbus.spark.source, logbus.spark.stream, logbus.spark.export, pyspark_logbus; "
            "bad = [m for m in sys.modules if m.split('.')[0] == 'twisted' or m.startswith(("
            "'logbus.server', 'logbus.core.broker', 'logbus.gateway', 'logbus.core.log')) "
            "and m not in ('logbus.core.log', 'logbus.core.log.format', 'logbus.core.log.manifest')]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_timestamp_filters_translate_to_exact_milliseconds() -> None:
    """262.143 s * 1000 is 262142.99... as a float: the pushed-down bound must be 262143."""
    from pyspark.sql.datasource import GreaterThanOrEqual, In

    from logbus.spark.source import translate_filter

    v = dt.datetime(1970, 1, 1, 0, 4, 22, 143000, tzinfo=dt.timezone.utc)
    assert translate_filter(GreaterThanOrEqual(("timestamp",), v)).value == 262_143  # type: ignore[union-attr]
    assert translate_filter(In(("timestamp",), (v, v + dt.timedelta(milliseconds=1)))).value == (262_143, 262_144)  # type: ignore[union-attr]
    assert translate_filter(GreaterThanOrEqual(("timestamp",), v + dt.timedelta(microseconds=1))) is None
