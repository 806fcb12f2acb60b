"""The operator's CLI commands against a real server, given as host:port: queue list /
get / purge after AMQP publishes, connection list / close of a real AMQP client, group
describe / reset-offsets after Kafka produce and commit, users, vhosts, permissions,
overview; tables aligned, --json the API's."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pika  # type: ignore[import-untyped]
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # type: ignore[import-untyped]
from kafka.structs import OffsetAndMetadata  # type: ignore[import-untyped]

from tests.serverproc import LogbusServer, module_server, run_logbus


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "cli-ops")


def cli(server: LogbusServer, *args: str, env: dict[str, str] | None = None) -> Any:
    host, port = server.host_port("http")
    result = run_logbus(*args, "--server", f"{host}:{port}", env=env)
    return result


def rows(stdout: str) -> list[list[str]]:
    lines = stdout.splitlines()
    header = lines[0]
    starts = [i for i in range(len(header)) if header[i] != " " and (i == 0 or header[i - 2:i] == "  ")]
    return [[line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])] for line in lines]


def test_queue_list_get_purge(server: LogbusServer) -> None:
    host, port = server.host_port("amqp")
    conn = pika.BlockingConnection(pika.ConnectionParameters(host=host, port=port, connection_attempts=1))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("cli-jobs", durable=True)
    for i in range(4):
        ch.basic_publish("", "cli-jobs", f"job {i}".encode(), pika.BasicProperties(message_id=f"id-{i}"))

    listed = cli(server, "queue", "list", "--vhost", "/")
    assert listed.returncode == 0, listed.stderr
    table = rows(listed.stdout)
    assert table[0] == ["VHOST", "NAME", "KIND", "READY", "UNACKED", "SCHEDULED", "CONSUMERS"]
    assert ["/", "cli-jobs", "classic", "4", "0", "0", "0"] in table

    got = cli(server, "queue", "get", "cli-jobs", "--count", "2")
    assert got.returncode == 0, got.stderr
    assert [r[2] for r in rows(got.stdout)[1:]] == ["id-0", "id-1"]
    as_json = json.loads(cli(server, "queue", "get", "cli-jobs", "--json").stdout)
    assert [m["payload"] for m in as_json] == [f"job {i}" for i in range(4)]

    purged = cli(server, "queue", "purge", "cli-jobs")
    assert purged.returncode == 0 and purged.stdout == "purged 4 messages from queue cli-jobs\n", purged
    assert json.loads(cli(server, "queue", "list", "--json").stdout)[0]["messages_ready"] == 0

    # connection list shows the AMQP client; close ends it in AMQP's terms
    conns = json.loads(cli(server, "connection", "list", "--protocol", "amqp", "--json").stdout)
    assert len(conns) == 1 and conns[0]["user"] == "guest"
    table = rows(cli(server, "connection", "list").stdout)
    assert table[0] == ["ID", "PROTOCOL", "PEER", "USER", "VHOST", "CLIENT", "PRODUCT", "VERSION", "TLS",
                        "CONNECTED AT", "IN", "OUT", "BYTES IN", "BYTES OUT"]
    row = next(r for r in table if r[0] == str(conns[0]["id"]))
    assert row[1] == "amqp" and row[6:8] == ["Pika Python Client Library", pika.__version__]
    assert row[9] == conns[0]["connected_at"] and row[9].endswith("Z")
    closed = cli(server, "connection", "close", str(conns[0]["id"]))
    assert closed.returncode == 0, closed.stderr
    with pytest.raises(pika.exceptions.ConnectionClosed) as exc:
        conn.process_data_events(time_limit=5)
        conn.channel()
    assert exc.value.reply_code == 320
    missing = cli(server, "queue", "purge", "no-such")
    assert missing.returncode == 1 and "no queue 'no-such'" in missing.stderr


def test_group_describe_and_reset(server: LogbusServer) -> None:
    topic, group = "cli-clicks", "cli-etl"
    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"])
    for i in range(6):
        producer.send(topic, value=b"%d" % i, partition=0)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], group_id=group, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.commit({tp: OffsetAndMetadata(2, "", -1)})

    described = cli(server, "consumer-group", "describe", group)
    assert described.returncode == 0, described.stderr
    table = rows(described.stdout.split("\n\n", 1)[1])
    assert table[0][:6] == ["CONSUMER-GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    assert table[1][:6] == [group, topic, "0", "2", "6", "4"]
    assert [group, "Empty"] == rows(cli(server, "consumer-group", "list").stdout)[1][:2]

    dry = cli(server, "consumer-group", "reset-offsets", group, "--to-latest")
    assert dry.returncode == 0 and "a dry run" in dry.stderr, dry
    assert rows(dry.stdout)[1] == [group, topic, "0", "2", "6"]
    assert consumer.committed(tp) == 2
    done = cli(server, "consumer-group", "reset-offsets", group, "--to-datetime", "2000-01-01T00:00:00", "--execute",
               "--topic", topic)
    assert done.returncode == 0, done.stderr
    assert consumer.committed(tp) == 0
    later = cli(server, "consumer-group", "reset-offsets", group, "--shift-by", "5", "--execute", "--json")
    assert json.loads(later.stdout) == [{"topic": topic, "partition": 0, "current_offset": 0, "new_offset": 5}]
    assert consumer.committed(tp) == 5
    consumer.close()

    searched = cli(server, "topic", "search", topic, "--from", "0", "--limit", "2")
    assert searched.returncode == 0, searched.stderr
    shown, note = searched.stdout.split("\n\n")
    table = rows(shown)
    assert table[0] == ["PARTITION", "OFFSET", "TIME", "KEY", "MESSAGE ID", "VALUE"]
    assert [(r[1], r[5]) for r in table[1:]] == [("0", "0"), ("1", "1")]
    assert note == "first 2 shown, more match\n"  # six records match
    every = cli(server, "topic", "search", topic, "--from", "0", "--limit", "6")
    assert len(rows(every.stdout)) == 7 and "more match" not in every.stdout
    assert cli(server, "topic", "search", topic, "--key", "none").stdout == "no messages found\n"


def test_users_vhosts_permissions_overview(server: LogbusServer) -> None:
    env = {"LOGBUS_NEW_PASSWORD": "s3cret"}
    assert cli(server, "vhost", "add", "cli-prod").returncode == 0
    assert cli(server, "user", "add", "cli-ann", "--tags", "management", env=env).returncode == 0
    assert cli(server, "permission", "set", "cli-prod", "cli-ann", "--write", "^$").returncode == 0
    perms = json.loads(cli(server, "permission", "list", "--json").stdout)
    assert {"user": "cli-ann", "vhost": "cli-prod", "configure": ".*", "write": "^$", "read": ".*"} in perms
    assert ["cli-ann", "management"] in rows(cli(server, "user", "list").stdout)
    assert "cli-prod" in [r[0] for r in rows(cli(server, "vhost", "list").stdout)]
    # the new user logs in with the password from the variable
    as_ann = run_logbus("queue", "list", "--server", server.http_url, "--user", "cli-ann", "--password", "s3cret")
    assert as_ann.returncode == 0, as_ann.stderr
    assert cli(server, "permission", "clear", "cli-prod", "cli-ann").returncode == 0
    assert cli(server, "user", "delete", "cli-ann").returncode == 0
    assert cli(server, "vhost", "delete", "cli-prod").returncode == 0

    deadline = time.monotonic() + 10
    overview = cli(server, "overview")
    while overview.returncode != 0 and time.monotonic() < deadline:
        overview = cli(server, "overview")
    assert overview.returncode == 0, overview.stderr
    assert overview.stdout.splitlines()[0].split()[:2] == ["version", "logbus"]
    assert "PROTOCOL  RECEIVED" in overview.stdout
    assert json.loads(cli(server, "overview", "--json").stdout)["product_name"] == "logbus"
