"""The console's topology changes sent as forms over plain HTTP against a real `logbus
serve`: a user without the permission gets the API's refusal (403) for a forged form,
with the form's own token, and nothing is made; an administrator's form makes what the
API then shows; a malformed field is a 400 that names it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.console_forms import form_post, login
from tests.integration.mgmt import Mgmt
from tests.serverproc import LogbusServer, module_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "console-topology", listeners={"kafka": "off", "mqtt": "off"})


@pytest.fixture(scope="module")
def mgmt(server: LogbusServer) -> Mgmt:
    m = Mgmt(server)
    m.add_user("watcher", "pw", "monitoring")  # the read-only role: no permission anywhere
    m.ok("PUT", "/api/queues/%2F/ctf-existing")
    return m


FORGED = [
    ("/exchanges/declare", {"vhost": "/", "name": "ctf-made", "type": "direct", "durable": "true"}),
    ("/queues/declare", {"vhost": "/", "name": "ctf-made", "durable": "true"}),
    ("/exchanges/bind", {"vhost": "/", "source": "amq.direct", "kind": "queue", "destination": "ctf-existing",
                         "binding_key": "k"}),
    ("/exchanges/publish", {"vhost": "/", "name": "amq.direct", "routing_key": "ctf-existing", "payload": "x"}),
    ("/queues/delete", {"vhost": "/", "name": "ctf-existing"}),
    ("/exchanges/delete", {"vhost": "/", "name": "amq.direct"}),
]


@pytest.mark.parametrize("path, fields", FORGED, ids=[p for p, _ in FORGED])
def test_a_forged_form_of_the_read_only_role_is_refused_and_changes_nothing(
        mgmt: Mgmt, server: LogbusServer, path: str, fields: dict[str, str]) -> None:
    session = login(server, "watcher", "pw")
    page = Mgmt(server, None).call("GET", "/exchanges", headers=session)
    assert page.status == 200 and b"Add a new exchange" not in page.body
    reply = form_post(Mgmt(server, None), path, "/exchanges", fields, session)
    assert reply.status == 403, reply
    assert mgmt.call("GET", "/api/exchanges/%2F/ctf-made").status == 404
    assert mgmt.call("GET", "/api/queues/%2F/ctf-made").status == 404
    existing = mgmt.ok("GET", "/api/queues/%2F/ctf-existing").json()
    assert existing["messages"] == 0
    assert mgmt.ok("GET", "/api/bindings/%2F/e/amq.direct/q/ctf-existing").json() == []
    assert mgmt.ok("GET", "/api/exchanges/%2F/amq.direct").status == 200


def test_the_administrators_forms_make_what_the_api_shows(mgmt: Mgmt, server: LogbusServer) -> None:
    session = login(server, "guest", "guest")
    made = form_post(Mgmt(server, None), "/exchanges/declare", "/exchanges", {"vhost": "/", "name": "ctf-events", "type": "fanout",
                                                     "durable": "true", "arguments": ""}, session)
    assert made.status == 303 and "Declared+exchange" in made.headers["Location"], made
    row = mgmt.ok("GET", "/api/exchanges/%2F/ctf-events").json()
    assert (row["type"], row["durable"], row["auto_delete"]) == ("fanout", True, False)
    assert form_post(Mgmt(server, None), "/queues/declare", "/queues", {"vhost": "/", "name": "ctf-q", "arguments": '{"x-max-length": 3}'}, session).status == 303
    assert mgmt.ok("GET", "/api/queues/%2F/ctf-q").json()["durable"] is False  # the box was not ticked
    assert form_post(Mgmt(server, None), "/exchanges/bind", "/exchanges", {"vhost": "/", "source": "ctf-events", "kind": "queue",
                                                  "destination": "ctf-q", "binding_key": ""}, session).status == 303
    sent = form_post(Mgmt(server, None), "/exchanges/publish", "/exchanges", {"vhost": "/", "name": "ctf-events", "payload": "hello",
                                                     "headers": '{"a": 1}', "delivery_mode": "2"}, session)
    assert sent.status == 303 and "Message+published." in sent.headers["Location"], sent
    [message] = mgmt.ok("POST", "/api/queues/%2F/ctf-q/get", {"count": 5}).json()
    assert message["payload"] == "hello"

    bad = form_post(Mgmt(server, None), "/queues/declare", "/queues", {"vhost": "/", "name": "ctf-bad", "arguments": "[1, 2]"}, session)
    assert bad.status == 400 and b"arguments" in bad.body
    assert mgmt.call("GET", "/api/queues/%2F/ctf-bad").status == 404
    inequivalent = form_post(Mgmt(server, None), "/queues/declare", "/queues", {"vhost": "/", "name": "ctf-q", "arguments": ""}, session)
    assert inequivalent.status == 400 and b"inequivalent" in inequivalent.body


def test_topics_are_created_altered_and_deleted_from_their_pages(mgmt: Mgmt, server: LogbusServer) -> None:
    session = login(server, "guest", "guest")
    made = form_post(Mgmt(server, None), "/topics/create", "/topics", {"name": "ctf-stream", "partitions": "3",
                                                    "config": '{"retention.ms": 3600000}'}, session)
    assert made.status == 303 and "Created+topic" in made.headers["Location"], made
    topic = mgmt.ok("GET", "/api/topics/ctf-stream").json()
    assert topic["partitions"] == 3 and topic["config"]["retention.ms"] == 3600000
    changed = form_post(Mgmt(server, None), "/topics/alter", "/topics/ctf-stream", {"name": "ctf-stream", "config": '{"retention.ms": 7200000}'}, session)
    assert changed.status == 303, changed
    assert mgmt.ok("GET", "/api/topics/ctf-stream").json()["config"]["retention.ms"] == 7200000
    bad = form_post(Mgmt(server, None), "/topics/alter", "/topics/ctf-stream", {"name": "ctf-stream", "config": '{"retention.ms": "soon"}'}, session)
    assert bad.status == 400, bad
    page = Mgmt(server, None).call("GET", "/topics/ctf-stream?confirm=delete", headers=session).body.decode()
    assert "Delete topic ctf-stream?" in page

    watcher = login(server, "watcher", "pw")
    assert b"Add a new topic" not in Mgmt(server, None).call("GET", "/topics", headers=watcher).body
    assert form_post(Mgmt(server, None), "/topics/delete", "/exchanges", {"name": "ctf-stream"}, watcher).status == 403
    assert form_post(Mgmt(server, None), "/topics/create", "/exchanges", {"name": "ctf-other"}, watcher).status == 403
    assert mgmt.call("GET", "/api/topics/ctf-other").status == 404

    gone = form_post(Mgmt(server, None), "/topics/delete", "/topics/ctf-stream", {"name": "ctf-stream"}, session)
    assert gone.status == 303 and "Deleted+topic" in gone.headers["Location"], gone
    assert mgmt.call("GET", "/api/topics/ctf-stream").status == 404


def test_a_connections_page_has_its_facts_rates_and_chart(mgmt: Mgmt, server: LogbusServer) -> None:
    import json

    import pika  # type: ignore[import-untyped]

    host, port = server.host_port("amqp")
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        host, port, credentials=pika.PlainCredentials("guest", "guest"),
        client_properties={"connection_name": "ctf-conn"}))
    try:
        [record] = [c for c in mgmt.ok("GET", "/api/connections").json() if c["client_id"] == "ctf-conn"]
        session = login(server, "guest", "guest")
        page = Mgmt(server, None).call("GET", f"/connections/{record['id']}", headers=session)
        assert page.status == 200, page
        text = page.body.decode()
        assert 'id="connection-facts"' in text and "ctf-conn" in text and 'data-series="connection"' in text
        series = Mgmt(server, None).call("GET", f"/rates.json?object=connections/{record['id']}", headers=session)
        assert set(json.loads(series.body)) >= {"t"}
        watcher = login(server, "watcher", "pw")  # monitoring: it sees every connection
        assert Mgmt(server, None).call("GET", f"/connections/{record['id']}", headers=watcher).status == 200
    finally:
        conn.close()
    assert Mgmt(server, None).call("GET", "/connections/999999", headers=login(server, "guest", "guest")).status == 404
