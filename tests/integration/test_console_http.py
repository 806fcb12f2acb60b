"""The web console over plain HTTP (no browser) against a real `logbus serve`: where it
sends a visitor without credentials, its static files' caching, the refusals of a
change sent without the form's token or from another site, and what some pages show
and refuse (the clients' connections, not the console's own; no deleting oneself; the
overview's rates). The browser tests are in tests/browser."""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from typing import TypeVar

import pytest

from tests.integration.html_tables import html_rows
from tests.integration.console_forms import form_post, until
from tests.integration.mgmt import Mgmt
from tests.integration.mqtt_clients import WAIT, Paho, unique
from tests.serverproc import LogbusServer, module_server

T = TypeVar("T")


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


def test_the_connections_page_lists_the_clients_not_the_consoles_own_http_connections(
        server: LogbusServer) -> None:
    m = Mgmt(server)
    name = unique("console-device")
    device = Paho(server, name, username="guest", password="guest")
    browser = http.client.HTTPConnection(*server.host_port("http"), timeout=WAIT)  # kept alive
    try:
        [mqtt_id] = [c["id"] for c in m.ok("GET", "/api/connections?protocol=mqtt").json() if c["client_id"] == name]
        page = m.call("GET", "/connections").body.decode()  # asked on an HTTP connection, open meanwhile
        rows = html_rows(page, "Open connections")
        assert [(r["Id"], r["Protocol"], r["Action"]) for r in rows] == [(str(mqtt_id), "mqtt", "Close")]
        assert 'value="http"' not in page  # nor is HTTP a protocol to filter by
        asked = html_rows(m.call("GET", "/connections?protocol=http").body.decode(), "Open connections")
        assert {r["Protocol"] for r in asked} == {"mqtt"}  # as an unknown protocol: the filter is not applied
        # the API is unchanged: it lists HTTP connections, this request's among them
        assert "http" in {c["protocol"] for c in m.ok("GET", "/api/connections").json()}

        # the overview counts the same connections
        overview = m.call("GET", "/").body.decode()
        assert '<dd id="connection-count">1</dd>' in overview
        assert [r["Protocol"] for r in html_rows(overview, "Connections per protocol")] == ["AMQP", "MQTT", "KAFKA"]

        # and the console closes none: here, a browser's kept-alive connection
        browser.request("GET", "/login")
        assert browser.getresponse().read()
        peer = "%s:%d" % browser.sock.getsockname()
        [http_id] = [c["id"] for c in m.ok("GET", "/api/connections?protocol=http").json() if c["peer"] == peer]
        refused = form_post(m, "/connections/close", "/connections", {"id": str(http_id)})
        assert refused.status == 400 and b"HTTP connection" in refused.body, refused
        assert http_id in {c["id"] for c in m.ok("GET", "/api/connections").json()}
    finally:
        browser.close()
        device.close()


def test_the_users_page_does_not_delete_the_user_logged_in(server: LogbusServer) -> None:
    m = Mgmt(server)
    m.add_user("console-other", "pw", "administrator")
    try:
        rows = {r["Name"]: r["Action"] for r in html_rows(m.call("GET", "/users").body.decode(), "Users")}
        assert (rows["guest"], rows["console-other"]) == ("(logged in)", "Delete")
        refused = form_post(m, "/users/delete", "/users", {"name": "guest"})
        assert refused.status == 409 and b"is the one logged in" in refused.body, refused
        assert m.call("GET", "/api/users/guest").status == 200
        # another user is deleted as before
        done = form_post(m, "/users/delete", "/users", {"name": "console-other"})
        assert done.status == 303 and m.call("GET", "/api/users/console-other").status == 404
    finally:
        m.call("DELETE", "/api/users/console-other")


def test_the_overview_says_the_message_rates_in_a_line_not_in_a_table_that_repeats_the_chart(
        server: LogbusServer) -> None:
    m = Mgmt(server)
    m.ok("POST", "/api/topics", {"name": "console-rates", "partitions": 1})

    def rates() -> str:
        page = m.call("GET", "/").body.decode()  # each look keeps the sampling going
        assert "Messages per second, last" not in page  # the table (or its "sampling started") is gone
        found = re.search(r'<dd id="message-rates">([^<]*)</dd>', page)
        assert found is not None, page
        return found[1]

    def received(text: str) -> float | None:
        """The average received, when the text says the rates."""
        said = re.fullmatch(r"([0-9.]+) received, ([0-9.]+) sent \(average of the last \d+ s\)", text)
        return None if said is None else float(said[1])

    until(rates, lambda text: received(text) is not None, "the first rates")
    m.ok("POST", "/api/topics/console-rates/messages", {"messages": [{"value": str(i)} for i in range(20)]})
    until(rates, lambda text: (received(text) or 0) > 0, "the messages received to show in the average")
