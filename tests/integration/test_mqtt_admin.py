"""MQTT administration against a real `logbus serve`, over the HTTP API and the `logbus mqtt`
commands: listing clients and sessions (an offline session's subscriptions and queued
messages), kicking a client (paho sees the disconnect, MQTT 5 with 0x98), deleting a session
(the next connect has no session present), client ids of any characters, 404s, the MQTT
listener off, and refusal of anyone but an administrator."""

from __future__ import annotations

import json
import queue
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.mgmt import Mgmt, Reply, q
from tests.integration.mqtt_clients import WAIT, Paho, props, unique
from tests.serverproc import LogbusServer, module_server, run_logbus

ADMINISTRATIVE_ACTION = 0x98
ENDPOINTS = [("GET", "/api/mqtt/clients"), ("GET", "/api/mqtt/sessions"),
             ("DELETE", "/api/mqtt/clients/x"), ("DELETE", "/api/mqtt/sessions/x")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "mqtt-admin", listeners={"kafka": "off", "amqp": "off"})


@pytest.fixture(scope="module")
def mgmt(server: LogbusServer) -> Mgmt:
    m = Mgmt(server)
    m.add_user("monitor", "pw", "monitoring")  # sees every client, may not kick one
    m.add_user("manager", "pw", "management")  # may use the API, not see other users' clients
    return m


def mqtt_cli(server: LogbusServer, *args: str, env: dict[str, str] | None = None) -> Any:
    return run_logbus("mqtt", *args, "--server", server.http_url, env=env)


def persistent(server: LogbusServer, cid: str, version: int = 5, **kw: Any) -> Paho:
    """A client whose session outlives its connection (10 minutes in 5.0, until a clean
    connect in 3.1.1); it does not reconnect by itself once kicked."""
    expiry = props(SessionExpiryInterval=600) if version == 5 else None
    c = Paho(server, cid, version=version, clean=False, properties=expiry, **kw)
    c.client.reconnect_delay_set(min_delay=120, max_delay=120)
    return c


def sessions(mgmt: Mgmt, path: str = "/api/mqtt/sessions") -> dict[str, dict[str, Any]]:
    reply = mgmt.call("GET", path)
    assert reply.status == 200, reply
    return {s["client_id"]: s for s in reply.json()}


def session_when(mgmt: Mgmt, cid: str, ready: Any) -> dict[str, Any]:
    """The session of ``cid`` once ``ready(session)`` holds (deliveries to a queue are not
    synchronous with the publisher's PUBACK)."""
    deadline = time.monotonic() + WAIT
    while True:
        s = sessions(mgmt).get(cid)
        if s is not None and ready(s):
            return s
        assert time.monotonic() < deadline, f"session {cid}: {s}"
        time.sleep(0.05)


def disconnected(c: Paho) -> Any:
    """The reason paho saw its connection end with; its network loop is stopped."""
    try:
        rc = c.disconnects.get(timeout=WAIT)
    except queue.Empty:
        raise AssertionError("the client was not disconnected") from None
    c.client.loop_stop()
    return rc


def error(reply: Reply, status: int, code: str) -> str:
    assert reply.status == status, reply
    payload = reply.json()
    assert payload["error"] == code, payload
    return str(payload["message"])


def columns(line: str) -> list[str]:
    """A table line's cells (two spaces or more apart)."""
    return re.split(r"\s{2,}", line.strip())


def publish(server: LogbusServer, topic: str, n: int) -> None:
    pub = Paho(server, unique("pub"))
    for i in range(n):
        pub.publish(topic, str(i).encode(), 1)
    pub.close()


# -- listing ------------------------------------------------------------------------------------


