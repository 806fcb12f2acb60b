"""SIGHUP reloads the settings that can change at run time (as Mosquitto reloads its
configuration file), says in the log which changed and which need a restart, and never
stops the broker; an invalid file is logged and changes nothing."""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.request
from pathlib import Path

from tests.serverproc import ADMIN_AUTH, ServerFactory

WAIT = 20.0


def wait_for_log(server: object, text: str, start: int) -> str:
    """The log from ``start`` once ``text`` is in it (polled until a deadline)."""
    deadline = time.monotonic() + WAIT
    while True:
        log = server.log_text()[start:]  # type: ignore[attr-defined]
        if text in log:
            return log
        assert server.running(), f"the broker died:\n{log}"  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, f"{text!r} not logged:\n{log}"
        time.sleep(0.05)


def limits(server: object) -> dict[str, object]:
    request = urllib.request.Request(server.http_url + "/api/limits", headers=ADMIN_AUTH)  # type: ignore[attr-defined]
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def silent_close_seconds(server: object, listener: str) -> float:
    started = time.monotonic()
    with socket.create_connection(server.host_port(listener), timeout=30) as s:  # type: ignore[attr-defined]
        assert s.recv(1) == b""
    return time.monotonic() - started


def test_sighup_reloads_what_it_can_and_keeps_serving(tmp_path: Path) -> None:
    config = tmp_path / "logbus.toml"
    config.write_text('log_level = "info"\nhandshake_timeout_ms = 1000\ndisk_free_limit = 1000\n'
                      "default_partitions = 1\n")
    factory = ServerFactory(tmp_path)
    try:
        server = factory.start(args=["--config", str(config)])
        assert silent_close_seconds(server, "amqp") < 3.0
        config.write_text('log_level = "debug"\nhandshake_timeout_ms = 2500\ndisk_free_limit = 2000\n'
                          "default_partitions = 4\n")
        mark = len(server.log_text())
        server.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        log = wait_for_log(server, "SIGHUP: settings reloaded", mark)
        line = next(ln for ln in log.splitlines() if "SIGHUP: settings reloaded" in ln)
        assert "log_level ('info' -> 'debug')" in line
        assert "handshake_timeout_ms (1000 -> 2500)" in line
        assert "disk_free_limit (1000 -> 2000)" in line
        assert "after a restart: default_partitions (1 -> 4)" in line
        assert server.running() and server.ready_file.exists()
        assert limits(server)["disk_free_limit"] == 2000
        assert 2.4 < silent_close_seconds(server, "amqp") < 5.0  # the new handshake timeout
        with urllib.request.urlopen(server.http_url + "/healthz", timeout=10) as r:
            assert r.status == 200
        # debug logging is on now: the access log of that request is written
        wait_for_log(server, "logbus.http.access", mark)

        config.write_text("handshake_timeout_ms = 'soon'\n")
        mark = len(server.log_text())
        server.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        log = wait_for_log(server, "SIGHUP: settings not reloaded", mark)
        assert "handshake_timeout_ms" in log
        assert server.running()
        assert limits(server)["disk_free_limit"] == 2000
        assert server.stop() == 0
        assert "Traceback" not in server.log_text()
    finally:
        factory.cleanup()


def test_sighup_without_a_config_file_changes_nothing(tmp_path: Path) -> None:
    factory = ServerFactory(tmp_path)
    try:
        server = factory.start()
        mark = len(server.log_text())
        server.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        wait_for_log(server, "SIGHUP: settings reloaded, nothing changed", mark)
        assert server.running() and server.ready_file.exists()
        assert server.stop() == 0
    finally:
        factory.cleanup()
