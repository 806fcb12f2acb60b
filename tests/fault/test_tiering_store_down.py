"""The object store stopped under a real `logbus serve` with a tiered topic, its data
directory a small tmpfs: uploads wait and are retried, local retention deletes nothing
that is not uploaded, the disk alarm holds producers before the disk is full, and once
the store is back the backlog goes up, the disk frees, the held produce completes and
every acknowledged record reads back from offset 0 (most of it from the bucket)."""

from __future__ import annotations

import time
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from logbus.core.log.manifest import MANIFEST_NAME, Manifest
from tests.fault.faultkit import Tmpfs
from tests.integration.alarms import metric, wait_for
from tests.remote_store import RemoteStore
from tests.serverproc import LogbusServer

TOPIC = "tele"
VALUE = 10_000
LIMIT = 40 << 20  # disk_free_limit: the alarm, with this much of the tmpfs still free


def alarm(server: LogbusServer) -> float:
    from tests.integration.mgmt import Mgmt
    body = Mgmt(server).call("GET", "/metrics").body.decode()
    return 1.0 if 'logbus_resource_alarm{resource="disk"} 1.0' in body else 0.0


def uploaded_end(store: RemoteStore) -> int:
    try:
        return Manifest.decode(store.read(f"down/{TOPIC}/0/{MANIFEST_NAME}")).end_offset
    except Exception:  # noqa: BLE001 (no manifest yet)
        return 0


def local_bytes(fs: Tmpfs) -> int:
    total = 0
    for f in (fs.path / "log" / TOPIC / "0").glob("*.log"):
        try:
            total += f.stat().st_size
        except FileNotFoundError:  # local retention deleted it meanwhile
            pass
    return total


def test_a_stopped_store_holds_uploads_and_the_disk_alarm_comes_before_a_full_disk(tmp_path: Path) -> None:
    (tmp_path / "s3").mkdir()
    store = RemoteStore(tmp_path / "s3")
    store.start()
    fs = Tmpfs(tmp_path / "srv" / "data", "160m")
    s = LogbusServer(tmp_path / "srv", args=["--disk-free-limit", str(LIMIT), "--remote-storage", store.url("down"),
                                            "--remote-storage-endpoint", store.endpoint], env=store.env)
    producer = None
    try:
        s.start()
        admin = KafkaAdminClient(bootstrap_servers=s.addresses["kafka"])
        admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs={
            "remote.storage.enable": "true", "segment.bytes": str(1 << 20), "local.retention.bytes": str(2 << 20),
            "flush": "sync"})])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=s.addresses["kafka"], acks="all", linger_ms=5,
                                 request_timeout_ms=120_000, delivery_timeout_ms=300_000, max_block_ms=120_000)
        acked: list[int] = []
        sent = 0

        def send(n: int) -> list[object]:
            nonlocal sent
            futures = []
            for _ in range(n):
                futures.append(producer.send(TOPIC, b"%09d" % sent + b"v" * (VALUE - 9)))  # type: ignore[union-attr]
                sent += 1
            return futures

        for f in send(400):  # ~4 MB, uploaded while the store is up
            acked.append(f.get(timeout=60).offset)  # type: ignore[attr-defined]
        wait_for(lambda: uploaded_end(store) >= 300, deadline=60)
        up = uploaded_end(store)
        store.stop()

        # the store is down: produce until the disk alarm holds the producer
        held: list[object] = []
        while not alarm(s):
            futures = send(100)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not all(f.is_done for f in futures):  # type: ignore[attr-defined]
                if alarm(s):
                    break
                time.sleep(0.05)
            done = [f for f in futures if f.is_done]  # type: ignore[attr-defined]
            acked += [f.get().offset for f in done]  # type: ignore[attr-defined]
            held += [f for f in futures if not f.is_done]  # type: ignore[attr-defined]
            assert sent < 20_000, "no disk alarm after 200 MB"
        assert fs.free() > LIMIT // 2, f"the alarm came too late: {fs.free()} bytes free"
        # nothing that was not uploaded was deleted locally
        assert local_bytes(fs) >= (len(acked) - up) * VALUE
        assert metric(s, "logbus_remote_failures") >= 1

        store.start()  # back: the backlog goes up, local retention frees the disk, the alarm clears
        wait_for(lambda: not alarm(s), deadline=180)
        for f in held:
            acked.append(f.get(timeout=120).offset)  # type: ignore[attr-defined]
        producer.flush(timeout=60)
        wait_for(lambda: local_bytes(fs) <= 8 << 20, deadline=120)

        consumer = KafkaConsumer(bootstrap_servers=s.addresses["kafka"], enable_auto_commit=False,
                                 max_partition_fetch_bytes=4 << 20)
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: dict[int, bytes] = {}
        while len(got) < sent:
            batch = consumer.poll(timeout_ms=5000).get(tp, [])
            assert batch, f"stuck at {len(got)} of {sent}"
            got.update((r.offset, r.value[:9]) for r in batch)
        consumer.close()
        assert sorted(acked) == list(range(sent))  # every record acknowledged, once
        assert [got[o] for o in range(sent)] == [b"%09d" % i for i in range(sent)]
    finally:
        try:
            if producer is not None:
                producer.close(timeout=5)
        finally:
            s.cleanup()
            fs.unmount()
            store.stop()
