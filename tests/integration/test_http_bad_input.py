"""Bad input to the HTTP API is a 4xx with a JSON error, never a 500: names in the path
(percent-encoded bytes that are no UTF-8, such as a lone surrogate), JSON bodies (lone
surrogates in keys and values, NaN and Infinity, nesting deeper than the parser goes,
values of the wrong type) and query parameters, on every endpoint that takes them.

Each case is sent to one real ``logbus serve``; after each, the server must log no
traceback and still answer. ``/healthz`` is not among them (its answer is another part's).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.integration.mgmt import Mgmt
from tests.serverproc import LogbusServer, module_server

SUR = "\ud800"  # a lone surrogate: json.dumps writes it as the escape \ud800


def J(body: object) -> bytes:
    return json.dumps(body).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    for s in module_server(tmp_path_factory, "http-bad"):
        mgmt = Mgmt(s)
        assert mgmt.call("POST", "/api/topics", {"name": "t", "partitions": 1}).status == 201
        yield s


MESSAGES = "/api/topics/t/messages"
RECEIVE = "/api/pop/g/t/receive"
CASES: list[tuple[str, str, bytes | None]] = [
    # names in the path
    ("GET", "/api/topics/%ED%A0%80", None),
    ("PUT", "/api/topics/%ED%A0%80", J({"config": {}})),
    ("DELETE", "/api/topics/%ED%A0%80", None),
    ("POST", "/api/topics/%ED%A0%80/messages", J({"messages": [{"value": "a"}]})),
    ("POST", "/api/pop/%ED%A0%80/t/receive", J({})),
    ("POST", "/api/pop/g/%ED%A0%80/receive", J({})),
    ("POST", "/api/pop/%ED%A0%80/dlq/replay", J({})),
    ("POST", "/api/pop/%FF/t/ack", J({"handle": "x"})),
    ("GET", "/api/users/%ED%A0%80", None),
    ("PUT", "/api/vhosts/%ED%A0%80", None),
    ("GET", "/api/permissions/%ED%A0%80/guest", None),
    ("PUT", "/api/topic-permissions/%2F/%ED%A0%80", J({"exchange": "x", "write": ".*", "read": ".*"})),
    ("DELETE", "/api/mqtt/clients/%ED%A0%80", None),
    ("DELETE", "/api/mqtt/sessions/%ED%A0%80", None),
    ("DELETE", "/api/connections/%ED%A0%80", None),
    # lone surrogates in JSON bodies
    ("POST", "/api/topics", J({"name": SUR})),
    ("POST", "/api/topics", J({"name": "a" + SUR, "partitions": 1})),
    ("POST", "/api/topics", J({"name": "x1", "config": {SUR: 1}})),
    ("PUT", "/api/topics/t", J({"config": {"retention.ms": SUR}})),
    ("POST", MESSAGES, J({"messages": [{"value": SUR}]})),
    ("POST", MESSAGES, J({"messages": [{"key": SUR}]})),
    ("POST", MESSAGES, J({"messages": [{"headers": {SUR: "v"}}]})),
    ("POST", MESSAGES, J({"messages": [{"headers": {"h": SUR}}]})),
    ("POST", MESSAGES, J({"messages": [{"value": "a", "tag": SUR}]})),
    ("POST", RECEIVE, J({"member": SUR})),
    ("POST", RECEIVE, J({"filter_tag": SUR})),
    ("POST", RECEIVE, J({"filter_sql": f"a = '{SUR}'"})),
    ("POST", "/api/pop/g/t/ack", J({"handle": SUR})),
    ("POST", "/api/pop/g/dlq/replay", J({"topic": SUR})),
    ("PUT", "/api/users/u1", J({"password": SUR})),
    ("PUT", "/api/users/u2", J({"tags": SUR})),
    ("PUT", "/api/vhosts/v1", J({"description": SUR})),
    ("PUT", "/api/permissions/%2F/guest", J({"configure": SUR, "write": ".*", "read": ".*"})),
    ("PUT", "/api/topic-permissions/%2F/guest", J({"exchange": SUR, "write": ".*", "read": ".*"})),
    ("PUT", "/api/limits", J({"memory_high_watermark": SUR})),
    # not JSON, or JSON Python reads but no other parser must: NaN, Infinity, deep nesting
    ("POST", "/api/topics", b'{"name": "x7", "config": {"retention.ms": Infinity}}'),
    ("POST", "/api/topics", b'{"name": "x8", "config": {"retention.ms": NaN}}'),
    ("PUT", "/api/limits", b'{"memory_high_watermark": -Infinity}'),
    ("POST", "/api/topics", b"[" * 100_000 + b"]" * 100_000),
    ("POST", MESSAGES, b'{"messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"),
    ("POST", "/api/topics", b"\xff\xfe{}"),
    # values of the wrong type
    ("PUT", "/api/users/u3", J({"tags": 5})),
    ("PUT", "/api/users/u4", J({"tags": {"a": 1}})),
    ("POST", "/api/topics", J({"name": "x9", "partitions": 10**30})),
    ("POST", MESSAGES, J({"messages": [{"value": "a"}], "partition": 10**30})),
    ("POST", RECEIVE, J({"max": "x"})),
    ("POST", RECEIVE, J({"wait_ms": 10**30})),
    ("POST", "/api/pop/g/t/invisible", J({"handle": 5, "invisible_ms": 5})),
    ("PUT", "/api/limits", J({"disk_free_limit": 10**40})),
    # query parameters
    ("GET", "/api/connections?protocol=%ED%A0%80", None),
    ("GET", "/api/connections?protocol=%FF", None),
]


@pytest.mark.parametrize("method, path, body", CASES, ids=[f"{m} {p} {(b or b'')[:40]!r}" for m, p, b in CASES])
def test_bad_input_is_4xx_with_a_json_error(server: LogbusServer, method: str, path: str, body: bytes | None) -> None:
    tracebacks = server.log_text().count("Traceback")
    reply = Mgmt(server).call(method, path, raw=body)
    assert 400 <= reply.status < 500, reply
    payload = reply.json()
    assert isinstance(payload["error"], str) and isinstance(payload["message"], str), payload
    assert server.log_text().count("Traceback") == tracebacks, server.log_tail(3000)
    assert Mgmt(server).call("GET", "/api/topics/t").status == 200  # still serving
