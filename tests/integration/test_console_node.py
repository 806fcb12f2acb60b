"""The node (issue 49): ``GET /api/nodes`` (RabbitMQ's list of nodes, one here) and the
console's Node page against a real ``logbus serve``, their figures checked against what
the test knows without asking the broker: the pid and listeners of the ready file, the
limits given on the command line, the process's descriptors, resident memory and limits
under /proc, the data directory's free space, the state store's files and the log's
record batches read from disk, the Python that runs it. Who may look: ``monitoring``,
as RabbitMQ asks for /api/nodes; ``management`` alone is refused."""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from logbus.compiled import decide
from tests.integration.certs import self_signed
from tests.integration.html_tables import html_rows
from tests.integration.console_forms import until
from tests.integration.mgmt import Mgmt
from tests.serverproc import LogbusServer, logbus_env, module_server

DISK_FREE_LIMIT = 1_234_567
MEMORY_LIMIT = 8 << 30  # bytes (a watermark above 1 is a byte count)
MIB = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    cert, key = self_signed(tmp_path_factory.mktemp("node-certs"))
    mqtt = f"tcp:0:interface=127.0.0.1 ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}"
    for server in module_server(tmp_path_factory, "console-node", listeners={"mqtt": mqtt, "kafka": "off"},
                                args=["--disk-free-limit", str(DISK_FREE_LIMIT),
                                      "--memory-high-watermark", str(MEMORY_LIMIT)]):
        m = Mgmt(server)
        m.add_user("node-watcher", "watch-pw", "monitoring")
        m.add_user("node-manager", "manage-pw", "management")
        yield server


def node(server: LogbusServer, auth: tuple[str, str] = ("guest", "guest")) -> dict[str, Any]:
    nodes = Mgmt(server, auth).ok("GET", "/api/nodes").json()
    assert len(nodes) == 1, nodes
    found: dict[str, Any] = nodes[0]
    return found


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def resident(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def open_files_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])  # the soft limit
    raise AssertionError("no Max open files")


def files_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def record_batch_bytes(log_dir: Path) -> int:
    """The bytes of the record batches in every segment file: each batch is its 8-byte base
    offset, a 4-byte big-endian length and that many bytes (Kafka's RecordBatch v2); the
    zeroed space written ahead of the last one has length 0."""
    total = 0
    for segment in log_dir.rglob("*.log"):
        data = segment.read_bytes()
        at = 0
        while at + 12 <= len(data):
            length = int.from_bytes(data[at + 8:at + 12], "big")
            if length == 0:
                break
            at += 12 + length
        total += at
    return total


def test_the_node_is_this_process_with_its_listeners_limits_and_python(server: LogbusServer) -> None:
    before_ms = time.time() * 1000
    n = node(server)
    after_ms = time.time() * 1000
    assert n["os_pid"] == str(server.pid) and n["running"] is True
    assert n["name"] == Mgmt(server).ok("GET", "/api/overview").json()["node"]
    assert before_ms - n["started_ms"] - 1 <= n["uptime"] <= after_ms - n["started_ms"] + 1
    # the listeners, as the ready file has them: the second MQTT endpoint is the TLS one
    listeners = {x["name"]: x for x in n["listeners"]}
    assert {name: x["address"] for name, x in listeners.items()} == server.addresses
    assert {name: (x["ip_address"], x["port"]) for name, x in listeners.items()} == {
        name: server.host_port(name) for name in server.addresses}
    assert {name: x["tls"] for name, x in listeners.items()} == {"amqp": False, "mqtt": False, "mqtt.2": True,
                                                                 "http": False}
    assert {x["protocol"] for x in n["listeners"]} == {"amqp", "mqtt", "http"}
    for x in n["listeners"]:
        assert x["listening"] is True and x["problem"] is None, x
        assert n["started_ms"] <= x["started_ms"] <= after_ms and x["uptime"] <= n["uptime"]
    # the limits of the command line; no alarm under them
    assert (n["mem_limit"], n["memory_high_watermark"]) == (MEMORY_LIMIT, MEMORY_LIMIT)
    assert n["disk_free_limit"] == DISK_FREE_LIMIT
    assert (n["mem_alarm"], n["disk_free_alarm"], n["resource_alarms"], n["health"]) == (False, False, [], [])
    assert n["fd_total"] == open_files_limit(server.pid)
    assert n["data_dir"] == str(server.data_dir.resolve()) or n["data_dir"] == str(server.data_dir)
    # the Python that runs it: the tests start the server with their own interpreter
    assert (n["interpreter"], n["python_version"]) == (sys.executable, platform.python_version())
    assert n["python_implementation"] == platform.python_implementation()
    assert (n["compiled"], n["build"]) == decide(environ=logbus_env())[:2]


