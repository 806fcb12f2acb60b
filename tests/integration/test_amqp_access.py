"""Users, vhosts and permissions as RabbitMQ's clients see them, against a real `logbus
serve` configured over its HTTP management API: logins, vhost access (530), permission
denials (403 on the channel, the connection goes on), changed permissions applying to open
channels, isolated vhosts with their own log topics, and connections closed (320) when
their vhost or user is deleted. The texts are RabbitMQ 3.10's, checked against it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import aio_pika
import aiormq
import pika  # type: ignore[import-untyped]
import pika.exceptions  # type: ignore[import-untyped]
import pytest
from aiormq import spec
from aiormq.exceptions import (
    ChannelAccessRefused,
    ConnectionClosed,
    InvalidFrameError,
    ProbableAuthenticationError,
)

from tests.integration.amqp_target import run, unique
from tests.integration.mgmt import Mgmt, q
from tests.serverproc import LogbusServer, module_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "amqp-access")


@pytest.fixture(scope="module")
def mgmt(server: LogbusServer) -> Mgmt:
    return Mgmt(server)


def params(server: LogbusServer, user: str, password: str, vhost: str = "/") -> pika.ConnectionParameters:
    host, port = server.host_port("amqp")
    return pika.ConnectionParameters(host=host, port=port, virtual_host=vhost,
                                     credentials=pika.PlainCredentials(user, password), connection_attempts=1,
                                     socket_timeout=5, stack_timeout=15, blocked_connection_timeout=15)


def url(server: LogbusServer, user: str, password: str, vhost: str) -> str:
    host, port = server.host_port("amqp")
    return f"amqp://{user}:{password}@{host}:{port}/{q(vhost)}"


def setup(mgmt: Mgmt, vhost: str, user: str, password: str = "pw", **perms: str) -> None:
    mgmt.add_vhost(vhost)
    mgmt.add_user(user, password)
    mgmt.grant(vhost, user, **perms)


def refused(call: Callable[[], Any]) -> str:
    """Run a pika call that must close its channel with 403; the reply text."""
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        call()
    assert err.value.reply_code == 403, err.value
    return str(err.value.reply_text)


# -- connecting ------------------------------------------------------------------------------------


def test_a_user_created_over_http_connects_and_works(server: LogbusServer, mgmt: Mgmt) -> None:
    vhost, user = unique("works"), unique("alice")
    setup(mgmt, vhost, user, "s3cret")
    connection = pika.BlockingConnection(params(server, user, "s3cret", vhost))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("jobs", durable=True)
        channel.basic_publish("", "jobs", b"hello")
        method, _, body = channel.basic_get("jobs", auto_ack=True)
        assert body == b"hello" and method.exchange == ""
    finally:
        connection.close()


def test_wrong_password_or_unknown_user_is_access_refused(server: LogbusServer, mgmt: Mgmt) -> None:
    vhost, user = unique("login"), unique("bob")
    setup(mgmt, vhost, user, "right")
    text = "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile."
    for who, password in ((user, "wrong"), ("nobody", "right")):
        with pytest.raises(pika.exceptions.ProbableAuthenticationError) as err:
            pika.BlockingConnection(params(server, who, password, vhost))
        assert text in str(err.value)

    async def body() -> None:
        with pytest.raises(ProbableAuthenticationError) as err:
            await aio_pika.connect(url(server, user, "wrong", vhost), timeout=10)
        assert text in str(err.value)

    run(body())


def test_vhost_not_permitted_or_not_found_is_530(server: LogbusServer, mgmt: Mgmt) -> None:
    vhost, user = unique("mine"), unique("carol")
    setup(mgmt, vhost, user)
    mgmt.add_vhost("not-mine")
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as err:
        pika.BlockingConnection(params(server, user, "pw", "not-mine"))
    assert f"(530) \"NOT_ALLOWED - access to vhost 'not-mine' refused for user '{user}'\"" in str(err.value)
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as err:
        pika.BlockingConnection(params(server, user, "pw", "no-such-vhost"))
    assert "(530) 'NOT_ALLOWED - vhost no-such-vhost not found'" in str(err.value)

    async def body() -> None:
        # aiormq (as with RabbitMQ) reports a Close in answer to Open as an unexpected frame
        with pytest.raises(InvalidFrameError, match="Connection.OpenOk.*got <Connection.Close"):
            await aio_pika.connect(url(server, user, "pw", "not-mine"), timeout=10)
        async with await aio_pika.connect(url(server, user, "pw", vhost), timeout=10) as ok:
            assert not ok.is_closed

    run(body())


# -- permissions -----------------------------------------------------------------------------------


def test_denied_operations_close_the_channel_not_the_connection(server: LogbusServer, mgmt: Mgmt) -> None:
    vhost, user = unique("perms"), unique("dave")
    setup(mgmt, vhost, user, configure="^cfg", write="^(wr|cfg)", read="^rd")
    rs = f"in vhost '{vhost}' refused for user '{user}'"
    connection = pika.BlockingConnection(params(server, user, "pw", vhost))
    try:
        assert refused(lambda: connection.channel().exchange_declare("x", "direct")) == \
            f"ACCESS_REFUSED - access to exchange 'x' {rs}"
        assert refused(lambda: connection.channel().queue_declare("q")) == \
            f"ACCESS_REFUSED - access to queue 'q' {rs}"
        assert refused(lambda: connection.channel().queue_declare("")).startswith(
            "ACCESS_REFUSED - access to queue 'amq.gen-")  # server-named queues are checked too
        ch = connection.channel()
        ch.exchange_declare("cfgx", "direct")
        ch.queue_declare("cfgq")
        ch.queue_declare("cfgq", passive=True)  # passive: no check
        assert refused(lambda: ch.queue_bind("cfgq", "cfgx", "k")) == \
            f"ACCESS_REFUSED - access to exchange 'cfgx' {rs}"  # write on cfgq passed; read on cfgx
        publisher = connection.channel()
        publisher.confirm_delivery()
        publisher.basic_publish("cfgx", "k", b"allowed")  # write on cfgx
        assert refused(lambda: publisher.basic_publish("", "cfgq", b"no")) == \
            f"ACCESS_REFUSED - access to exchange 'amq.default' {rs}"
        assert refused(lambda: connection.channel().basic_get("cfgq")) == f"ACCESS_REFUSED - access to queue 'cfgq' {rs}"
        assert refused(lambda: connection.channel().queue_purge("cfgq")).endswith(f"queue 'cfgq' {rs}")
        assert refused(lambda: connection.channel().basic_consume("cfgq", lambda *a: None)).endswith(
            f"queue 'cfgq' {rs}")
        assert refused(lambda: connection.channel().exchange_delete("nope")).endswith(f"exchange 'nope' {rs}")
        assert refused(lambda: connection.channel().queue_delete("nope")).endswith(f"queue 'nope' {rs}")
        last = connection.channel()
        assert refused(lambda: last.basic_publish("nope", "k", b"x") or last.basic_qos(prefetch_count=1)) == \
            f"ACCESS_REFUSED - access to exchange 'nope' {rs}"  # checked before the exchange is looked up
        assert connection.is_open
        ch = connection.channel()
        ch.queue_delete("cfgq")
        ch.exchange_delete("cfgx")
    finally:
        connection.close()


def test_changed_permissions_apply_to_open_channels(server: LogbusServer, mgmt: Mgmt) -> None:
    """The publish check is cached per exchange in the channel: a change must drop it."""
    vhost, user = unique("change"), unique("erin")
    setup(mgmt, vhost, user)
    connection = pika.BlockingConnection(params(server, user, "pw", vhost))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("inbox")
        for _ in range(3):
            channel.basic_publish("", "inbox", b"cached")  # allowed, then from the cache
        mgmt.grant(vhost, user, write="^other$")
        assert refused(lambda: channel.basic_publish("", "inbox", b"no longer")) == \
            f"ACCESS_REFUSED - access to exchange 'amq.default' in vhost '{vhost}' refused for user '{user}'"
        reader = connection.channel()
        assert reader.queue_declare("inbox", passive=True).method.message_count == 3
        mgmt.grant(vhost, user)  # all back: a new channel publishes again
        again = connection.channel()
        again.confirm_delivery()
        again.basic_publish("", "inbox", b"back")
        mgmt.ok("DELETE", f"/api/permissions/{q(vhost)}/{user}")
        assert refused(lambda: again.basic_get("inbox")).endswith("refused for user " f"'{user}'")
        assert connection.is_open  # cleared permissions deny from the next operation, no disconnect
    finally:
        connection.close()


# -- vhosts ----------------------------------------------------------------------------------------


def test_two_vhosts_are_isolated_and_log_to_their_own_topics(server: LogbusServer, mgmt: Mgmt) -> None:
    user = unique("frank")
    mgmt.add_user(user, "pw")
    vhosts = [unique("iso-a"), unique("iso/b")]
    for v in vhosts:
        mgmt.add_vhost(v)
        mgmt.grant(v, user)

    async def body() -> None:
        for i, v in enumerate(vhosts):  # the same names in each vhost
            async with await aio_pika.connect(url(server, user, "pw", v), timeout=10) as connection:
                channel = await connection.channel()
                ex = await channel.declare_exchange("events", aio_pika.ExchangeType.FANOUT, durable=True)
                queue = await channel.declare_queue("events-q", durable=True)
                await queue.bind(ex)
                for n in range(i + 1):
                    await ex.publish(aio_pika.Message(f"{v}:{n}".encode()), "", timeout=10)
        for i, v in enumerate(vhosts):
            async with await aio_pika.connect(url(server, user, "pw", v), timeout=10) as connection:
                channel = await connection.channel()
                queue = await channel.declare_queue("events-q", passive=True)
                got = []
                while (m := await queue.get(no_ack=True, fail=False, timeout=10)) is not None:
                    got.append(m.body.decode())
                assert got == [f"{v}:{n}" for n in range(i + 1)]

    run(body())
    for i, v in enumerate(vhosts):
        topic = mgmt.ok("GET", f"/api/topics/{q(q(v) + '@events')}").json()  # vhost "a/b": "a%2Fb@events"
        assert sum(p["log_end_offset"] for p in topic["partition_detail"]) == i + 1
    assert mgmt.call("GET", "/api/topics/events").status == 404  # nothing in vhost "/"


def test_deleting_a_vhost_or_user_closes_their_connections_with_320(server: LogbusServer, mgmt: Mgmt) -> None:
    vhost, user, other = unique("doomed"), unique("gina"), unique("hank")
    setup(mgmt, vhost, user)
    mgmt.add_user(other, "pw")
    mgmt.grant("/", other)

    async def body() -> None:
        in_vhost = await aio_pika.connect(url(server, user, "pw", vhost), timeout=10)
        as_other = await aio_pika.connect(url(server, other, "pw", "/"), timeout=10)
        channel = await in_vhost.channel()
        await channel.declare_queue("work", durable=True)
        closed: dict[str, Any] = {}
        in_vhost.close_callbacks.add(lambda _c, exc: closed.setdefault("vhost", exc))
        as_other.close_callbacks.add(lambda _c, exc: closed.setdefault("user", exc))
        await asyncio.to_thread(mgmt.ok, "DELETE", f"/api/vhosts/{q(vhost)}")
        await asyncio.to_thread(mgmt.ok, "DELETE", f"/api/users/{other}")
        deadline = time.monotonic() + 10
        while len(closed) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert isinstance(closed["vhost"], ConnectionClosed)
        assert closed["vhost"].args[:2] == (320, f"CONNECTION_FORCED - vhost '{vhost}' is deleted")
        assert closed["user"].args[:2] == (320, f"CONNECTION_FORCED - user '{other}' is deleted")

    run(body())
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError, match="not found"):
        pika.BlockingConnection(params(server, user, "pw", vhost))
    mgmt.add_vhost(vhost)  # again: empty, and the user needs permissions again
    mgmt.grant(vhost, user)
    connection = pika.BlockingConnection(params(server, user, "pw", vhost))
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="no queue 'work'"):
            connection.channel().queue_declare("work", passive=True)
    finally:
        connection.close()


def test_vhost_user_and_queued_messages_survive_a_restart(logbus_server: Any) -> None:
    server: LogbusServer = logbus_server()
    mgmt = Mgmt(server)
    setup(mgmt, "stays", "ivan", "pw", configure="^q$", write=".*", read="^q$")
    connection = pika.BlockingConnection(params(server, "ivan", "pw", "stays"))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("q", durable=True)
        channel.basic_publish("", "q", b"persisted", pika.BasicProperties(delivery_mode=2))
    finally:
        connection.close()
    server.restart()
    connection = pika.BlockingConnection(params(server, "ivan", "pw", "stays"))
    try:
        channel = connection.channel()
        _, _, body = channel.basic_get("q", auto_ack=True)
        assert body == b"persisted"
        assert refused(lambda: connection.channel().queue_declare("other")).startswith(
            "ACCESS_REFUSED - access to queue 'other' in vhost 'stays'")
    finally:
        connection.close()


def test_aio_pika_denied_publish_is_403_and_the_connection_goes_on(server: LogbusServer, mgmt: Mgmt) -> None:
    vhost, user = unique("aio"), unique("judy")
    setup(mgmt, vhost, user, write="^allowed$")

    async def body() -> None:
        async with await aio_pika.connect(url(server, user, "pw", vhost), timeout=10) as connection:
            channel = await connection.channel()
            await channel.declare_exchange("allowed", aio_pika.ExchangeType.FANOUT)
            await channel.declare_exchange("denied", aio_pika.ExchangeType.FANOUT)
            ex = await channel.get_exchange("denied")
            with pytest.raises(ChannelAccessRefused) as err:
                await ex.publish(aio_pika.Message(b"x"), "", timeout=10)
            assert str(err.value) == f"ACCESS_REFUSED - access to exchange 'denied' in vhost '{vhost}' " \
                                     f"refused for user '{user}'"
            again = await connection.channel()
            allowed = await again.get_exchange("allowed")
            await allowed.publish(aio_pika.Message(b"ok"), "", timeout=10)

    run(body())


# -- connection.update-secret ----------------------------------------------------------------------


def test_update_secret_is_answered_and_the_connection_goes_on(server: LogbusServer, mgmt: Mgmt) -> None:
    """aiormq and pika refresh a token with connection.update-secret: RabbitMQ answers
    update-secret-ok (its internal user store keeps the login's credentials) and the
    connection and its channels go on."""
    vhost, user = unique("secret"), unique("token-user")
    setup(mgmt, vhost, user)

    async def body() -> None:
        connection = await aiormq.connect(url(server, user, "pw", vhost))
        try:
            channel = await connection.channel()
            await channel.queue_declare("refreshed")
            ok = await connection.update_secret("pw", reason="token refresh", timeout=10)
            assert isinstance(ok, spec.Connection.UpdateSecretOk)
            await channel.basic_publish(b"after", routing_key="refreshed")
            got = await channel.basic_get("refreshed", no_ack=True)
            assert got.body == b"after"
        finally:
            await connection.close()

    run(body())

    blocking = pika.BlockingConnection(params(server, user, "pw", vhost))
    try:
        blocking.update_secret("pw", "token refresh")
        channel = blocking.channel()
        assert channel.queue_declare("refreshed", passive=True).method.message_count == 0
    finally:
        blocking.close()


def test_topic_permissions_restrict_routing_and_binding_keys(server: LogbusServer, mgmt: Mgmt) -> None:
    """RabbitMQ's topic authorisation: on a topic exchange a user has a topic permission
    for, a publish's routing key must match ``write`` and a binding key ``read``; other
    exchanges (and a direct one named in a topic permission) are not restricted."""
    vhost, user = unique("topics"), unique("erin")
    setup(mgmt, vhost, user)
    for exchange in ("amq.topic", "amq.direct"):
        mgmt.ok("PUT", f"/api/topic-permissions/{q(vhost)}/{q(user)}",
                {"exchange": exchange, "write": r"^a\.", "read": r"^b\."})
    rs = f"in vhost '{vhost}' refused for user '{user}'"
    connection = pika.BlockingConnection(params(server, user, "pw", vhost))
    try:
        ch = connection.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", "a.x", b"ok")
        ch.basic_publish("amq.direct", "c.x", b"not a topic exchange")
        ch.basic_publish("amq.fanout", "c.x", b"no topic permission there")
        text = refused(lambda: ch.basic_publish("amq.topic", "c.x", b"no"))
        assert text == f"ACCESS_REFUSED - write access to topic 'c.x' in exchange 'amq.topic' {rs}"
        ch = connection.channel()
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(queue, "amq.topic", "b.#")
        ch.queue_unbind(queue, "amq.topic", "b.#")
        ch.queue_bind(queue, "amq.direct", "anything")
        text = refused(lambda: ch.queue_bind(queue, "amq.topic", "a.#"))
        assert text == f"ACCESS_REFUSED - read access to topic 'a.#' in exchange 'amq.topic' {rs}"
        ch = connection.channel()  # the connection goes on
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", "a.y", b"ok again")
    finally:
        connection.close()