def test_list_connected_and_offline_sessions(server: LogbusServer, mgmt: Mgmt) -> None:
    base = unique("list")
    offline_id, online_id, clean_id = unique("offline"), unique("online"), unique("clean")
    off = persistent(server, offline_id)
    off.subscribe(f"{base}/a/#", 1)
    off.subscribe(f"{base}/b/+", 0)
    off.close()
    on = persistent(server, online_id, version=4)
    on.subscribe(f"{base}/a/#", 1)
    clean = Paho(server, clean_id, version=4)
    publish(server, f"{base}/a/x", 3)
    on.take(3)

    s = session_when(mgmt, offline_id, lambda s: s["queued"] == 3)
    assert s == {"client_id": offline_id, "user": "guest", "connected": False, "peer": None,
                 "protocol": "5.0", "clean": False, "expiry_interval": 600,
                 "subscriptions": [{"filter": f"{base}/a/#", "qos": 1}, {"filter": f"{base}/b/+", "qos": 0}],
                 "queued": 3, "in_flight": 0}
    every = sessions(mgmt)
    assert (every[online_id]["connected"], every[online_id]["protocol"]) == (True, "3.1.1")
    assert every[online_id]["peer"].startswith("127.0.0.1:")
    assert every[online_id]["expiry_interval"] == 86400  # 3.1.1 clean session 0: mqtt_max_session_expiry
    assert (every[clean_id]["clean"], every[clean_id]["expiry_interval"]) == (True, 0)

    connected = sessions(mgmt, "/api/mqtt/clients")
    assert online_id in connected and clean_id in connected and offline_id not in connected
    assert all(c["connected"] for c in connected.values())
    assert sessions(mgmt, "/api/mqtt/clients/") == connected  # a trailing slash is the same list

    # the CLI: a table by default, the API's JSON with --json
    table = mqtt_cli(server, "sessions")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert columns(lines[0]) == ["CLIENT ID", "USER", "CONNECTED", "PROTOCOL", "EXPIRY",
                                                     "SUBSCRIPTIONS", "QUEUED", "IN FLIGHT"]
    row = next(line for line in lines[1:] if line.startswith(offline_id + " "))
    assert columns(row) == [offline_id, "guest", "offline", "5.0", "10m", f"{base}/a/#:1, {base}/b/+:0", "3", "0"]
    row = next(line for line in lines[1:] if line.startswith(online_id + " "))
    assert columns(row)[2:5] == [every[online_id]["peer"], "3.1.1", "1d"]  # mqtt_max_session_expiry
    as_json = mqtt_cli(server, "sessions", "--json")
    assert {s["client_id"]: s for s in json.loads(as_json.stdout)}[offline_id] == s
    listed = mqtt_cli(server, "clients")
    assert listed.returncode == 0, listed.stderr
    assert columns(listed.stdout.splitlines()[0])[2] == "PEER"
    assert online_id in listed.stdout and offline_id not in listed.stdout
    assert {c["client_id"] for c in json.loads(mqtt_cli(server, "clients", "--json").stdout)} == set(connected)
    on.close()
    clean.close()


# -- kick -----------------------------------------------------------------------------------------


def test_kick_over_http_mqtt5_keeps_the_session(server: LogbusServer, mgmt: Mgmt) -> None:
    cid, base = unique("kick5"), unique("kick5")
    c = persistent(server, cid)
    c.subscribe(f"{base}/#", 1)
    assert mgmt.call("DELETE", f"/api/mqtt/clients/{q(cid)}").status == 204
    rc = disconnected(c)
    assert rc == ADMINISTRATIVE_ACTION, rc
    s = sessions(mgmt)[cid]  # kicked, not deleted: the session is kept, offline
    assert (s["connected"], s["subscriptions"]) == (False, [{"filter": f"{base}/#", "qos": 1}])
    assert cid not in sessions(mgmt, "/api/mqtt/clients")
    message = error(mgmt.call("DELETE", f"/api/mqtt/clients/{q(cid)}"), 404, "unknown_client")
    assert cid in message and "connected" in message
    back = persistent(server, cid, connect=False)
    flags, _, _ = back.connect()
    assert flags.session_present
    back.close()


