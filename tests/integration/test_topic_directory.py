"""A topic's directory that holds files the broker did not write (another process put
them there) is never deleted by creating that topic, through any path a client has:
a Kafka producer's auto-create and CreateTopics, against a real ``logbus serve``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kafka.errors as Errors
import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic


def tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_auto_create_and_create_topics_leave_foreign_files_alone(logbus_server: Any) -> None:
    server = logbus_server(listeners={"amqp": "off", "mqtt": "off", "http": "off"})
    tdir = server.data_dir / "log" / "telemetry"
    (tdir / "0").mkdir(parents=True)
    (tdir / "0" / "00000000000000000000.log").write_bytes(b"2,000 readings someone else wrote" * 100)
    (tdir / "1").mkdir()
    (tdir / "1" / "notes.txt").write_text("not the broker's\n")
    before = tree(tdir)

    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"], max_block_ms=3000)
    try:
        with pytest.raises(Errors.KafkaTimeoutError):
            producer.send("telemetry", b"21.5").get(10)  # auto-create refused: no metadata
    finally:
        producer.close(5)
    assert tree(tdir) == before
    assert f"its directory {tdir} already holds files" in server.log_text()

    admin = KafkaAdminClient(bootstrap_servers=server.addresses["kafka"], request_timeout_ms=10_000)
    try:
        with pytest.raises(Errors.TopicAlreadyExistsError, match="already holds files"):
            admin.create_topics([NewTopic("telemetry", 2, 1)])
    finally:
        admin.close()
    assert tree(tdir) == before
    assert server.running()
