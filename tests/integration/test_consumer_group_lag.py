"""A Kafka consumer group's lag counts every partition of the topics it reads, those it
has not committed on too (from the log start, as a new consumer with
``auto.offset.reset=earliest`` reads them), and says which those are: in the HTTP API,
in ``logbus consumer-group describe|list``, on the console's page of the group and in the
Prometheus series. kafka-python produces, commits and moves a log start against a real
`logbus serve`."""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition  # type: ignore[import-untyped]
from kafka.structs import OffsetAndMetadata  # type: ignore[import-untyped]

from tests.integration.mgmt import Mgmt
from tests.integration.test_kafka_admin import admin_client, produce
from tests.serverproc import LogbusServer, module_server, run_logbus

TOPIC, GROUP = "lag-orders", "lag-billing"
# produced per partition; partition 1's log start is moved to 5; the group committed 4 on 0
PRODUCED, START, COMMITTED = (10, 20, 30), 5, 4
# per partition: 10 - 4 committed; 20 - 5 and 30 - 0 from the log start
LAGS = (6, 15, 30)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "group-lag")


@pytest.fixture(scope="module", autouse=True)
def committed_on_one_partition(server: LogbusServer) -> None:
    Mgmt(server).ok("POST", "/api/topics", {"name": TOPIC, "partitions": 3})
    for partition, n in enumerate(PRODUCED):
        produce(server, TOPIC, partition, n)
    admin = admin_client(server)
    try:
        admin.delete_records({TopicPartition(TOPIC, 1): START})
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], group_id=GROUP, enable_auto_commit=False)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.commit({tp: OffsetAndMetadata(COMMITTED, "", -1)})
    consumer.close()


def cli(server: LogbusServer, *args: str) -> Any:
    host, port = server.host_port("http")
    result = run_logbus(*args, "--server", f"{host}:{port}")
    assert result.returncode == 0, result.stderr
    return result


def test_the_api_counts_uncommitted_partitions_from_the_log_start(server: LogbusServer) -> None:
    mgmt = Mgmt(server)
    g = mgmt.ok("GET", f"/api/consumer-groups/{GROUP}").json()
    parts = [(p["partition"], p["committed_offset"], p["log_start_offset"], p["log_end_offset"], p["lag"],
              p["uncommitted"]) for p in g["partitions"]]
    assert parts == [(0, COMMITTED, 0, 10, LAGS[0], False), (1, None, START, 20, LAGS[1], True),
                     (2, None, 0, 30, LAGS[2], True)]
    assert (g["lag"], g["uncommitted_partitions"]) == (sum(LAGS), 2)
    listed = next(x for x in mgmt.ok("GET", "/api/consumer-groups").json() if x["consumer_group"] == GROUP)
    assert (listed["lag"], listed["uncommitted_partitions"]) == (sum(LAGS), 2)


def test_the_cli_marks_uncommitted_partitions_and_sums_them(server: LogbusServer) -> None:
    described = cli(server, "consumer-group", "describe", GROUP).stdout
    head, rows = described.split("\n\n", 1)
    assert head == (f"consumer group {GROUP}: Empty, 0 members, lag {sum(LAGS)}"
                    f" ({LAGS[1] + LAGS[2]} of it on 2 uncommitted partitions, counted from the log start)")
    table = [line.split() for line in rows.splitlines()]
    assert table[0][:6] == ["CONSUMER-GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    assert [r[:6] for r in table[1:]] == [[GROUP, TOPIC, "0", str(COMMITTED), "10", str(LAGS[0])],
                                         [GROUP, TOPIC, "1", "uncommitted", "20", str(LAGS[1])],
                                         [GROUP, TOPIC, "2", "uncommitted", "30", str(LAGS[2])]]
    as_json = json.loads(cli(server, "consumer-group", "describe", GROUP, "--json").stdout)
    assert [p["uncommitted"] for p in as_json["partitions"]] == [False, True, True]
    listed = [line.split() for line in cli(server, "consumer-group", "list").stdout.splitlines()]
    assert listed[0] == ["CONSUMER-GROUP", "STATE", "MEMBERS", "PARTITIONS", "UNCOMMITTED", "LAG"]
    assert [GROUP, "Empty", "0", "3", "2", str(sum(LAGS))] in listed


