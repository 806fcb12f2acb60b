"""What the fault tests share: a small tmpfs as a server's data directory, a ballast file
that fills it, a /healthz prober, and one publisher and one reader per protocol, each
counting what the broker confirmed.

    fs = Tmpfs(tmp_path / "srv" / "data", "64m")   # mounted; fs.unmount() at the end
    ballast = fs.fill(leave=256 << 10)              # the disk is full; ballast.unlink() frees it
    with HealthProbe(server) as probe: ...          # /healthz every 50 ms: statuses, latencies
    pubs = Publishers(server)                        # AMQP, MQTT 5, Kafka, HTTP
    pubs.round(n)                                    # n messages on each; confirmed ones counted
    pubs.check_all_there(server)                     # every confirmed message can be read back
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pika
import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer

from tests.integration.mqtt_clients import Paho
from tests.serverproc import ADMIN_AUTH, LogbusServer

AMQP_QUEUE = "faults-amqp"
MQTT_QUEUE = "faults-mqtt"  # an AMQP queue bound to amq.topic: where MQTT publishes land
KAFKA_TOPIC = "faults-kafka"
HTTP_TOPIC = "faults-http"


class Tmpfs:
    def __init__(self, path: Path, size: str) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")

    def free(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int = 0) -> Path:
        """A ballast file taking all but ``leave`` bytes."""
        ballast = self.path / "ballast"
        chunk = b"\0" * (1 << 20)
        with open(ballast, "ab") as f:
            while (free := self.free() - leave) > 0:
                try:
                    f.write(chunk[: min(len(chunk), free)])
                    f.flush()
                except OSError:
                    break
        return ballast

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)


class HealthProbe:
    """GET /healthz every 50 ms in a thread: (seconds taken, status) per answer."""

    def __init__(self, server: LogbusServer) -> None:
        self.url = server.http_url + "/healthz"
        self.samples: list[tuple[float, int, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    status, body = r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                status, body = e.code, json.loads(e.read() or b"null")
            except OSError as e:
                status, body = 0, str(e)
            self.samples.append((time.perf_counter() - t0, status, body))

    def latest(self) -> tuple[int, Any]:
        return self.samples[-1][1:] if self.samples else (0, None)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def wait_for(self, status: int, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got, body = self.latest()
            if got == status:
                return body
            time.sleep(0.02)
        raise AssertionError(f"/healthz never answered {status}: last {self.latest()}")


def http(server: LogbusServer, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.http_url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **ADMIN_AUTH})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, json.loads(raw) if raw else None


class Publishers:
    """One publisher per protocol; ``confirmed[protocol]`` the bodies the broker confirmed,
    ``refused[protocol]`` how many it refused (or never answered)."""

    def __init__(self, server: LogbusServer, body_size: int = 2000) -> None:
        self.server = server
        self.size = body_size
        self.n = 0
        self.confirmed: dict[str, list[bytes]] = {p: [] for p in ("amqp", "mqtt", "kafka", "http")}
        self.refused: dict[str, int] = {p: 0 for p in self.confirmed}
        self.connect()

    def connect(self) -> None:
        s = self.server
        params = pika.ConnectionParameters("127.0.0.1", s.ports["amqp"], blocked_connection_timeout=30)
        self.amqp = pika.BlockingConnection(params)
        self.ch = self.amqp.channel()
        self.ch.queue_declare(AMQP_QUEUE, durable=True)
        self.ch.queue_declare(MQTT_QUEUE, durable=True)
        self.ch.queue_bind(MQTT_QUEUE, "amq.topic", "faults.#")
        self.ch.confirm_delivery()
        self.mqtt = Paho(s, "faults-publisher", version=5)
        self.kafka = Producer({"bootstrap.servers": f"127.0.0.1:{s.ports['kafka']}", "acks": "all",
                               "enable.idempotence": False, "retries": 0, "linger.ms": 0,
                               "message.timeout.ms": 10_000})
        for topic in (KAFKA_TOPIC, HTTP_TOPIC):
            status, _ = http(s, "POST", "/api/topics", {"name": topic, "partitions": 1, "config": {"flush": "sync"}})
            assert status in (201, 409), status

    def close(self) -> None:
        for f in (self.amqp.close, self.mqtt.close):
            try:
                f()
            except Exception:  # noqa: BLE001 - a broker killed under it
                pass
        self.kafka.flush(10)

    def body(self, protocol: str) -> bytes:
        self.n += 1
        return f"{protocol}-{self.n:07d}-".encode() + b"x" * self.size

    def round(self, n: int) -> None:
        """``n`` messages on each protocol, each waited for."""
        for _ in range(n):
            self.amqp_one()
            self.mqtt_one()
            self.http_one()
        self.kafka_many(n)

    def amqp_one(self) -> None:
        b = self.body("amqp")
        try:
            self.ch.basic_publish("", AMQP_QUEUE, b, pika.BasicProperties(delivery_mode=2), mandatory=True)
        except (pika.exceptions.NackError, pika.exceptions.UnroutableError):
            self.refused["amqp"] += 1
            return
        self.confirmed["amqp"].append(b)

    def mqtt_one(self) -> None:
        """QoS 1: a PUBACK with a reason code below 0x80 confirms; 0x80 and up (MQTT 5's
        refusal), or none, does not."""
        b = self.body("mqtt")
        codes: dict[int, Any] = {}
        self.mqtt.client.on_publish = lambda c, u, mid, rc, props: codes.__setitem__(mid, rc)
        info = self.mqtt.client.publish("faults/x", b, 1)
        info.wait_for_publish(15)
        rc = codes.get(info.mid)
        if rc is not None and not rc.is_failure:
            self.confirmed["mqtt"].append(b)
        else:
            self.refused["mqtt"] += 1

    def http_one(self) -> None:
        b = self.body("http")
        status, _ = http(self.server, "POST", f"/api/topics/{HTTP_TOPIC}/messages",
                         {"messages": [{"value": b.decode()}]})
        if 200 <= status < 300:
            self.confirmed["http"].append(b)
        else:
            assert status == 503, status
            self.refused["http"] += 1

    def kafka_many(self, n: int) -> None:
        done: list[tuple[bytes, Any]] = []
        for _ in range(n):
            b = self.body("kafka")
            self.kafka.produce(KAFKA_TOPIC, b, on_delivery=lambda err, msg, b=b: done.append((b, err)))
        self.kafka.flush(30)
        for b, err in done:
            if err is None:
                self.confirmed["kafka"].append(b)
            else:
                self.refused["kafka"] += 1

    def total_confirmed(self) -> int:
        return sum(len(v) for v in self.confirmed.values())


def drain(ch: Any, queue: str) -> list[bytes]:
    """The bodies ``queue`` holds now, taken (basic.get with auto-ack until it is empty)."""
    out = []
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append(body)


def read_back(server: LogbusServer) -> dict[str, list[bytes]]:
    """Everything each destination holds now (queues are drained)."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.ports["amqp"]))
    ch = conn.channel()
    out: dict[str, list[bytes]] = {}
    for protocol, queue in (("amqp", AMQP_QUEUE), ("mqtt", MQTT_QUEUE)):
        out[protocol] = drain(ch, queue)
    conn.close()
    for protocol, topic in (("kafka", KAFKA_TOPIC), ("http", HTTP_TOPIC)):
        c = KafkaConsumer(topic, bootstrap_servers=f"127.0.0.1:{server.ports['kafka']}",
                          auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=3000)
        out[protocol] = [m.value for m in c]
        c.close()
    return out


@contextlib.contextmanager
def on_a_small_disk(workdir: Path, size: str) -> Iterator[tuple[LogbusServer, Tmpfs]]:
    """A `logbus serve` (flush ``sync``) whose data directory is a tmpfs of ``size``, with
    the disk alarm off: publishers meet the full disk itself, not the alarm's block."""
    fs = Tmpfs(workdir / "data", size)
    s = LogbusServer(workdir, args=["--disk-free-limit", "0", "--default-flush", "sync"])
    try:
        s.start()
        yield s, fs
    finally:
        s.cleanup()
        fs.unmount()


@contextlib.contextmanager
def serving(tmp_path: Path, *, needs: str | None = None) -> Iterator[LogbusServer]:
    """A `logbus serve` (flush ``sync`` by default) in ``tmp_path``/srv, cleaned up after;
    ``needs``: a command the test drives (strace, prlimit), skipped when it is missing."""
    if needs is not None and shutil.which(needs) is None:
        pytest.skip(f"{needs} is not installed")
    s = LogbusServer(tmp_path / "srv", args=["--default-flush", "sync"])
    try:
        s.start()
        yield s
    finally:
        s.cleanup()
