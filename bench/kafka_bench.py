#!/usr/bin/env python3
"""Kafka gateway throughput with confluent-kafka (librdkafka), against the machine's raw
limits measured in the same run.

Starts its own `logbus serve` (temp data dir, loopback, free ports), produces
``--records`` records of ``--size`` bytes with acks=all (topic flush policy `sync`) and
a tuned producer (linger, large batches), then consumes them all from the beginning (with kcat by default, or confluent-kafka's
Python consumer with ``--consumer python``).
In the same run: raw sequential disk write (1 MiB writes + fdatasync) of the same
bytes, and raw loopback TCP throughput. Broker CPU per produced record comes from
/proc/<pid>/stat. Prints one JSON document.

    python bench/kafka_bench.py --records 200000 --size 1024
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LOOPBACK, BenchError, cpu_split, self_cpu, start_logbus, stop_logbus

CHUNK = 1 << 20


def cpu_seconds(pid: int) -> float:
    return sum(cpu_split(pid))


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def median_of(runs: int, measure: Any, *args: Any) -> dict[str, Any]:
    """The same raw measurement ``runs`` times (single runs vary by 2x on this VM)."""
    values = [measure(*args, run) for run in range(runs)]
    return {"runs_mb_per_s": [round(v, 1) for v in values], "median_mb_per_s": statistics.median(values)}


def raw_disk(directory: str, total: int, run: int = 0) -> float:
    """Sequential 1 MiB writes of new data plus one fdatasync. The file is kept until
    every run is over (``remove_raw_files``): like the broker's log, each run fills page
    cache pages that were not just freed (on this VM, writing into recycled pages is
    2-3x faster than into new ones, so deleting between runs would flatter the baseline)."""
    buf = os.urandom(CHUNK)
    path = os.path.join(directory, f"raw{run}.bin")
    os.sync()  # no writeback of an earlier run competes with this one
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t0 = time.perf_counter()
    written = 0
    while written < total:
        written += os.write(fd, buf)
    os.fdatasync(fd)
    dt = time.perf_counter() - t0
    os.close(fd)
    return written / dt / 1e6


def remove_raw_files(directory: str) -> None:
    for name in os.listdir(directory):
        if name.startswith("raw") and name.endswith(".bin"):
            os.unlink(os.path.join(directory, name))


def raw_loopback(total: int, run: int = 0) -> float:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    received = [0]

    def sink() -> None:
        conn, _ = srv.accept()
        with conn:
            while True:
                data = conn.recv(CHUNK)
                if not data:
                    break
                received[0] += len(data)

    t = threading.Thread(target=sink)
    t.start()
    buf = os.urandom(CHUNK)
    t0 = time.perf_counter()
    with socket.create_connection(srv.getsockname()) as c:
        sent = 0
        while sent < total:
            c.sendall(buf)
            sent += len(buf)
    t.join()
    dt = time.perf_counter() - t0
    srv.close()
    return received[0] / dt / 1e6


def start_broker(workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    """`logbus serve` listening for Kafka (and HTTP), topics flushed `sync` by default."""
    try:
        proc, addresses = start_logbus(workdir, {"kafka": LOOPBACK, "http": LOOPBACK},
                                       ["--default-flush", "sync"], timeout=30)
    except BenchError as exc:
        raise SystemExit(str(exc)) from None
    return proc, addresses["kafka"]


def produce(boot: str, topic: str, records: int, size: int, pid: int) -> dict[str, float]:
    value = os.urandom(size)
    p = Producer({
        "bootstrap.servers": boot, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
        "batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576, "compression.type": "none", "log_level": 3,
    })
    errors: list[Any] = []

    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    p.produce(topic, value=b"warm-up", on_delivery=done)  # topic auto-created, metadata known
    p.flush(30)
    user0, sys0 = cpu_split(pid)
    client0 = self_cpu()
    t0 = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value=value, on_delivery=done)
                break
            except BufferError:
                p.poll(0.01)
    left = p.flush(120)
    dt = time.perf_counter() - t0
    user1, sys1 = cpu_split(pid)
    client = self_cpu() - client0
    cpu = user1 - user0 + sys1 - sys0
    if left or errors:
        raise SystemExit(f"produce failed: {left} not delivered, errors {errors[:3]}")
    return {"seconds": dt, "records_per_s": records / dt, "mb_per_s": records * size / dt / 1e6,
            "broker_cpu_seconds": cpu, "broker_cpu_us_per_record": cpu / records * 1e6,
            "broker_user_us_per_record": (user1 - user0) / records * 1e6,
            "broker_system_us_per_record": (sys1 - sys0) / records * 1e6,
            "client_cpu_us_per_record": client / records * 1e6}


def consume(boot: str, topic: str, records: int, size: int, pid: int) -> dict[str, float]:
    c = Consumer({
        "bootstrap.servers": boot, "group.id": "bench", "enable.auto.commit": False,
        "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760, "log_level": 3,
    })
    c.assign([TopicPartition(topic, 0, 1)])  # skip the warm-up record
    got = 0
    nbytes = 0
    cpu0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    deadline = t0 + 300
    while got < records and time.perf_counter() < deadline:
        for m in c.consume(10_000, 1.0):
            if m.error() is None:
                got += 1
                nbytes += len(m.value())
    dt = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    c.close()
    if got < records:
        raise SystemExit(f"consumed only {got} of {records}")
    return {"seconds": dt, "records_per_s": got / dt, "mb_per_s": nbytes / dt / 1e6,
            "broker_cpu_seconds": cpu, "broker_cpu_us_per_record": cpu / got * 1e6}


def consume_kcat(boot: str, topic: str, records: int, size: int, pid: int, fetch_bytes: int) -> dict[str, float]:
    """The same consumption with kcat (librdkafka in C), so the broker is measured, not
    the Python client loop (~200k messages/s). kcat's own CPU is reported: at 1 KiB
    records the client's per-message work, not the broker, bounds this figure."""
    kcat = shutil.which("kcat")
    if kcat is None:
        raise SystemExit("--consumer kcat needs kcat (Debian package kcat; `make test` installs it)")
    user0, sys0 = cpu_split(pid)
    kcat0 = children_cpu()
    t0 = time.perf_counter()
    out = subprocess.run(
        [kcat, "-C", "-b", boot, "-t", topic, "-p", "0", "-o", "1", "-c", str(records), "-q", "-f", "%S\\n",
         "-X", "fetch.max.bytes=52428800", "-X", f"max.partition.fetch.bytes={fetch_bytes}"],
        stdout=subprocess.PIPE, timeout=600, check=True,
    ).stdout
    dt = time.perf_counter() - t0
    user1, sys1 = cpu_split(pid)
    kcat_cpu = children_cpu() - kcat0
    got = out.count(b"\n")
    if got < records:
        raise SystemExit(f"kcat consumed only {got} of {records}")
    cpu = user1 - user0 + sys1 - sys0
    return {"seconds": dt, "records_per_s": got / dt, "mb_per_s": got * size / dt / 1e6,
            "broker_cpu_seconds": cpu, "broker_cpu_us_per_record": cpu / got * 1e6,
            "broker_user_us_per_record": (user1 - user0) / got * 1e6,
            "broker_system_us_per_record": (sys1 - sys0) / got * 1e6,
            "kcat_cpu_us_per_record": kcat_cpu / got * 1e6}