def _cells(page: str, caption: str) -> list[list[str]]:
    """The rows of the console table with ``caption``, as text."""
    found = re.search(f"<caption>{re.escape(caption)}</caption>.*?<tbody>(.*?)</tbody>", page, re.S)
    assert found is not None, page
    return [[html.unescape(re.sub("<[^>]+>", "", c)) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", found.group(1), re.S)]


def test_the_console_marks_uncommitted_partitions_and_sums_them(server: LogbusServer) -> None:
    mgmt = Mgmt(server)
    page = mgmt.ok("GET", f"/consumer-groups/{GROUP}").body.decode()
    assert f'<dd id="group-lag">{sum(LAGS)}</dd>' in page
    rows = [r[:5] for r in _cells(page, "Lag per partition")]
    assert rows == [[f"{TOPIC} [0]", str(COMMITTED), "0", "10", str(LAGS[0])],
                    [f"{TOPIC} [1]", "uncommitted", str(START), "20", str(LAGS[1])],
                    [f"{TOPIC} [2]", "uncommitted", "0", "30", str(LAGS[2])]]
    assert "counted from the log start" in page
    listing = mgmt.ok("GET", "/consumer-groups").body.decode()
    row = next(r for r in _cells(listing, "Consumer groups") if r[0] == GROUP)
    assert row[1:] == ["Empty", "0", "1", "3", "2", str(sum(LAGS))]


def _series(text: str, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """Each sample of ``name`` in a Prometheus text page, by its labels (in any order)."""
    out = {}
    for line in text.splitlines():
        found = re.fullmatch(re.escape(name) + r"\{(.*)\} (\S+)", line)
        if found:
            out[frozenset(re.findall(r'(\w+)="([^"]*)"', found.group(1)))] = float(found.group(2))
    return out


def test_the_lag_series_count_uncommitted_partitions(server: LogbusServer) -> None:
    mgmt = Mgmt(server)
    total = mgmt.ok("GET", "/metrics").body.decode()
    group = frozenset({("group", GROUP)})
    assert _series(total, "logbus_consumer_group_lag")[group] == sum(LAGS)
    assert _series(total, "logbus_consumer_group_uncommitted_partitions")[group] == 2
    per = _series(mgmt.ok("GET", "/metrics/per-object").body.decode(), "logbus_consumer_group_lag")
    assert {int(dict(k)["partition"]): v for k, v in per.items() if dict(k)["group"] == GROUP} \
        == dict(enumerate(LAGS))


def test_a_member_assigned_partitions_it_has_not_committed_on_counts_them(server: LogbusServer) -> None:
    """The probe's case: a live member holds every partition and has committed on one.
    The member is librdkafka's (confluent-kafka): kafka-python 3.0.12 now and then ends a
    rebalance begun before its first metadata of the topic with no partition of its own."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as RdTopicPartition

    group = "lag-live"
    assigned: list[Any] = []
    member = Consumer({"bootstrap.servers": server.addresses["kafka"], "group.id": group,
                       "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        member.subscribe([TOPIC], on_assign=lambda _, partitions: assigned.extend(partitions))
        deadline = time.monotonic() + 30
        while len(assigned) < 3:
            member.poll(0.1)
            assert time.monotonic() < deadline, assigned
        member.commit(offsets=[RdTopicPartition(TOPIC, 0, COMMITTED)], asynchronous=False)
        g = Mgmt(server).ok("GET", f"/api/consumer-groups/{group}").json()
        assert (g["state"], g["lag"]) == ("Stable", sum(LAGS))
        assert [(p["partition"], p["committed_offset"], p["lag"], p["uncommitted"], bool(p["member_id"]))
                for p in g["partitions"]] == [(0, COMMITTED, LAGS[0], False, True), (1, None, LAGS[1], True, True),
                                              (2, None, LAGS[2], True, True)]
        assert g["uncommitted_partitions"] == 2
    finally:
        member.close()
