"""HTTP requests are not INFO lines: at the default level the log of a server polled by
curl (health checks, the API) says nothing per request, as RabbitMQ's and Mosquitto's
logs do not; at debug each request has its access line and its connection's lines."""

from __future__ import annotations

import subprocess
import time
from typing import Any

REQUESTS = 5
WAIT = 15


def _curl(server: Any, path: str, *auth: str) -> None:
    status = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", *auth, server.http_url + path],
                            capture_output=True, text=True, check=True, timeout=30).stdout
    assert status == "200"


def _poll(server: Any) -> None:
    for _ in range(REQUESTS):
        _curl(server, "/healthz")
        _curl(server, "/api/topics", "-u", "guest:guest")


def _lines_after(server: Any, mark: str, pattern: str, count: int) -> list[str]:
    """The log lines after the one holding ``mark`` that contain ``pattern``, once there
    are ``count`` of them (or the deadline passed)."""
    deadline = time.monotonic() + WAIT
    while True:
        text = server.log_text()
        lines = [line for line in text[text.index(mark):].splitlines() if pattern in line]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_http_requests_log_no_info_line_at_the_default_level(logbus_server: Any) -> None:
    server = logbus_server(listeners={"amqp": "off", "mqtt": "off", "kafka": "off"})
    mark = "logbus ready"
    _poll(server)
    server.stop()  # every connection's close has been handled
    text = server.log_text()
    after = text[text.index(mark):].splitlines()[1:]
    assert not [line for line in after if " INFO " in line and "stopp" not in line and "SIGTERM" not in line], \
        server.log_tail()
    assert "user None" not in text


def test_http_requests_are_logged_at_debug(logbus_server: Any) -> None:
    server = logbus_server(listeners={"amqp": "off", "mqtt": "off", "kafka": "off"}, args=["--log-level", "debug"])
    _poll(server)
    access = _lines_after(server, "logbus ready", "logbus.http.access", 2 * REQUESTS)
    assert len(access) == 2 * REQUESTS and all(" DEBUG " in line for line in access), server.log_tail()
    assert any('"GET /healthz HTTP/1.1" 200' in line for line in access)
    closed = _lines_after(server, "logbus ready", "closed (", 2 * REQUESTS)
    assert closed and all(" DEBUG " in line for line in closed), server.log_tail()
    assert "user None" not in server.log_text()