# -- the broker's own capacity: the wire without a client library -------------------
#
# On a 2-core machine librdkafka's per-record CPU (3-5 us to produce, ~1 us to consume
# a 1 KiB record) is larger than the broker's, so the figures above measure the client
# as much as the broker. These two loops send pre-encoded requests instead: the batch a
# tuned producer would send (records of --size bytes, ~1 MiB per batch), and Fetch
# requests whose answers are counted, not decoded.


def _frame(request: Any, version: int) -> bytearray:
    request.API_VERSION = version
    request.with_header(correlation_id=0, client_id="bench-wire")
    return bytearray(request.encode(header=True, framed=True))


def _read_frame(sock: socket.socket, buf: bytearray) -> memoryview:
    """One response frame into ``buf`` (grown as needed); returns a view of its body."""
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        raise SystemExit("broker closed the connection")
    (size,) = struct.unpack(">i", head)
    if len(buf) < size:
        buf.extend(bytes(size - len(buf)))
    view = memoryview(buf)[:size]
    got = 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            raise SystemExit("broker closed the connection")
        got += n
    return view


def produce_wire(boot: str, topic: str, records: int, size: int, pid: int, in_flight: int = 8) -> dict[str, float]:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    per_batch = max(1, (1 << 20) // (size + 20))
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    value = os.urandom(size)
    for i in range(per_batch):
        b.append(i, int(time.time() * 1000), None, value, [])
    T = ProduceRequest.TopicProduceData
    frame = _frame(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=bytes(b.build()))])]), 7)
    requests = -(-records // per_batch)
    host, port = boot.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    user0, sys0 = cpu_split(pid)
    client0 = self_cpu()
    t0 = time.perf_counter()
    sent = answered = 0
    while answered < requests:
        while sent < requests and sent - answered < in_flight:
            struct.pack_into(">i", frame, 8, sent)  # correlation id
            sock.sendall(frame)
            sent += 1
        resp = ProduceResponse.decode(bytes(_read_frame(sock, buf)), version=7, header=True)
        code = resp.responses[0].partition_responses[0].error_code
        if code:
            raise SystemExit(f"wire produce failed with Kafka error {code}")
        answered += 1
    dt = time.perf_counter() - t0
    user1, sys1 = cpu_split(pid)
    client = self_cpu() - client0
    sock.close()
    n = requests * per_batch
    return {"records": n, "seconds": dt, "mb_per_s": n * size / dt / 1e6, "requests_in_flight": in_flight,
            "broker_user_us_per_record": (user1 - user0) / n * 1e6,
            "broker_system_us_per_record": (sys1 - sys0) / n * 1e6,
            "client_cpu_us_per_record": client / n * 1e6}


def consume_wire(boot: str, topic: str, records: int, size: int, pid: int, fetch_bytes: int) -> dict[str, float]:
    from kafka.protocol.consumer import FetchRequest

    host, port = boot.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    T = FetchRequest.FetchTopic
    buf = bytearray()
    user0, sys0 = cpu_split(pid)
    t0 = time.perf_counter()
    offset = nbytes = 0
    while offset < records:
        frame = _frame(FetchRequest(
            replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=fetch_bytes, isolation_level=0, session_id=0,
            session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[T(topic=topic, partitions=[
                T.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                                 log_start_offset=-1, partition_max_bytes=fetch_bytes)])]), 11)
        sock.sendall(frame)
        body = _read_frame(sock, buf)
        # Fetch v11, one topic, one partition: the records start after a fixed layout
        name_len = struct.unpack_from(">h", body, 4 + 4 + 2 + 4 + 4)[0]
        p = 4 + 4 + 2 + 4 + 4 + 2 + name_len + 4
        error = struct.unpack_from(">h", body, p + 4)[0]
        if error:
            raise SystemExit(f"wire fetch failed with Kafka error {error}")
        p += 4 + 2 + 8 + 8 + 8 + 4 + 4  # partition, error, hw, lso, log start, aborted, replica
        (rlen,) = struct.unpack_from(">i", body, p)
        p += 4
        end = p + rlen
        while end - p >= 61:  # walk batch headers: base offset, length, last offset delta
            base, length = struct.unpack_from(">qi", body, p)
            if p + 12 + length > end:
                break
            offset = base + struct.unpack_from(">i", body, p + 23)[0] + 1
            p += 12 + length
        nbytes += rlen
    dt = time.perf_counter() - t0
    user1, sys1 = cpu_split(pid)
    sock.close()
    return {"seconds": dt, "mb_per_s": nbytes / dt / 1e6, "records_mb_per_s": records * size / dt / 1e6,
            "broker_user_us_per_record": (user1 - user0) / records * 1e6,
            "broker_system_us_per_record": (sys1 - sys0) / records * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--consumer", choices=["python", "kcat"], default="kcat",
                    help="consume with confluent-kafka's Python loop or with kcat (C)")
    ap.add_argument("--fetch-bytes", type=int, default=4 << 20, help="kcat's max.partition.fetch.bytes")
    ap.add_argument("--no-wire", dest="wire", action="store_false",
                    help="skip the broker-capacity runs with pre-encoded requests")
    ap.add_argument("--raw-runs", type=int, default=3, help="repetitions of each raw measurement (median used)")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="logbus-kbench-", dir=args.dir)
    total = args.records * args.size
    proc = None
    try:
        out: dict[str, Any] = {"bench": "kafka_bench", "args": vars(args)}
        out["raw_disk_write"] = median_of(args.raw_runs, raw_disk, workdir, total)
        out["raw_loopback"] = median_of(args.raw_runs, raw_loopback, total)
        remove_raw_files(workdir)
        os.sync()
        proc, boot = start_broker(workdir)
        out["produce"] = produce(boot, "bench", args.records, args.size, proc.pid)
        if args.consumer == "kcat":
            out["consume"] = consume_kcat(boot, "bench", args.records, args.size, proc.pid, args.fetch_bytes)
        else:
            out["consume"] = consume(boot, "bench", args.records, args.size, proc.pid)
        disk, loop = out["raw_disk_write"]["median_mb_per_s"], out["raw_loopback"]["median_mb_per_s"]
        out["ratios"] = {
            "produce_vs_raw_disk": out["produce"]["mb_per_s"] / disk,
            "consume_vs_raw_loopback": out["consume"]["mb_per_s"] / loop,
        }
        if args.wire:
            wire = out["broker_capacity"] = {
                "produce": produce_wire(boot, "wire", args.records, args.size, proc.pid),
                "consume": consume_wire(boot, "wire", args.records, args.size, proc.pid, args.fetch_bytes),
            }
            out["ratios"]["wire_produce_vs_raw_disk"] = wire["produce"]["mb_per_s"] / disk
            out["ratios"]["wire_consume_vs_raw_loopback"] = wire["consume"]["mb_per_s"] / loop
        print(json.dumps(out, indent=2))
    finally:
        if proc is not None:
            stop_logbus(proc)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
