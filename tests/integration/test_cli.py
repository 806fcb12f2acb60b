"""`logbus topic ...` against a real server."""

from __future__ import annotations

import json
import re
import socket
from typing import Any, Iterator

import pytest

from tests.serverproc import LogbusServer, module_server, run_logbus


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "cli")


def topic(server: LogbusServer, *args: str) -> Any:
    return run_logbus("topic", *args, "--server", server.http_url)


def test_create_list_describe_delete(server: LogbusServer) -> None:
    created = topic(server, "create", "payments", "--partitions", "3",
                    "--config", "flush=interval:50", "retention.ms=3600000")
    assert created.returncode == 0, created.stderr
    assert created.stdout == "created topic payments (3 partitions)\n"

    listed = topic(server, "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["NAME", "PARTITIONS", "FLUSH", "RETENTION", "RECORDS", "SIZE"]
    row = next(line for line in lines[1:] if line.startswith("payments "))
    assert row.split()[:4] == ["payments", "3", "interval:50", "1h"]
    # Columns are aligned: every row starts its second column at the same place.
    col = lines[0].index("PARTITIONS")
    assert all(line[col - 2 : col] == "  " for line in lines[1:])

    described = topic(server, "describe", "payments")
    assert described.returncode == 0, described.stderr
    out = described.stdout
    assert out.splitlines()[0].split() == ["topic", "payments"]
    assert re.search(r"^  flush +interval:50$", out, re.M), out
    assert re.search(r"^  retention\.ms +3600000$", out, re.M), out
    assert [line.split()[0] for line in out.splitlines() if line[:1].isdigit()] == ["0", "1", "2"]

    as_json = topic(server, "describe", "payments", "--json")
    assert json.loads(as_json.stdout)["partitions"] == 3

    deleted = topic(server, "delete", "payments")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == "deleted topic payments\n"
    assert "payments" not in [t["name"] for t in json.loads(topic(server, "list", "--json").stdout)]


def test_server_from_environment(server: LogbusServer) -> None:
    result = run_logbus("topic", "list", env={"LOGBUS_SERVER": server.http_url})
    assert result.returncode == 0, result.stderr


def test_unknown_topic(server: LogbusServer) -> None:
    for command in ("describe", "delete"):
        result = topic(server, command, "no-such-topic")
        assert result.returncode == 1
        assert result.stdout == ""
        assert result.stderr == "logbus: unknown topic 'no-such-topic'\n"


def test_create_twice_and_invalid(server: LogbusServer) -> None:
    assert topic(server, "create", "dup").returncode == 0
    again = topic(server, "create", "dup")
    assert again.returncode == 1
    assert again.stderr.count("\n") == 1 and "already exists" in again.stderr
    bad = topic(server, "create", "bad", "--config", "flush=sometimes")
    assert bad.returncode == 1
    assert bad.stderr.startswith("logbus: flush must be")


def test_alter(server: LogbusServer) -> None:
    assert topic(server, "create", "tunable", "--config", "flush=none").returncode == 0
    altered = topic(server, "alter", "tunable", "--config", "retention.ms=3600000", "segment.ms=60000")
    assert altered.returncode == 0, altered.stderr
    assert altered.stdout == "altered topic tunable: retention.ms=3600000 segment.ms=60000\n"
    config = json.loads(topic(server, "describe", "tunable", "--json").stdout)["config"]
    assert config["retention.ms"] == 3600000 and config["segment.ms"] == 60000 and config["flush"] == "none"
    bad = topic(server, "alter", "tunable", "--config", "retention.ms=soon")
    assert bad.returncode == 1
    assert bad.stderr == "logbus: retention.ms must be an integer, not 'soon'\n"
    missing = topic(server, "alter", "no-such-topic", "--config", "retention.ms=1000")
    assert missing.returncode == 1 and missing.stderr == "logbus: unknown topic 'no-such-topic'\n"
    usage = topic(server, "alter", "tunable")
    assert usage.returncode == 2 and "--config" in usage.stderr


def test_bad_config_argument_is_a_usage_error(server: LogbusServer) -> None:
    result = topic(server, "create", "x", "--config", "novalue")
    assert result.returncode == 2
    assert "expected KEY=VALUE" in result.stderr


def test_unreachable_server() -> None:
    with socket.socket() as sock:  # a port nobody listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        result = run_logbus("topic", "list", "--server", url)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"logbus: cannot reach logbus at {url}: ")
    assert result.stderr.count("\n") == 1