def test_kick_from_the_cli_mqtt311(server: LogbusServer, mgmt: Mgmt) -> None:
    cid = unique("kick4")
    c = persistent(server, cid, version=4)
    kicked = mqtt_cli(server, "kick", cid)
    assert kicked.returncode == 0, kicked.stderr
    assert kicked.stdout == f"disconnected MQTT client {cid}\n"
    rc = disconnected(c)  # 3.1.1 has no server DISCONNECT: the connection is just closed
    assert rc.is_failure, rc
    assert sessions(mgmt)[cid]["connected"] is False
    again = mqtt_cli(server, "kick", cid)
    assert (again.returncode, again.stdout) == (1, "")
    assert again.stderr == f"logbus: no MQTT client '{cid}' is connected\n"


# -- delete-session -----------------------------------------------------------------------------


def test_delete_an_offline_session_over_http(server: LogbusServer, mgmt: Mgmt) -> None:
    cid, base = unique("del"), unique("del")
    c = persistent(server, cid)
    c.subscribe(f"{base}/#", 1)
    c.close()
    publish(server, f"{base}/x", 2)
    session_when(mgmt, cid, lambda s: s["queued"] == 2)
    assert mgmt.call("DELETE", f"/api/mqtt/sessions/{q(cid)}").status == 204
    assert cid not in sessions(mgmt)
    message = error(mgmt.call("DELETE", f"/api/mqtt/sessions/{q(cid)}"), 404, "unknown_session")
    assert cid in message
    back = persistent(server, cid, connect=False)
    flags, _, _ = back.connect()
    assert not flags.session_present
    back.assert_quiet(1.0)  # the queued messages went with the session
    publish(server, f"{base}/x", 1)  # and so did the subscription
    back.assert_quiet(1.0)
    back.close()


@pytest.mark.parametrize("version", [4, 5])
def test_delete_a_connected_session_from_the_cli(server: LogbusServer, mgmt: Mgmt, version: int) -> None:
    cid = unique(f"del{version}")
    c = persistent(server, cid, version=version)
    c.subscribe(f"{cid}/#", 1)
    deleted = mqtt_cli(server, "delete-session", cid)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == f"deleted the MQTT session of {cid}\n"
    rc = disconnected(c)
    assert rc == ADMINISTRATIVE_ACTION if version == 5 else rc.is_failure, rc
    assert cid not in sessions(mgmt)
    again = mqtt_cli(server, "delete-session", cid)
    assert (again.returncode, again.stdout) == (1, "")
    assert again.stderr == f"logbus: no MQTT session of client '{cid}'\n"
    back = persistent(server, cid, version=version, connect=False)
    flags, _, _ = back.connect()
    assert not flags.session_present
    assert sessions(mgmt)[cid]["subscriptions"] == []
    back.close()
    assert mgmt.call("DELETE", f"/api/mqtt/sessions/{q(cid)}").status == 204


# -- client ids ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cid", ["a/b/c", "50% off?#x=1&y", "dévice ☃ 1", "..", "%2F", "sp ace+plus"])
def test_client_ids_of_any_characters(server: LogbusServer, mgmt: Mgmt, cid: str) -> None:
    c = persistent(server, cid)
    assert cid in sessions(mgmt, "/api/mqtt/clients")
    assert mgmt.call("DELETE", f"/api/mqtt/clients/{q(cid)}").status == 204
    assert disconnected(c) == ADMINISTRATIVE_ACTION
    assert sessions(mgmt)[cid]["connected"] is False
    assert mgmt.call("DELETE", f"/api/mqtt/sessions/{q(cid)}").status == 204
    assert cid not in sessions(mgmt)
    # the CLI encodes the id itself
    c = persistent(server, cid)
    assert mqtt_cli(server, "kick", cid).returncode == 0
    disconnected(c)
    result = mqtt_cli(server, "delete-session", cid)
    assert result.returncode == 0, result.stderr
    assert cid not in sessions(mgmt)


# -- errors ---------------------------------------------------------------------------------------


