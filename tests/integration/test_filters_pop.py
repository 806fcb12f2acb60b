"""Filters on pop groups (receive parameters ``filter_tag`` and ``filter_sql``;
docs/filters.md) against a real ``logbus serve``, over HTTP and the CLI: two groups on
one topic with different filters each get exactly their messages, published over HTTP
(headers) and AMQP (typed headers, ``x-tag``); a group's filter survives a restart; a
bad filter is a 400 ``invalid_request`` naming the position."""

from __future__ import annotations

from typing import Any

import aio_pika

from tests.integration.amqp_target import run
from tests.integration.mgmt import Mgmt, Reply
from tests.integration.mqtt_clients import unique
from tests.serverproc import LogbusServer


def call(server: LogbusServer, method: str, path: str, body: Any = None) -> Reply:
    return Mgmt(server).call(method, path, body)


def receive(server: LogbusServer, group: str, topic: str, **filters: str) -> list[str]:
    reply = call(server, "POST", f"/api/pop/{group}/{topic}/receive", {"max": 100, **filters})
    assert reply.status == 200, reply
    return sorted(m["value"] for m in reply.json()["messages"])


def publish_http(server: LogbusServer, topic: str, items: list[tuple[str, dict[str, str]]]) -> None:
    reply = call(server, "POST", f"/api/topics/{topic}/messages",
                 {"messages": [{"value": v, "headers": h} for v, h in items]})
    assert reply.status == 200, reply


def test_two_groups_on_one_topic_with_different_filters(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "mqtt": "off"})
    topic = unique("orders")
    assert call(server, "POST", "/api/topics", {"name": topic}).status == 201
    assert receive(server, "big", topic, filter_sql="total >= 100") == []  # creates the groups
    assert receive(server, "eu", topic, filter_tag="EU") == []
    assert receive(server, "all", topic) == []
    publish_http(server, topic, [("small-eu", {"total": "5", "tag": "EU"}), ("big-us", {"total": "500", "tag": "US"}),
                                 ("big-eu", {"total": "100.5", "tag": "EU"}), ("none", {})])

    async def amqp() -> None:  # an exchange backed by the topic: AMQP publishes land in it
        host, port = server.host_port("amqp")
        conn = await aio_pika.connect(f"amqp://guest:guest@{host}:{port}/")
        try:
            ch = await conn.channel()
            x = await ch.declare_exchange(topic, "topic", durable=True)  # backed by the topic of its name
            await x.publish(aio_pika.Message(b"amqp-big-eu", headers={"total": 1000, "x-tag": "EU"}), "k")
            await x.publish(aio_pika.Message(b"amqp-small", headers={"total": 1}), "k")
        finally:
            await conn.close()

    run(amqp())
    reply = call(server, "POST", f"/api/topics/{topic}/messages",  # the tag field of an HTTP publish
                 {"messages": [{"value": "field-eu", "tag": "EU"}, {"value": "field-us", "tag": "US"}]})
    assert reply.status == 200, reply
    assert receive(server, "big", topic) == ["amqp-big-eu", "big-eu", "big-us"]
    assert receive(server, "eu", topic) == ["amqp-big-eu", "big-eu", "field-eu", "small-eu"]
    assert len(receive(server, "all", topic)) == 8
    # the filters are kept with the groups
    server.restart(same_ports=True)
    publish_http(server, topic, [("after-big", {"total": "101"}), ("after-small", {"total": "1"})])
    assert receive(server, "big", topic) == ["after-big"]
    assert receive(server, "eu", topic) == []
    # a receive naming another filter replaces the group's
    assert receive(server, "big", topic, filter_sql="total < 10") == []
    publish_http(server, topic, [("now-small", {"total": "2"}), ("now-big", {"total": "200"})])
    assert receive(server, "big", topic) == ["now-small"]


def test_bad_filter_is_400(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "mqtt": "off", "amqp": "off"})
    topic = unique("t")
    assert call(server, "POST", "/api/topics", {"name": topic}).status == 201
    for body, words in [({"filter_sql": "total >"}, "filter_sql: expected a name, a literal or (, found the end"),
                        ({"filter_tag": "A ||"}, "filter_tag: an empty tag"),
                        ({"filter_sql": 5}, "filter_sql: must be text")]:
        reply = call(server, "POST", f"/api/pop/g/{topic}/receive", body)
        assert reply.status == 400, reply
        assert reply.json()["error"] == "invalid_request" and words in reply.json()["message"], reply
    assert call(server, "GET", "/api/pop").json() == []  # no group was made by a refused receive
