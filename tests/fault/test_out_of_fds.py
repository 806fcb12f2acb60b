"""Out of file descriptors under a real `logbus serve`: its limit is lowered with
util-linux's ``prlimit`` and bare sockets take what is left.

What must hold: the resource alarms keep being checked (their LoopingCall once died on
EMFILE and never ran again); a declare that needs a new file gets an error in AMQP's
terms, not a reset, and leaves no empty topic directory; /healthz still answers over a
connection made before; once sockets go, everything works again without a restart.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pika
import pytest

from tests.fault.faultkit import serving
from tests.serverproc import ADMIN_AUTH, LogbusServer

LIMIT = 200


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LogbusServer]:
    with serving(tmp_path, needs="prlimit") as s:
        yield s


def get_json(conn: http.client.HTTPConnection, path: str) -> tuple[int, float, object]:
    t0 = time.perf_counter()
    conn.request("GET", path, headers=ADMIN_AUTH)
    r = conn.getresponse()
    body = json.loads(r.read())
    return r.status, time.perf_counter() - t0, body


def test_out_of_file_descriptors_the_broker_keeps_checking_and_answers_cleanly(server: LogbusServer) -> None:
    s = server
    amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", s.ports["amqp"]))
    ch = amqp.channel()
    ch.queue_declare("before", durable=True)
    web = http.client.HTTPConnection("127.0.0.1", s.ports["http"], timeout=10)
    assert get_json(web, "/healthz")[0] == 200

    subprocess.run(["prlimit", f"--pid={s.pid}", f"--nofile={LIMIT}:{LIMIT}"], check=True)
    hogs = []
    for _ in range(LIMIT + 50):  # more than the broker can accept
        try:
            hogs.append(socket.create_connection(("127.0.0.1", s.ports["kafka"]), timeout=2))
        except OSError:
            break
    time.sleep(2.5)  # two checks of the alarms (once a second) while out of descriptors
    status, seconds, _ = get_json(web, "/healthz")
    assert seconds < 0.1, seconds
    first = get_json(web, "/api/limits")[2]
    time.sleep(1.2)
    second = get_json(web, "/api/limits")[2]
    assert isinstance(first, dict) and isinstance(second, dict)
    assert first["memory_used_bytes"] > 0 and second["memory_used_bytes"] > 0

    topics_before = set((s.data_dir / "log").iterdir())
    try:
        ch.exchange_declare("emfile-ex", "topic", durable=True)
        declared = True
    except pika.exceptions.ConnectionClosed as e:  # a clean close in AMQP's terms, not a reset
        assert e.reply_code == 541 and "could not be created" in e.reply_text, e
        declared = False
    if not declared:
        assert set((s.data_dir / "log").iterdir()) == topics_before, "a topic directory was left"

    for h in hogs:
        h.close()
    time.sleep(0.5)
    log = s.log_text()
    assert "Unhandled error in Deferred" not in log and "Unhandled Error" not in log, log[-3000:]

    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", s.ports["amqp"]))
    ch2 = conn.channel()
    ch2.exchange_declare("emfile-ex", "topic", durable=True)
    ch2.queue_declare("after", durable=True)
    ch2.queue_bind("after", "emfile-ex", "#")
    ch2.confirm_delivery()
    ch2.basic_publish("emfile-ex", "a.b", b"hello", pika.BasicProperties(delivery_mode=2))
    ch2.basic_publish("emfile-ex", "a.b", b"kept", pika.BasicProperties(delivery_mode=2))
    method, _, body = ch2.basic_get("after", auto_ack=True)
    assert body == b"hello"
    conn.close()
    hogs = []  # out of descriptors again, and killed so
    for _ in range(LIMIT + 50):
        try:
            hogs.append(socket.create_connection(("127.0.0.1", s.ports["kafka"]), timeout=2))
        except OSError:
            break
    assert s.kill() == -9
    for h in hogs:
        h.close()
    s.start()
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", s.ports["amqp"]))
    method, _, body = conn.channel().basic_get("after", auto_ack=True)
    assert body == b"kept"
    conn.close()
    try:
        amqp.close()
    except Exception:  # noqa: BLE001 - closed by the broker above
        pass
    web.close()
