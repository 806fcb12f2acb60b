"""The web console over plain HTTP (no browser) against a real `logbus serve`: where it
sends a visitor without credentials, its static files' caching, and the refusals of a
change sent without the form's token or from another site. The browser tests are in
tests/browser."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.integration.mgmt import Mgmt
from tests.serverproc import LogbusServer, module_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "console-http", listeners={"amqp": "off", "kafka": "off"})


def test_a_page_without_credentials_sends_the_visitor_to_the_login_form(server: LogbusServer) -> None:
    anonymous = Mgmt(server, auth=None)
    reply = anonymous.call("GET", "/connections?protocol=mqtt")
    assert reply.status == 303
    assert reply.headers["Location"] == "/login?next=%2Fconnections%3Fprotocol%3Dmqtt"
    login = anonymous.call("GET", "/login")
    assert login.status == 200 and b'<label for="password">' in login.body
    assert "default-src 'self'" in login.headers["Content-Security-Policy"]
    assert anonymous.call("GET", "/rates.json").status == 401


def test_basic_credentials_open_the_pages_and_the_wrong_ones_do_not(server: LogbusServer) -> None:
    page = Mgmt(server).call("GET", "/topics")
    assert page.status == 200 and b"<h1>Topics</h1>" in page.body
    assert page.headers["Cache-Control"] == "no-store"
    wrong = Mgmt(server, auth=("guest", "wrong")).call("GET", "/topics")
    assert wrong.status == 401 and "WWW-Authenticate" not in wrong.headers  # no browser dialog
    series = Mgmt(server).call("GET", "/rates.json").json()
    assert series.keys() == {"t", "received", "sent", "depth"}
    assert series["depth"].keys() == {"t", "ready", "unacked"}


def test_static_files_are_cached_for_a_year_under_their_content_hash(server: LogbusServer) -> None:
    page = Mgmt(server).call("GET", "/").body.decode()
    urls = re.findall(r'(?:src|href)="(/static/[0-9a-f]{12}/[^"]+)"', page)
    assert {u.rsplit("/", 1)[1] for u in urls} >= {"htmx.min.js", "uPlot.iife.min.js", "console.js", "console.css"}
    for url in urls:
        reply = Mgmt(server, auth=None).call("GET", url)  # no credentials needed
        assert reply.status == 200, url
        assert reply.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    stale = re.sub(r"/static/[0-9a-f]{12}/", "/static/000000000000/", urls[0])
    assert Mgmt(server, auth=None).call("GET", stale).status == 404


def test_a_change_without_the_token_or_from_another_site_is_refused(server: LogbusServer) -> None:
    m = Mgmt(server)
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    page = m.call("GET", "/users").body.decode()
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert token is not None
    body = f"csrf={token.group(1)}&name=mallory&password=pw&tags=administrator".encode()
    assert m.call("POST", "/users/put", raw=body.replace(token.group(1).encode(), b"0"),
                  headers=form).status == 403
    assert m.call("POST", "/users/put", raw=body, headers={**form, "Origin": "http://evil.example"}).status == 403
    assert m.call("GET", "/api/users/mallory").status == 404
    host, port = server.host_port("http")
    same = {**form, "Origin": f"http://{host}:{port}"}
    done = m.call("POST", "/users/put", raw=body, headers=same)
    assert (done.status, done.headers["Location"]) == (303, "/users?done=User+%27mallory%27+created.")
    assert m.call("GET", "/api/users/mallory").json()["tags"] == ["administrator"]
    m.ok("DELETE", "/api/users/mallory")
