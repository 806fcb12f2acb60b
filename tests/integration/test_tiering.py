"""Tiered storage end to end: a real ``logbus serve --remote-storage`` against a real
S3-compatible store (SeaweedFS), driven by real clients. A tiered topic (``amq.topic``,
where MQTT publishes land) gets ``TIER_MB`` through Kafka with MQTT messages mixed in,
under a local retention of a tenth of that; kcat and kafka-python read every record
from offset 0 (most of them from remote segments), and an AMQP queue bound before the
upload drains all of it; Spark counts and groups it from the bucket (and the data
directory's last segments), as produced. Kill -9s during uploads leave the manifest naming each
segment once, and every object in the bucket named by it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import pika
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient

from logbus.core.log.manifest import MANIFEST_NAME, Manifest
from tests.integration.mqtt_clients import Paho
from tests.remote_store import RemoteStore
from tests.serverproc import REPO_ROOT, LogbusServer

TIER_MB = int(os.environ.get("LOGBUS_TIER_TEST_MB", "300"))
RECORD = 10_000  # bytes of each Kafka record's value
SEGMENT = 4 << 20
TOPIC = "amq.topic"
LOCAL = (TIER_MB << 20) // 10  # local.retention.bytes
KCAT = shutil.which("kcat")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RemoteStore]:
    (tmp_path / "s3").mkdir()
    s = RemoteStore(tmp_path / "s3")
    s.start()
    yield s
    s.stop()


def tiered_server(logbus_server: Callable[..., LogbusServer], store: RemoteStore) -> LogbusServer:
    return logbus_server(args=["--remote-storage", store.url("tier"), "--remote-storage-endpoint", store.endpoint],
                         env=store.env)


def tier_topic(server: LogbusServer, local_bytes: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=server.addresses["kafka"])
    try:
        settings = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT),
                    "local.retention.bytes": str(local_bytes), "flush": "none"}
        result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC, {
            k: (AlterConfigOp.SET, v) for k, v in settings.items()})])
        assert result == {"topic": {TOPIC: "OK"}}, result
    finally:
        admin.close()


def manifest(store: RemoteStore) -> Manifest:
    return Manifest.decode(store.read(f"tier/{TOPIC}/0/{MANIFEST_NAME}"))


def local_bytes(server: LogbusServer) -> int:
    d = server.data_dir / "log" / TOPIC / "0"
    return sum(f.stat().st_size for f in d.glob("*.log"))


def produce(server: LogbusServer, n: int, start: int) -> None:
    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks=1, linger_ms=5,
                             batch_size=256 << 10, max_request_size=4 << 20)
    try:
        for i in range(start, start + n):
            producer.send(TOPIC, key=b"tele.kafka", value=b"%09d" % i + b"k" * (RECORD - 9))
        producer.flush(timeout=120)
    finally:
        producer.close(timeout=10)


def test_a_tiered_topic_is_read_whole_by_kafka_and_drained_by_a_queue(
        logbus_server: Callable[..., LogbusServer], store: RemoteStore) -> None:
    server = tiered_server(logbus_server, store)
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        *server.host_port("amqp"), credentials=pika.PlainCredentials("guest", "guest")))
    ch = connection.channel()
    ch.queue_declare("tele", durable=True)
    ch.queue_bind("tele", TOPIC, "tele.#")
    ch.queue_declare("tele-mqtt", durable=True)
    ch.queue_bind("tele-mqtt", TOPIC, "tele.mqtt")
    mqtt = Paho(server, "tier-dev")
    mqtt.publish("tele/mqtt", b"m%06d" % 0, qos=1)  # amq.topic's topic is made on first use
    mqtt_n = 1
    tier_topic(server, LOCAL)
    total = TIER_MB * (1 << 20) // RECORD
    for part in range(10):  # Kafka batches with MQTT messages between them
        produce(server, total // 10, part * (total // 10))
        for _ in range(20):
            mqtt.publish("tele/mqtt", b"m%06d" % mqtt_n, qos=1)
            mqtt_n += 1
    mqtt.client.disconnect()
    mqtt.client.loop_stop()
    n = (total // 10) * 10 + mqtt_n
    # uploads catch up, and local copies go down to the local retention
    deadline = time.monotonic() + 300
    while not (manifest_ok := _uploaded(store, server)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert manifest_ok, f"local {local_bytes(server)} bytes; manifest ends at {manifest(store).end_offset}"
    assert local_bytes(server) <= LOCAL + 2 * SEGMENT
    m = manifest(store)
    assert m.start_offset == 0 and m.end_offset > n // 2
    assert min(int(f.name[:20]) for f in (server.data_dir / "log" / TOPIC / "0").glob("*.log")) > n // 2
    # kafka-python from offset 0: every record, in order
    consumer = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False,
                             fetch_max_bytes=8 << 20, max_partition_fetch_bytes=4 << 20)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    seen = kafka_values = 0
    expect = 0
    while seen < n:
        batch = consumer.poll(timeout_ms=5000).get(tp, [])
        assert batch or seen == n, f"stuck at {seen} of {n}"
        for r in batch:
            assert r.offset == seen
            seen += 1
            if r.key == b"tele.kafka":
                assert r.value[:9] == b"%09d" % expect
                expect += 1
                kafka_values += 1
    consumer.close()
    assert kafka_values == (total // 10) * 10
    # kcat from the beginning
    if KCAT is not None:
        out = subprocess.run([KCAT, "-b", server.addresses["kafka"], "-C", "-t", TOPIC, "-p", "0", "-o", "beginning",
                              "-e", "-q", "-f", "%o\n"], capture_output=True, timeout=300)
        assert out.returncode == 0, out.stderr.decode()
        offsets = out.stdout.split()
        assert len(offsets) == n and offsets[0] == b"0" and offsets[-1] == b"%d" % (n - 1)
    # the queues bound before any upload drain everything: pushed to a consumer ...
    got_kafka = got_mqtt = 0
    blocking = server.metric("logbus_remote_blocking_reads_total")
    ch.basic_qos(prefetch_count=500)
    for method, _, body in ch.consume("tele", auto_ack=True, inactivity_timeout=60):
        assert method is not None, f"stuck at {got_kafka} + {got_mqtt} of {n}"
        if body.startswith(b"m"):
            assert body == b"m%06d" % got_mqtt
            got_mqtt += 1
        else:
            assert body[:9] == b"%09d" % got_kafka
            got_kafka += 1
        if got_kafka + got_mqtt == n:
            break
    ch.cancel()
    assert (got_kafka, got_mqtt) == ((total // 10) * 10, mqtt_n)
    # deliveries waited for their chunks off the reactor: none read the store on it
    assert server.metric("logbus_remote_blocking_reads_total") == blocking
    # ... and taken one by one (basic.get)
    got = []
    while True:
        method, _, body = ch.basic_get("tele-mqtt", auto_ack=True)
        if method is None:
            break
        got.append(body)
    connection.close()
    assert got == [b"m%06d" % i for i in range(mqtt_n)]
    # most of it came from the bucket, through the cache
    fetched = server.metric("logbus_remote_fetched_bytes_total")
    assert fetched >= (TIER_MB << 20) // 2, fetched
    # Spark over the whole topic: the bucket, and the data directory for what is only local
    env = {**os.environ, **store.env, "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(REPO_ROOT / "tests/spark/remote_cluster_job.py"), TOPIC,
                           str(server.data_dir), store.url("tier"), store.endpoint, "local[2]"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["count"] == result["read"] == n
    assert result["by_key"] == {"tele.kafka": (total // 10) * 10, "tele/mqtt": mqtt_n}


def _uploaded(store: RemoteStore, server: LogbusServer, local: int = LOCAL) -> bool:
    try:
        m = manifest(store)
    except Exception:  # noqa: BLE001 (not written yet)
        return False
    d = server.data_dir / "log" / TOPIC / "0"
    sealed = sorted(int(f.name[:20]) for f in d.glob("*.log"))[:-1]
    return all(b < m.end_offset for b in sealed) and local_bytes(server) <= local + 2 * SEGMENT


def test_kill_9_during_uploads_leaves_the_manifest_consistent(
        logbus_server: Callable[..., LogbusServer], store: RemoteStore) -> None:
    server = tiered_server(logbus_server, store)
    mqtt = Paho(server, "tier-dev")
    mqtt.publish("tele/mqtt", b"first", qos=1)  # amq.topic's topic is made on first use
    mqtt.close()
    tier_topic(server, SEGMENT)
    produced = 0
    for kill in range(10):
        produce(server, 400, produced)  # ~4 MB: a segment sealed each round
        produced += 400
        if kill % 2:  # the store hangs: the upload started within a second of the roll is cut mid-way
            store.pause()
            time.sleep(1.5)
            server.kill()
            store.resume()
        else:  # before, during or after an upload
            time.sleep(0.2 * (kill % 4))
            server.kill()
        server = server.restart()
    # a request cut by a kill while the store hung may still land after the restart's sweep:
    # a clean restart (its sweep) once uploads caught up leaves only what the manifest names
    deadline = time.monotonic() + 120
    while not _uploaded(store, server, SEGMENT) and time.monotonic() < deadline:
        time.sleep(0.5)
    server.stop()
    server = server.restart()
    deadline = time.monotonic() + 120
    while not _uploaded_all(store, server) and time.monotonic() < deadline:
        time.sleep(0.5)
    m = manifest(store)
    bases = [s.base_offset for s in m.segments]
    assert bases == sorted(set(bases)) and m.segments[0].base_offset == 0
    named = {f"tier/{TOPIC}/0/{x}" for s in m.segments for x in s.names()} | {f"tier/{TOPIC}/0/{MANIFEST_NAME}"}
    assert set(store.objects(f"tier/{TOPIC}/0/")) == named
    consumer = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    values: list[bytes] = []
    while len(values) < produced + 1:
        batch = consumer.poll(timeout_ms=5000).get(tp, [])
        assert batch, f"stuck at {len(values)} of {produced + 1}"
        values += [r.value[:9] for r in batch]
    consumer.close()
    # acks=1 with flush=none: a kill may take the page cache's last records, never reorder
    assert values == [b"first"] + [b"%09d" % i for i in range(produced)]


def _uploaded_all(store: RemoteStore, server: LogbusServer) -> bool:
    try:
        m = manifest(store)
    except Exception:  # noqa: BLE001 (not written yet)
        return False
    objects = store.objects(f"tier/{TOPIC}/0/")
    named = {f"tier/{TOPIC}/0/{x}" for s in m.segments for x in s.names()} | {f"tier/{TOPIC}/0/{MANIFEST_NAME}"}
    d = server.data_dir / "log" / TOPIC / "0"
    sealed = sorted(int(f.name[:20]) for f in d.glob("*.log"))[:-1]
    return all(b < m.end_offset for b in sealed) and set(objects) == named