def test_unknown_clients_and_paths(mgmt: Mgmt) -> None:
    error(mgmt.call("DELETE", "/api/mqtt/clients/no-such-client"), 404, "unknown_client")
    error(mgmt.call("DELETE", "/api/mqtt/sessions/no-such-client"), 404, "unknown_session")
    error(mgmt.call("GET", "/api/mqtt"), 404, "not_found")
    error(mgmt.call("GET", "/api/mqtt/other"), 404, "not_found")
    error(mgmt.call("DELETE", "/api/mqtt/clients/a/b"), 404, "not_found")  # "/" in an id is %2F
    reply = mgmt.call("GET", "/api/mqtt/clients/x")
    error(reply, 405, "method_not_allowed")
    assert reply.headers["Allow"] == "DELETE"
    assert mgmt.call("POST", "/api/mqtt/sessions").headers["Allow"] == "GET, HEAD"


def test_the_mqtt_listener_off(logbus_server: Any) -> None:
    server = logbus_server(listeners={"mqtt": "off", "kafka": "off", "amqp": "off"})
    mgmt = Mgmt(server)
    for method, path in ENDPOINTS:
        message = error(mgmt.call(method, path), 404, "not_found")
        assert "MQTT listener is off" in message, message
    for args in (["clients"], ["sessions", "--json"], ["kick", "x"], ["delete-session", "x"]):
        result = mqtt_cli(server, *args)
        assert (result.returncode, result.stdout) == (1, "")
        assert result.stderr.startswith("logbus: the MQTT listener is off"), result.stderr
    # the tag is asked for first, as everywhere in the management API
    mgmt.add_user("manager", "pw", "management")
    error(mgmt.as_user(("manager", "pw")).call("GET", "/api/mqtt/clients"), 403, "forbidden")


# -- who may use it -----------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_monitoring_looks_administrators_act(server: LogbusServer, mgmt: Mgmt, method: str, path: str) -> None:
    cid = unique("victim")
    c = persistent(server, cid)
    path = path.replace("/x", "/" + cid)
    for auth in (None, ("guest", "wrong"), ("nobody", "guest")):
        reply = mgmt.as_user(auth).call(method, path)
        error(reply, 401, "unauthorized")
        assert reply.headers["WWW-Authenticate"] == 'Basic realm="logbus"'
    if method == "GET":  # RabbitMQ's monitoring tag: every connection's figures
        assert error(mgmt.as_user(("manager", "pw")).call(method, path), 403, "forbidden") == "Not monitor user"
        assert cid in [s["client_id"] for s in mgmt.as_user(("monitor", "pw")).ok(method, path).json()]
    else:
        assert error(mgmt.as_user(("monitor", "pw")).call(method, path), 403, "forbidden") == "Not administrator user"
    assert sessions(mgmt)[cid]["connected"] is True  # refused requests changed nothing
    c.close()
    mgmt.call("DELETE", f"/api/mqtt/sessions/{q(cid)}")


def test_cli_credentials(server: LogbusServer, mgmt: Mgmt) -> None:
    refused = mqtt_cli(server, "kick", "nobody-here", "--user", "monitor", "--password", "pw")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr.startswith("logbus: Not administrator user"), refused.stderr
    wrong = mqtt_cli(server, "clients", "--password", "wrong")
    assert wrong.returncode == 1
    assert wrong.stderr.startswith("logbus: Login failed (give a user's credentials"), wrong.stderr
    from_env = mqtt_cli(server, "clients", env={"LOGBUS_USER": "manager", "LOGBUS_PASSWORD": "pw"})
    assert from_env.stderr.startswith("logbus: Not monitor user"), from_env.stderr
    looked = mqtt_cli(server, "clients", "--json", env={"LOGBUS_USER": "monitor", "LOGBUS_PASSWORD": "pw"})
    assert looked.returncode == 0, looked.stderr
    mgmt.add_user("ops", "s3cret", "administrator")
    ok = mqtt_cli(server, "sessions", "--json", env={"LOGBUS_USER": "ops", "LOGBUS_PASSWORD": "s3cret"})
    assert ok.returncode == 0, ok.stderr
    assert isinstance(json.loads(ok.stdout), list)