def test_memory_descriptors_and_disk_free_are_the_processs_own(server: LogbusServer) -> None:
    mgmt = Mgmt(server)
    pid = server.pid
    fds, rss = descriptors(pid), resident(pid)
    n = node(server)
    fds2, rss2 = descriptors(pid), resident(pid)
    # the broker's count includes the directory it lists /proc/self/fd with, and this
    # request's connection, open while it counts
    assert min(fds, fds2) <= n["fd_used"] <= max(fds, fds2) + 2
    assert min(rss, rss2) - 4 * MIB <= n["mem_used"] <= max(rss, rss2) + 4 * MIB
    st = os.statvfs(server.data_dir)
    free = st.f_bavail * st.f_frsize
    assert abs(n["disk_free"] - free) <= max(64 * MIB, free // 100)  # other processes write meanwhile
    assert mgmt.ok("GET", "/api/limits").json()["memory_limit_bytes"] == n["mem_limit"]


def test_the_state_store_and_the_log_are_counted_on_disk(server: LogbusServer) -> None:
    mgmt = Mgmt(server)
    mgmt.ok("POST", "/api/topics", {"name": "node-sized", "config": {"partitions": 2}})
    for i in range(3):
        mgmt.ok("POST", "/api/topics/node-sized/messages",
                {"messages": [{"key": f"k{i}-{j}", "value": "x" * 1000} for j in range(10)]})
    log_dir = server.data_dir / "log"
    n = node(server)
    assert n["log_dir"] == str(log_dir) or Path(n["log_dir"]).resolve() == log_dir.resolve()
    assert n["log_bytes"] == record_batch_bytes(log_dir) >= 30 * 1000
    topics = mgmt.ok("GET", "/api/topics").json()
    assert n["log_bytes"] == sum(p["size_bytes"] for t in topics for p in t["partition_detail"])
    # the state store's files, as the broker measured them (at most 5 s ago): the same
    # once a measurement is made while nothing writes
    state = Path(n["db_dir"])
    assert state.resolve() == (server.data_dir / "state").resolve()

    def measured() -> tuple[int, int, int]:
        return files_bytes(state), node(server)["state_store_bytes"], files_bytes(state)
    sizes = until(measured, lambda s: s[0] == s[1] == s[2], "the state store's size, measured while idle")
    assert sizes[1] > 0


def test_alarms_in_force_are_shown_with_their_thresholds(server: LogbusServer) -> None:
    mgmt = Mgmt(server)
    huge = 1 << 62
    try:
        mgmt.ok("PUT", "/api/limits", {"disk_free_limit": huge, "memory_high_watermark": 2})
        n = node(server)
        assert (n["mem_alarm"], n["disk_free_alarm"]) == (True, True)
        alarms = {a["resource"]: a for a in n["resource_alarms"]}
        assert alarms.keys() == {"memory", "disk"}
        assert alarms["memory"]["limit"] == 2 and alarms["memory"]["value"] > 2
        assert alarms["disk"]["limit"] == huge and alarms["disk"]["value"] < huge
        assert any(r.startswith("disk alarm:") for r in n["health"])
        page = mgmt.call("GET", "/node").body.decode()
        rows = {r["Resource"]: r for r in html_rows(page, "Resources")}
        assert rows["Memory used (resident)"]["Alarm"] == "set"
        assert rows["Memory used (resident)"]["Limit"] == "2 B (set in bytes)"
        assert rows["Disk free (the data directory's filesystem)"]["Alarm"] == "set"
        assert "below the limit of 4194304.0 TiB" in page and "above the limit of 2 B" in page
    finally:
        mgmt.ok("PUT", "/api/limits", {"disk_free_limit": DISK_FREE_LIMIT, "memory_high_watermark": MEMORY_LIMIT})
    n = node(server)
    assert (n["mem_alarm"], n["disk_free_alarm"], n["resource_alarms"]) == (False, False, [])


def test_the_page_shows_the_node_in_a_readers_units(server: LogbusServer) -> None:
    n = node(server)
    page = Mgmt(server, ("node-watcher", "watch-pw")).call("GET", "/node")
    assert page.status == 200 and "<h1>Node</h1>" in page.body.decode()
    text = page.body.decode()
    assert f"<dt>Process id</dt><dd>{server.pid}</dd>" in text
    assert f"{platform.python_implementation()} {platform.python_version()}" in text
    rows = {r["Resource"]: r for r in html_rows(text, "Resources")}
    assert rows["Disk free (the data directory's filesystem)"]["Limit"] == "1.2 MiB"  # 1,234,567 bytes
    assert rows["Memory used (resident)"]["Limit"] == "8.0 GiB (set in bytes)"
    assert rows["File descriptors used"]["Limit"] == str(n["fd_total"])
    listeners = {r["Listener"]: r for r in html_rows(text, "Listeners")}
    assert {k: r["Address"] for k, r in listeners.items()} == server.addresses
    assert {k: r["TLS"] for k, r in listeners.items()} == {"amqp": "no", "mqtt": "no", "mqtt.2": "yes", "http": "no"}
    assert {r["Problem"] for r in listeners.values()} == {"none"}
    sizes = {r["What"]: r["Size"] for r in html_rows(text, "Bytes on disk")}
    assert sizes.keys() == {"State store (RocksDB)", "Log (every topic)"}
    assert all(s.endswith(("B", "KiB", "MiB", "GiB")) for s in sizes.values())


def test_a_monitoring_user_sees_the_node_and_a_management_user_is_refused(server: LogbusServer) -> None:
    watcher, manager = ("node-watcher", "watch-pw"), ("node-manager", "manage-pw")
    name = node(server, watcher)["name"]
    assert Mgmt(server, watcher).ok("GET", f"/api/nodes/{name}").json()["os_pid"] == str(server.pid)
    missing = Mgmt(server, watcher).call("GET", "/api/nodes/rabbit@elsewhere")
    assert missing.status == 404 and missing.json()["error"] == "not_found"
    refused = Mgmt(server, manager)
    for path in ("/api/nodes", f"/api/nodes/{name}"):
        reply = refused.call("GET", path)
        assert reply.status == 403 and "Not monitor user" in reply.json()["message"], reply
    assert refused.call("GET", "/node").status == 403
    assert 'href="/node"' not in refused.call("GET", "/").body.decode()  # nor is it in the menu
    assert 'href="/node"' in Mgmt(server, watcher).call("GET", "/").body.decode()
    assert Mgmt(server, auth=None).call("GET", "/api/nodes").status == 401
