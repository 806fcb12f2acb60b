"""`logbus serve` as a process: health, metrics, clean stop, restart, the data-dir lock."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from typing import Any

import pytest

from tests.serverproc import ADMIN_AUTH, LOOPBACK_ANY_PORT, run_logbus


def get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(urllib.request.Request(url, headers=ADMIN_AUTH), timeout=10) as response:
        return response.status, response.headers["Content-Type"], response.read()


def post_json(url: str, body: Any) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", **ADMIN_AUTH},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def topic_names(base_url: str) -> list[str]:
    _, _, body = get(base_url + "/api/topics")
    return [t["name"] for t in json.loads(body)]


def test_healthz(logbus_server: Any) -> None:
    server = logbus_server()
    status, content_type, body = get(server.http_url + "/healthz")
    assert status == 200
    assert content_type == "application/json"
    assert json.loads(body) == {"status": "ok"}
    assert server.ports["http"] > 0
    assert server.pid > 0


def test_metrics(logbus_server: Any) -> None:
    server = logbus_server()
    status, content_type, body = get(server.http_url + "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    text = body.decode()
    assert "# TYPE logbus_" in text
    assert "logbus_topics 0.0" in text
    # the families the operator watches: append rate and bytes per topic, flush latency,
    # partitions
    assert post_json(server.http_url + "/api/topics", {"name": "m", "partitions": 3}) == 201
    text = get(server.http_url + "/metrics")[2].decode()
    for line in (
        "logbus_topics 1.0",
        "logbus_partitions 3.0",
        'logbus_records_appended_total{topic="m"} 0.0',
        'logbus_bytes_appended_total{topic="m"} 0.0',
        "# TYPE logbus_flush_seconds histogram",
        "# TYPE logbus_open_files gauge",
    ):
        assert line in text, line


def test_listeners_can_be_off(logbus_server: Any) -> None:
    server = logbus_server(listeners={name: "off" for name in ("amqp", "mqtt", "kafka")})
    assert set(server.ports) == {"http"}
    assert get(server.http_url + "/healthz")[0] == 200


def test_sigterm_exits_0_and_restart_keeps_topics(logbus_server: Any) -> None:
    server = logbus_server()
    assert post_json(server.http_url + "/api/topics", {"name": "kept", "partitions": 2}) == 201
    assert server.stop() == 0
    assert "Traceback" not in server.log_text()
    assert not server.ready_file.exists()  # removed on a clean stop

    server.restart()
    assert topic_names(server.http_url) == ["kept"]
    _, _, body = get(server.http_url + "/api/topics/kept")
    assert json.loads(body)["partitions"] == 2
    assert server.stop() == 0


def test_sigint_exits_0(logbus_server: Any) -> None:
    server = logbus_server()
    assert server.proc is not None
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(30) == 0
    assert "logbus stopped" in server.log_text()


@pytest.mark.parametrize("gap", [0.0, 0.005, 0.02, 0.05])
def test_second_sigterm_is_harmless(logbus_server: Any, gap: float) -> None:
    """A second SIGTERM, during or just after the shutdown the first one started, still
    ends in a clean stop with exit code 0 (not 'killed by SIGTERM')."""
    server = logbus_server()
    assert post_json(server.http_url + "/api/topics", {"name": "t", "partitions": 20}) == 201
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(gap)
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(30) == 0
    text = server.log_text()
    assert "Traceback" not in text and "logbus stopped" in text
    assert (server.data_dir / "log" / ".clean_shutdown").exists()


def test_restart_after_kill_keeps_topics(logbus_server: Any) -> None:
    server = logbus_server()
    assert post_json(server.http_url + "/api/topics", {"name": "survivor"}) == 201
    server.kill()
    server.restart(same_ports=True)
    assert topic_names(server.http_url) == ["survivor"]


def test_second_server_on_same_data_dir_refuses(logbus_server: Any) -> None:
    first = logbus_server()
    args = ["serve", "--data-dir", str(first.data_dir)]
    for name in ("amqp", "mqtt", "kafka", "http"):
        args += [f"--{name}", LOOPBACK_ANY_PORT]
    second = run_logbus(*args, timeout=60)
    assert second.returncode != 0
    assert "lock" in second.stderr.lower()
    assert "Traceback" not in second.stderr
    errors = [line for line in second.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, second.stderr
    # The first one is untouched and still serving.
    assert first.running()
    assert get(first.http_url + "/healthz")[0] == 200
    assert first.stop() == 0


def test_busy_port_fails_with_one_line(logbus_server: Any) -> None:
    first = logbus_server()
    busy = f"tcp:{first.ports['http']}:interface=127.0.0.1"
    other = first.workdir.parent / "other-data"
    result = run_logbus("serve", "--data-dir", str(other), "--http", busy, "--amqp", "off",
                        "--mqtt", "off", "--kafka", "off")
    assert result.returncode == 1
    assert "cannot listen for http" in result.stderr
    assert "Traceback" not in result.stderr


def test_config_error_exits_2(tmp_path: Any) -> None:
    result = run_logbus("serve", "--data-dir", str(tmp_path / "d"), "--http", "tcp:nope")
    assert result.returncode == 2
    assert result.stderr.startswith("logbus: config error: http: ")
    assert "command-line flag --http" in result.stderr
