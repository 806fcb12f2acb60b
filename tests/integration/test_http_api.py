"""The HTTP admin API against a real `logbus serve`: topics, errors, limits."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any, Iterator
from urllib.parse import quote

import pytest

from tests.integration.mgmt import Mgmt, Reply
from tests.serverproc import LogbusServer, module_server

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "http-api", args=["--default-partitions", "2"])


def call(
    server: LogbusServer,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    return Mgmt(server).call(method, path, body, raw=raw, headers=headers)


def assert_error(reply: Reply, status: int, code: str) -> str:
    assert reply.status == status, reply.body
    payload = reply.json()
    assert payload["error"] == code
    assert isinstance(payload["message"], str) and payload["message"]
    return payload["message"]


def test_create_list_describe_delete(server: LogbusServer) -> None:
    created = call(server, "POST", "/api/topics",
                   {"name": "orders", "partitions": 3, "config": {"flush": "none"}})
    assert created.status == 201
    info = created.json()
    assert info["name"] == "orders"
    assert info["partitions"] == 3
    assert info["config"]["flush"] == "none"
    assert [p["partition"] for p in info["partition_detail"]] == [0, 1, 2]
    assert created.headers["Location"] == "/api/topics/orders"

    listed = call(server, "GET", "/api/topics")
    assert listed.status == 200
    assert "orders" in [t["name"] for t in listed.json()]

    described = call(server, "GET", "/api/topics/orders")
    assert described.status == 200
    assert described.json() == info

    deleted = call(server, "DELETE", "/api/topics/orders")
    assert deleted.status == 204
    assert deleted.body == b""
    assert_error(call(server, "GET", "/api/topics/orders"), 404, "unknown_topic")
    assert "orders" not in [t["name"] for t in call(server, "GET", "/api/topics").json()]


def test_server_defaults_apply(server: LogbusServer) -> None:
    info = call(server, "POST", "/api/topics", {"name": "defaulted"}).json()
    assert info["partitions"] == 2  # --default-partitions 2
    assert info["config"]["flush"] == "sync"


def test_partitions_inside_config(server: LogbusServer) -> None:
    reply = call(server, "POST", "/api/topics", {"name": "in-config", "config": {"partitions": 4}})
    assert reply.status == 201
    assert reply.json()["partitions"] == 4


def test_url_encoded_names(server: LogbusServer) -> None:
    name = "sensors.temp #1 ünï"
    assert call(server, "POST", "/api/topics", {"name": name}).status == 201
    path = "/api/topics/" + quote(name, safe="")
    assert call(server, "GET", path).json()["name"] == name
    assert call(server, "DELETE", path).status == 204


def test_trailing_slashes(server: LogbusServer) -> None:
    call(server, "POST", "/api/topics/", {"name": "slashed"})
    assert call(server, "GET", "/api/topics/").status == 200
    assert call(server, "GET", "/api/topics/slashed/").status == 200
    assert_error(call(server, "GET", "/api/topics/slashed/extra"), 404, "not_found")


def test_create_existing_is_409(server: LogbusServer) -> None:
    assert call(server, "POST", "/api/topics", {"name": "twice"}).status == 201
    assert_error(call(server, "POST", "/api/topics", {"name": "twice"}), 409, "topic_exists")


@pytest.mark.parametrize(
    "body, code",
    [
        ({"name": "a/b"}, "invalid_topic_name"),
        ({"name": ".."}, "invalid_topic_name"),
        ({"name": ""}, "invalid_topic_name"),
        ({"name": 5}, "invalid_topic_name"),
        ({"name": "x1", "partitions": 0}, "invalid_config"),
        ({"name": "x2", "partitions": "3"}, "invalid_config"),
        ({"name": "x3", "partitions": True}, "invalid_config"),
        ({"name": "x4", "config": {"flush": "sometimes"}}, "invalid_config"),
        ({"name": "x5", "config": {"no.such.key": 1}}, "invalid_config"),
        ({"name": "x6", "config": ["flush"]}, "invalid_config"),
        ({"name": "x7", "partitions": 2, "config": {"partitions": 3}}, "invalid_config"),
        ({"name": "x8", "colour": "blue"}, "bad_request"),
        ({"partitions": 1}, "bad_request"),
        (["orders"], "bad_request"),
    ],
)
def test_invalid_create_is_400(server: LogbusServer, body: Any, code: str) -> None:
    assert_error(call(server, "POST", "/api/topics", body), 400, code)


def test_alter_topic_config(server: LogbusServer) -> None:
    call(server, "POST", "/api/topics", {"name": "altered", "config": {"flush": "none", "retention.ms": 60000}})
    reply = call(server, "PUT", "/api/topics/altered", {"config": {"retention.ms": "3600000", "segment.ms": 5000}})
    assert reply.status == 200, reply.body
    info = reply.json()
    assert info["name"] == "altered"
    assert info["config"]["retention.ms"] == 3600000 and info["config"]["segment.ms"] == 5000
    assert info["config"]["flush"] == "none"  # settings not named are kept
    assert call(server, "GET", "/api/topics/altered").json() == info
    # null: back to the broker's default
    reset = call(server, "PUT", "/api/topics/altered", {"config": {"flush": None}}).json()
    assert reset["config"]["flush"] == "sync"


@pytest.mark.parametrize(
    "body, code",
    [
        ({"config": {"retention.ms": "soon"}}, "invalid_config"),
        ({"config": {"no.such.key": 1}}, "invalid_config"),
        ({"config": {"partitions": 5}}, "invalid_config"),
        ({"config": ["flush"]}, "invalid_config"),
        ({"name": "other"}, "bad_request"),
        ({}, "bad_request"),
    ],
)
def test_invalid_alter_is_400(server: LogbusServer, body: Any, code: str) -> None:
    call(server, "POST", "/api/topics", {"name": "unaltered", "config": {"retention.ms": 60000}})
    assert_error(call(server, "PUT", "/api/topics/unaltered", body), 400, code)
    assert call(server, "GET", "/api/topics/unaltered").json()["config"]["retention.ms"] == 60000


def test_alter_unknown_topic_is_404(server: LogbusServer) -> None:
    assert_error(call(server, "PUT", "/api/topics/nope", {"config": {"retention.ms": 1000}}), 404, "unknown_topic")


@pytest.mark.parametrize("raw", [b"{bad", b"", b"\xff\xfe", b'{"name": "t"'])
def test_bad_json_is_400(server: LogbusServer, raw: bytes) -> None:
    headers = {"Content-Type": "application/json"}
    reply = call(server, "POST", "/api/topics", raw=raw, headers=headers)
    assert_error(reply, 400, "bad_json")


def test_unknown_topic_is_404(server: LogbusServer) -> None:
    assert_error(call(server, "GET", "/api/topics/nope"), 404, "unknown_topic")
    assert_error(call(server, "DELETE", "/api/topics/nope"), 404, "unknown_topic")


def test_unknown_path_is_404_json(server: LogbusServer) -> None:
    assert_error(call(server, "GET", "/nope"), 404, "not_found")
    assert call(server, "GET", "/").headers["Content-Type"] == "text/html; charset=utf-8"  # the web console
    assert_error(call(server, "GET", "/api"), 404, "not_found")
    assert_error(call(server, "GET", "/healthz/deeper"), 404, "not_found")


@pytest.mark.parametrize(
    "method, path, allowed",
    [
        ("PUT", "/api/topics", "GET, HEAD, POST"),
        ("DELETE", "/api/topics", "GET, HEAD, POST"),
        ("POST", "/api/topics/some", "GET, HEAD, PUT, DELETE"),
        ("PATCH", "/api/topics/some", "GET, HEAD, PUT, DELETE"),
        ("POST", "/healthz", "GET, HEAD"),
        ("DELETE", "/metrics", "GET, HEAD"),
    ],
)
def test_wrong_method_is_405(server: LogbusServer, method: str, path: str, allowed: str) -> None:
    reply = call(server, method, path, raw=b"{}")
    assert_error(reply, 405, "method_not_allowed")
    assert reply.headers["Allow"] == allowed


def test_head(server: LogbusServer) -> None:
    reply = call(server, "HEAD", "/healthz")
    assert reply.status == 200
    assert reply.body == b""
    assert int(reply.headers["Content-Length"]) > 0


def test_body_over_1_mib_is_413(server: LogbusServer) -> None:
    body = json.dumps({"name": "big", "config": {"x": "a" * (MIB + 10)}}).encode()
    assert_error(call(server, "POST", "/api/topics", raw=body), 413, "payload_too_large")
    assert_error(call(server, "GET", "/api/topics/big"), 404, "unknown_topic")
    # The server is fine afterwards.
    assert call(server, "GET", "/healthz").status == 200


def test_body_of_exactly_1_mib_is_read(server: LogbusServer) -> None:
    body = json.dumps({"name": "padded"}).encode().ljust(MIB, b" ")
    assert call(server, "POST", "/api/topics", raw=body).status == 201


def test_413_is_decided_on_content_length_alone(server: LogbusServer) -> None:
    # Announce 100 MiB, send nothing: the answer must come from the headers.
    host, port = server.host_port("http")
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(
            b"POST /api/topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (100 * MIB)
        )
        response = b""
        while chunk := sock.recv(65536):
            response += chunk
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ")
    assert json.loads(body)["error"] == "payload_too_large"


def test_chunked_body_over_1_mib_is_413(server: LogbusServer) -> None:
    host, port = server.host_port("http")
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        chunks = (b"a" * 65536 for _ in range(20))  # 1.25 MiB, no Content-Length
        conn.request("POST", "/api/topics", body=chunks, encode_chunked=True,
                     headers={"Transfer-Encoding": "chunked"})
        response = conn.getresponse()
        assert response.status == 413
        assert json.loads(response.read())["error"] == "payload_too_large"
    finally:
        conn.close()


def test_metrics_content_negotiation(server: LogbusServer) -> None:
    plain = call(server, "GET", "/metrics")
    assert plain.status == 200
    assert plain.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert b"logbus_topics" in plain.body
    om = call(server, "GET", "/metrics", headers={"Accept": "application/openmetrics-text"})
    assert om.headers["Content-Type"].startswith("application/openmetrics-text")
    assert om.body.rstrip().endswith(b"# EOF")
