"""Other MQTT clients than paho against a real ``logbus serve``: amqtt's asyncio client
(QoS 0, 1 and 2 both ways, a persistent session, wildcards) and Debian's mosquitto_pub /
mosquitto_sub (3.1.1 and 5, retained messages, user properties, a will from the command
line)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from amqtt.client import MQTTClient

from tests.integration.mqtt_clients import Paho, unique
from tests.serverproc import LogbusServer, module_server

needs_mosquitto = pytest.mark.skipif(shutil.which("mosquitto_pub") is None,
                                     reason="mosquitto-clients not installed (make test installs it)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "mqtt_clients", listeners={"kafka": "off", "amqp": "off"})


def uri(server: LogbusServer) -> str:
    host, port = server.host_port("mqtt")
    return f"mqtt://{host}:{port}/"


def run(coro: Any, timeout: float = 30) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_amqtt_publish_and_subscribe_each_qos(server: LogbusServer) -> None:
    base = unique("amqtt")

    async def body() -> list[tuple[str, bytes, int]]:
        sub = MQTTClient(client_id=unique("asub"))
        pub = MQTTClient(client_id=unique("apub"))
        await sub.connect(uri(server))
        await pub.connect(uri(server))
        try:
            assert await sub.subscribe([(f"{base}/+", 2)]) == [2]
            for qos in (0, 1, 2):
                await pub.publish(f"{base}/q{qos}", f"m{qos}".encode(), qos=qos)
            got = []
            for _ in range(3):
                m = await sub.deliver_message(timeout_duration=10)
                assert m is not None
                got.append((m.topic, bytes(m.data), m.qos))
            with pytest.raises(asyncio.TimeoutError):  # nothing more: not a duplicate
                await sub.deliver_message(timeout_duration=0.5)
            return got
        finally:
            await pub.disconnect()
            await sub.disconnect()

    assert run(body()) == [(f"{base}/q{q}", f"m{q}".encode(), q) for q in (0, 1, 2)]


def test_amqtt_persistent_session_gets_what_came_offline(server: LogbusServer) -> None:
    base, cid = unique("apers"), unique("akeep")

    async def subscribe_then_leave() -> None:
        c = MQTTClient(client_id=cid, config={"cleansession": False})
        await c.connect(uri(server), cleansession=False)
        await c.subscribe([(f"{base}/#", 1)])
        await c.disconnect()

    async def come_back() -> list[bytes]:
        c = MQTTClient(client_id=cid, config={"cleansession": False})
        await c.connect(uri(server), cleansession=False)
        try:
            got = []
            for _ in range(5):
                m = await c.deliver_message(timeout_duration=10)
                assert m is not None
                got.append(bytes(m.data))
            return got
        finally:
            await c.disconnect()

    run(subscribe_then_leave())
    pub = Paho(server, unique("pub"))
    for i in range(5):
        pub.publish(f"{base}/x", str(i).encode(), 1)
    pub.close()
    assert run(come_back()) == [str(i).encode() for i in range(5)]


def mosquitto(tool: str, server: LogbusServer, *args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    host, port = server.host_port("mqtt")
    return subprocess.run([tool, "-h", host, "-p", str(port), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def sub_process(server: LogbusServer, *args: str) -> subprocess.Popen[str]:
    host, port = server.host_port("mqtt")
    return subprocess.Popen(["mosquitto_sub", "-h", host, "-p", str(port), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@needs_mosquitto
@pytest.mark.parametrize("version", ["mqttv311", "mqttv5"])
def test_mosquitto_pub_and_sub(server: LogbusServer, version: str) -> None:
    base = unique("mosq")
    watcher = Paho(server, unique("w"))
    watcher.subscribe(f"{base}/#", 1)
    sub = sub_process(server, "-V", version, "-t", f"{base}/#", "-q", "2", "-C", "3", "-v", "-W", "20")
    try:
        time.sleep(1.0)  # mosquitto_sub has subscribed by then
        for qos in (0, 1, 2):
            r = mosquitto("mosquitto_pub", server, "-V", version, "-t", f"{base}/t{qos}", "-m", f"hello {qos}",
                          "-q", str(qos))
            assert r.returncode == 0, r.stderr
        out, err = sub.communicate(timeout=20)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.communicate()
    assert sub.returncode == 0, err
    assert out.splitlines() == [f"{base}/t{q} hello {q}" for q in (0, 1, 2)]
    assert [m.payload for m in watcher.take(3)] == [b"hello 0", b"hello 1", b"hello 2"]
    watcher.close()


@needs_mosquitto
def test_mosquitto_retained_and_user_properties(server: LogbusServer) -> None:
    base = unique("mret")
    r = mosquitto("mosquitto_pub", server, "-V", "mqttv5", "-t", f"{base}/state", "-m", "on", "-r", "-q", "1",
                  "-D", "publish", "user-property", "site", "lyon")
    assert r.returncode == 0, r.stderr
    r = mosquitto("mosquitto_sub", server, "-V", "mqttv5", "-t", f"{base}/+", "-C", "1", "-F", "%t %p %r %P",
                  "-W", "10")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{base}/state on 1 site:lyon"
    # cleared by an empty retained payload
    assert mosquitto("mosquitto_pub", server, "-t", f"{base}/state", "-n", "-r", "-q", "1").returncode == 0
    r = mosquitto("mosquitto_sub", server, "-t", f"{base}/+", "-C", "1", "-W", "2")
    assert r.returncode == 27 and r.stdout == ""  # timed out: nothing retained any more


@needs_mosquitto
def test_mosquitto_sub_will(server: LogbusServer) -> None:
    base = unique("mwill")
    watcher = Paho(server, unique("w"))
    watcher.subscribe(f"{base}/#", 1)
    sub = sub_process(server, "-t", f"{base}/none", "--will-topic", f"{base}/gone", "--will-payload", "bye",
                      "--will-qos", "1", "-k", "60")
    try:
        time.sleep(1.0)
        sub.kill()  # SIGKILL: no DISCONNECT, the will is published
        sub.communicate()
        m = watcher.next_message()
        assert (m.topic, m.payload) == (f"{base}/gone", b"bye")
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.communicate()
        watcher.close()
