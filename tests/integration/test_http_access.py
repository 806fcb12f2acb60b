"""The users / vhosts / permissions management API against a real `logbus serve`: HTTP
Basic auth of administrators (401 / 403), RabbitMQ's shapes and statuses, validation, and
persistence across a restart. AMQP behaviour is in test_amqp_access.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.mgmt import Mgmt, Reply, q
from tests.serverproc import LogbusServer, module_server

RABBITMQ_HASH = "fOC0HhN9jd35fgdugCrUmtJEDBykNKlPSAkkQrMfQfuWjx2w"  # "secret", from RabbitMQ 3.10.8
ADMIN_ONLY = ["/api/users", "/api/users/guest", "/api/permissions", "/api/permissions/%2F/guest"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "http-access")


@pytest.fixture(scope="module")
def mgmt(server: LogbusServer) -> Mgmt:
    m = Mgmt(server)
    m.add_user("monitor", "pw", "monitoring")  # a valid user, not an administrator
    return m


def error(reply: Reply, status: int, code: str) -> str:
    assert reply.status == status, reply
    payload = reply.json()
    assert payload["error"] == code, payload
    return str(payload["message"])


# -- who may use it ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ADMIN_ONLY)
def test_users_and_permissions_need_an_administrator(mgmt: Mgmt, path: str) -> None:
    for auth, headers in [(None, {}), (("guest", "wrong"), {}), (("nobody", "guest"), {}),
                          (None, {"Authorization": "Bearer abc"}),
                          (None, {"Authorization": "Basic !!!"})]:
        reply = mgmt.as_user(auth).call("GET", path, headers=headers)
        error(reply, 401, "unauthorized")
        assert reply.headers["WWW-Authenticate"] == 'Basic realm="logbus"'
    reply = mgmt.as_user(("monitor", "pw")).call("GET", path)
    assert error(reply, 403, "forbidden") == "Not administrator user"
    assert "WWW-Authenticate" not in reply.headers
    put = mgmt.as_user(("monitor", "pw")).call("PUT", "/api/users/sneaky", {"password": "x", "tags": "administrator"})
    error(put, 403, "forbidden")
    assert mgmt.call("GET", path).status == 200


def test_only_health_and_metrics_are_open(mgmt: Mgmt) -> None:
    anonymous = mgmt.as_user(None)
    for path in ("/metrics", "/healthz"):
        assert anonymous.call("GET", path).status == 200, path
    for path in ("/api/topics", "/api/limits", "/api/vhosts", "/api/connections", "/api/pop", "/api/whoami"):
        reply = anonymous.call("GET", path)
        error(reply, 401, "unauthorized")
        assert reply.headers["WWW-Authenticate"] == 'Basic realm="logbus"'


def test_vhosts_are_seen_by_monitoring_and_changed_by_administrators(mgmt: Mgmt) -> None:
    monitor = mgmt.as_user(("monitor", "pw"))
    assert [v["name"] for v in monitor.ok("GET", "/api/vhosts").json()] == ["/"]
    assert monitor.ok("GET", "/api/vhosts/%2F").json()["name"] == "/"
    error(monitor.call("PUT", "/api/vhosts/sneaky"), 403, "forbidden")
    error(monitor.call("DELETE", "/api/vhosts/%2F"), 403, "forbidden")
    assert mgmt.call("GET", "/api/vhosts/sneaky").status == 404


# -- users ----------------------------------------------------------------------------------------


def test_users_crud(mgmt: Mgmt) -> None:
    users = {u["name"]: u for u in mgmt.ok("GET", "/api/users").json()}
    guest = users["guest"]
    assert guest["tags"] == ["administrator"]
    assert guest["hashing_algorithm"] == "logbus_password_hashing_scrypt"
    assert guest["password_hash"].startswith("$scrypt$ln=14,r=8,p=5$")  # OWASP's parameters, in the hash

    assert mgmt.call("PUT", "/api/users/u1", {"password": "pw1", "tags": "administrator"}).status == 201
    assert mgmt.call("PUT", "/api/users/u1", {"password": "pw2", "tags": ["administrator", "x"]}).status == 204
    u1 = mgmt.ok("GET", "/api/users/u1").json()
    assert (u1["name"], u1["tags"]) == ("u1", ["administrator", "x"])
    assert mgmt.as_user(("u1", "pw2")).call("GET", "/api/users").status == 200  # the new password
    assert mgmt.as_user(("u1", "pw1")).call("GET", "/api/users").status == 401

    # a hash exported from RabbitMQ, as in its definitions file
    assert mgmt.call("PUT", "/api/users/u2", {"password_hash": RABBITMQ_HASH, "tags": "administrator",
                                             "hashing_algorithm": "rabbit_password_hashing_sha256",
                                             "name": "u2", "limits": {}}).status == 201
    assert mgmt.ok("GET", "/api/users/u2").json()["password_hash"] == RABBITMQ_HASH
    assert mgmt.as_user(("u2", "secret")).call("GET", "/api/vhosts").status == 200
    u2 = mgmt.ok("GET", "/api/users/u2").json()  # the login made the hash scrypt
    assert u2["hashing_algorithm"] == "logbus_password_hashing_scrypt" and u2["password_hash"].startswith("$scrypt$")
    assert mgmt.as_user(("u2", "secret")).call("GET", "/api/vhosts").status == 200
    assert mgmt.as_user(("u2", "Secret")).call("GET", "/api/vhosts").status == 401

    assert mgmt.call("DELETE", "/api/users/u2").status == 204
    error(mgmt.call("DELETE", "/api/users/u2"), 404, "unknown_user")
    error(mgmt.call("GET", "/api/users/u2"), 404, "unknown_user")
    assert mgmt.as_user(("u2", "secret")).call("GET", "/api/vhosts").status == 401


@pytest.mark.parametrize(("body", "text"), [
    ({"password": "a", "password_hash": RABBITMQ_HASH}, "not both"),
    ({"password_hash": "short"}, "not base64"),
    ({"password_hash": "c2hvcnQ="}, "decodes to 5 bytes"),
    ({"password_hash": RABBITMQ_HASH, "hashing_algorithm": "sha1"}, "unknown hashing_algorithm"),
    ({"password": 7}, "password must be a string"),
    ({"password": "a", "tags": [1]}, "tags must be"),
    ({"password": "a", "colour": "red"}, "unknown field(s) 'colour'"),
    ({"password": "a", "name": "other"}, "not 'bad' of the path"),
    ([1], "must be a JSON object"),
])
def test_bad_user_bodies_are_400(mgmt: Mgmt, body: Any, text: str) -> None:
    assert text in error(mgmt.call("PUT", "/api/users/bad", body), 400, "bad_request")
    error(mgmt.call("GET", "/api/users/bad"), 404, "unknown_user")


# -- vhosts ----------------------------------------------------------------------------------------


def test_vhosts_crud_with_url_encoded_names(mgmt: Mgmt) -> None:
    root = mgmt.ok("GET", "/api/vhosts/%2F").json()
    assert (root["name"], root["description"]) == ("/", "Default virtual host")
    assert mgmt.call("PUT", "/api/vhosts/%2Fteam%20a").status == 201  # no body: RabbitMQ allows it
    assert mgmt.call("PUT", "/api/vhosts/%2Fteam%20a", {"description": "A", "tags": "eu,prod"}).status == 204
    got = mgmt.ok("GET", "/api/vhosts/%2Fteam%20a").json()
    assert (got["name"], got["description"], got["tags"]) == ("/team a", "A", ["eu", "prod"])
    assert "/team a" in [v["name"] for v in mgmt.ok("GET", "/api/vhosts").json()]
    assert mgmt.call("DELETE", "/api/vhosts/%2Fteam%20a").status == 204
    error(mgmt.call("GET", "/api/vhosts/%2Fteam%20a"), 404, "unknown_vhost")
    error(mgmt.call("DELETE", "/api/vhosts/nope"), 404, "unknown_vhost")
    assert "cannot name its log topics" in error(mgmt.call("PUT", "/api/vhosts/" + "v" * 240), 400, "bad_request")
    error(mgmt.call("PUT", "/api/vhosts/x", {"description": 5}), 400, "bad_request")
    error(mgmt.call("PUT", "/api/vhosts/x", raw=b"{"), 400, "bad_json")


# -- permissions ------------------------------------------------------------------------------------


def test_permissions_crud(mgmt: Mgmt) -> None:
    mgmt.add_vhost("perm-v")
    mgmt.add_user("perm-u", "pw")
    path = "/api/permissions/perm-v/perm-u"
    error(mgmt.call("GET", path), 404, "unknown_permission")
    body = {"configure": "^cfg", "write": "", "read": ".*"}
    assert mgmt.call("PUT", path, body).status == 201
    assert mgmt.call("PUT", path, body | {"user": "perm-u", "vhost": "perm-v"}).status == 204
    assert mgmt.ok("GET", path).json() == {"user": "perm-u", "vhost": "perm-v", **body}
    assert {"user": "perm-u", "vhost": "perm-v", **body} in mgmt.ok("GET", "/api/permissions").json()
    assert {"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"} in \
        mgmt.ok("GET", "/api/permissions").json()
    assert "not a valid regular expression" in error(mgmt.call("PUT", path, body | {"read": "("}), 400,
                                                     "bad_request")
    assert "'read' required" in error(mgmt.call("PUT", path, {"configure": "", "write": ""}), 400,
                                      "bad_request")
    error(mgmt.call("PUT", "/api/permissions/nope/perm-u", body), 404, "unknown_vhost")
    error(mgmt.call("PUT", "/api/permissions/perm-v/nobody", body), 404, "unknown_user")
    assert mgmt.call("GET", "/api/permissions/perm-v").status == 404  # not an endpoint
    assert mgmt.call("DELETE", path).status == 204
    error(mgmt.call("DELETE", path), 404, "unknown_permission")


def test_deleting_a_vhost_or_user_takes_their_permissions(mgmt: Mgmt) -> None:
    mgmt.add_vhost("pv")
    mgmt.add_user("pu", "pw")
    mgmt.grant("pv", "pu")
    mgmt.grant("/", "pu")
    mgmt.ok("DELETE", "/api/vhosts/pv")
    mine = [(p["vhost"], p["user"]) for p in mgmt.ok("GET", "/api/permissions").json() if p["user"] == "pu"]
    assert mine == [("/", "pu")]
    mgmt.ok("DELETE", "/api/users/pu")
    assert all(p["user"] != "pu" for p in mgmt.ok("GET", "/api/permissions").json())


# -- persistence ------------------------------------------------------------------------------------


def test_users_vhosts_and_permissions_survive_a_restart(logbus_server: Any) -> None:
    server: LogbusServer = logbus_server(args=["--default-user", "root", "--default-pass", "r00t"],
                                         anonymous_admin=False)
    m = Mgmt(server, ("root", "r00t"))
    assert [u["name"] for u in m.ok("GET", "/api/users").json()] == ["anonymous", "root"]  # no guest this time
    m.add_user("keeper", "pw", "administrator")
    m.add_vhost("kept/vhost")
    m.grant("kept/vhost", "keeper", "^a", "^b", "^c")
    m.ok("DELETE", "/api/users/root")
    server.restart()
    m = Mgmt(server, ("keeper", "pw"))
    assert [u["name"] for u in m.ok("GET", "/api/users").json()] == ["anonymous", "keeper"]  # root stays deleted
    assert sorted(v["name"] for v in m.ok("GET", "/api/vhosts").json()) == ["/", "kept/vhost"]
    assert m.ok("GET", f"/api/permissions/{q('kept/vhost')}/keeper").json()["write"] == "^b"
