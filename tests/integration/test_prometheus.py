"""A real Prometheus server (Debian's ``prometheus``, unpacked under .tools/ by `make test`) scrapes a
real ``logbus serve``'s ``/metrics`` and ``/metrics/per-object`` every second, and what
its HTTP API answers is checked against what real clients did: an AMQP (pika) queue's
depth after N confirmed publishes, an offline MQTT (paho) session's queued messages, a
Kafka (kafka-python) group's lag and committed offset after produce and commit, the
open connections, and the received counter's increase over a burst, exactly.

Prometheus runs on a free loopback port with its storage in the test's temporary
directory and is stopped by its pid. Every wait polls Prometheus's API until the expected
sample appears, within a deadline; nothing sleeps for a fixed time.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika  # type: ignore[import-untyped]
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # type: ignore[import-untyped]
from kafka.structs import OffsetAndMetadata  # type: ignore[import-untyped]

from tests.integration.mqtt_clients import WAIT, Paho, unique
from tests.serverproc import REPO_ROOT, LogbusServer, module_server

PROMETHEUS = str(REPO_ROOT / ".tools/prometheus/usr/bin/prometheus")  # unpacked by `make test`
SCRAPE_INTERVAL = "1s"
READY_TIMEOUT = 20.0
SAMPLE_TIMEOUT = 15.0  # a few scrape intervals, with room for a loaded 2-core machine
AGGREGATED, PER_OBJECT = "logbus", "logbus-per-object"  # the two scrape jobs


class Prometheus:
    """One ``prometheus`` process scraping one logbus server, and its HTTP API."""

    def __init__(self, workdir: Path, target: str) -> None:
        self.workdir = workdir
        self.log_path = workdir / "prometheus.log"
        self.config_path = workdir / "prometheus.yml"
        self.target = target
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def config(self) -> dict[str, Any]:
        """The scrape configuration (JSON is YAML): both endpoints, as two jobs."""
        jobs = [(AGGREGATED, "/metrics"), (PER_OBJECT, "/metrics/per-object")]
        return {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL},
            "scrape_configs": [{"job_name": job, "metrics_path": path,
                                "static_configs": [{"targets": [self.target]}]} for job, path in jobs],
        }

    def start(self) -> Prometheus:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(json.dumps(self.config(), indent=2))
        for _ in range(3):  # the port is free when chosen; another process may take it first
            port = free_port()
            self.url = f"http://127.0.0.1:{port}"
            with self.log_path.open("ab") as log:
                self.proc = subprocess.Popen(
                    [PROMETHEUS, f"--config.file={self.config_path}",
                     f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                     f"--web.listen-address=127.0.0.1:{port}"],
                    cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True)
            if self._wait_ready():
                return self
            if "address already in use" not in self.log_text():
                break
        raise AssertionError(f"prometheus did not start:\n{self.log_text()}")

    def _wait_ready(self) -> bool:
        """Poll ``/-/ready`` until 200; False if the process exited first."""
        assert self.proc is not None
        deadline = time.monotonic() + READY_TIMEOUT
        while self.proc.poll() is None:
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as reply:
                    if reply.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError):
                pass  # not listening yet, or 503 while it replays its (empty) write-ahead log
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"prometheus not ready after {READY_TIMEOUT:.0f} s:\n{self.log_text()}")
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        """SIGTERM by pid and wait; SIGKILL if it does not stop."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # -- the HTTP API -----------------------------------------------------------------------

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            body = json.load(reply)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str, at_ms: int | None = None) -> list[dict[str, Any]]:
        """An instant query's result (vector or matrix), evaluated now or at ``at_ms``."""
        params = {"query": promql}
        if at_ms is not None:
            params["time"] = f"{at_ms // 1000}.{at_ms % 1000:03d}"
        result: list[dict[str, Any]] = self.api("query", **params)["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self.api("targets", state="active")["activeTargets"]
        return active

    def wait(self, promql: str, ready: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
        """The query's result once ``ready(result)`` holds (after the next scrapes)."""
        deadline = time.monotonic() + SAMPLE_TIMEOUT
        while True:
            result = self.query(promql)
            if ready(result):
                return result
            if time.monotonic() > deadline:
                scrapes = [(t["scrapeUrl"], t["health"], t["lastError"]) for t in self.targets()]
                raise AssertionError(f"{promql} is still {result} after {SAMPLE_TIMEOUT:.0f} s; "
                                     f"targets: {scrapes}")
            time.sleep(0.1)

    def value(self, promql: str, expected: float) -> dict[str, Any]:
        """Wait until ``promql`` is one series whose latest sample is ``expected``."""
        [series] = self.wait(promql, lambda r: len(r) == 1 and float(r[0]["value"][1]) == expected)
        return series


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def samples(result: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """A range selector's one series as (timestamp in ms, value)."""
    [series] = result
    return [(round(float(t) * 1000), float(v)) for t, v in series["values"]]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "prometheus-target")


@pytest.fixture(scope="module")
def prometheus(server: LogbusServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.fail(f"{PROMETHEUS} is missing: `make test` unpacks it (Debian package prometheus, "
                    "the Makefile's PROMETHEUS target)")
    prom = Prometheus(tmp_path_factory.mktemp("prometheus"), server.addresses["http"])
    prom.start()
    try:
        yield prom
    finally:
        prom.stop()


def amqp(server: LogbusServer) -> Any:
    host, port = server.host_port("amqp")
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=host, port=port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1))


def test_both_endpoints_are_scraped(prometheus: Prometheus) -> None:
    up = prometheus.wait("up", lambda r: len(r) == 2 and all(s["value"][1] == "1" for s in r))
    assert sorted(s["metric"]["job"] for s in up) == [AGGREGATED, PER_OBJECT]
    targets = {t["labels"]["job"]: t for t in prometheus.targets()}
    assert targets[AGGREGATED]["scrapeUrl"].endswith("/metrics")
    assert targets[PER_OBJECT]["scrapeUrl"].endswith("/metrics/per-object")
    assert all((t["health"], t["lastError"]) == ("up", "") for t in targets.values()), targets
    # the default set is bounded: one series per kind, none per queue
    kinds = prometheus.wait(f'logbus_queue_messages_ready{{job="{AGGREGATED}"}}', lambda r: len(r) == 4)
    assert sorted(s["metric"]["kind"] for s in kinds) == ["classic", "pop", "session", "shared"]
    assert not any("queue" in s["metric"] for s in kinds)
    rss = prometheus.wait(f'process_resident_memory_bytes{{job="{AGGREGATED}"}}', lambda r: len(r) == 1)
    assert float(rss[0]["value"][1]) > 0


def test_amqp_depth_connections_and_received_increase(server: LogbusServer, prometheus: Prometheus) -> None:
    n = 25
    received = f'logbus_global_messages_received_total{{job="{AGGREGATED}",protocol="amqp"}}'
    conn = amqp(server)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("prom-orders", durable=True)
    prometheus.value(f'logbus_connections{{job="{AGGREGATED}",protocol="amqp"}}', 1)

    # the counter before the burst, from a scrape that began after this point
    mark_ms = round(time.time() * 1000)
    before = prometheus.wait(f"{received}[1m]", lambda r: len(r) == 1 and samples(r)[-1][0] >= mark_ms)
    v0 = samples(before)[-1][1]
    for i in range(n):
        ch.basic_publish("", "prom-orders", b"order %d" % i)  # confirmed: basic_publish waits for the ack

    prometheus.value(f'logbus_queue_messages_ready{{job="{AGGREGATED}",kind="classic"}}', n)
    per_queue = prometheus.value(f'logbus_queue_messages_ready{{job="{PER_OBJECT}",queue="prom-orders"}}', n)
    assert (per_queue["metric"]["vhost"], per_queue["metric"]["kind"]) == ("/", "classic")
    prometheus.value(f'logbus_queue_messages_unacked{{job="{PER_OBJECT}",queue="prom-orders"}}', 0)
    prometheus.value(f'logbus_queue_consumers{{job="{PER_OBJECT}",queue="prom-orders"}}', 0)

    # the raw counter at two scrapes, before and after the burst: exactly n apart
    after = samples(prometheus.wait(f"{received}[1m]", lambda r: len(r) == 1 and samples(r)[-1][1] == v0 + n))
    t1 = after[-1][0]
    t0 = max(t for t, v in after if v == v0)  # the last scrape before the burst
    between = [v for t, v in after if t0 <= t <= t1]
    assert between == sorted(between)  # a counter: no reset in between
    # increase() over exactly [t0, t1] (a 2.x range includes its start), evaluated at t1:
    # with a sample on both edges of the window Prometheus extrapolates nothing (its
    # durations to start and end are 0), so it is exactly the difference, n; rate() is n
    # over the window's seconds
    window = f"{t1 - t0}ms"
    [inc] = prometheus.query(f"increase({received}[{window}])", at_ms=t1)
    assert float(inc["value"][1]) == n
    [rate] = prometheus.query(f"rate({received}[{window}])", at_ms=t1)
    assert float(rate["value"][1]) == pytest.approx(n / ((t1 - t0) / 1000), rel=1e-9)
    assert float(rate["value"][1]) > 0

    conn.close()
    prometheus.value(f'logbus_connections{{job="{AGGREGATED}",protocol="amqp"}}', 0)
    # closed connections' messages stay counted
    prometheus.value(received, v0 + n)


def test_mqtt_offline_session_depth(server: LogbusServer, prometheus: Prometheus) -> None:
    m = 4
    cid = unique("prom-dev")
    sub = Paho(server, cid, clean=False)
    sub.subscribe("prom/dev/#", qos=1)
    sub.close()
    pub = Paho(server)
    for i in range(m):
        pub.publish(f"prom/dev/{i}", b"reading", qos=1)
    pub.close()
    session = prometheus.value(
        f'logbus_queue_messages_ready{{job="{PER_OBJECT}",queue="mqtt-session:{cid}"}}', m)
    assert (session["metric"]["vhost"], session["metric"]["kind"]) == ("/", "session")
    prometheus.value(f'logbus_queue_messages_ready{{job="{AGGREGATED}",kind="session"}}', m)
    prometheus.value(f'logbus_queue_consumers{{job="{PER_OBJECT}",queue="mqtt-session:{cid}"}}', 0)

    # back online, the session takes them: the depth goes to 0
    sub = Paho(server, cid, clean=False)
    assert len(sub.take(m, timeout=WAIT)) == m
    prometheus.value(f'logbus_queue_messages_ready{{job="{PER_OBJECT}",queue="mqtt-session:{cid}"}}', 0)
    sub.close()


def test_kafka_group_lag(server: LogbusServer, prometheus: Prometheus) -> None:
    topic, group, k, committed = "prom-clicks", "prom-analytics", 10, 4
    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"])
    for i in range(k):
        producer.send(topic, value=b"click %d" % i, partition=0)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], group_id=group,
                             enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.commit({tp: OffsetAndMetadata(committed, "", -1)})
    consumer.close()

    prometheus.value(f'logbus_consumer_group_lag{{job="{AGGREGATED}",group="{group}"}}', k - committed)
    part = f'job="{PER_OBJECT}",group="{group}",topic="{topic}",partition="0"'
    prometheus.value(f"logbus_consumer_group_lag{{{part}}}", k - committed)
    prometheus.value(f"logbus_consumer_group_committed_offset{{{part}}}", committed)
