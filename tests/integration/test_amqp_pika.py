"""pika against the AMQP gateway: BlockingConnection with publisher confirms, basic_get,
basic_consume, basic.return with and without confirms; SelectConnection driving its
own ioloop through publish, consume, ack and a clean close."""

from __future__ import annotations

import functools
from typing import Any

import pika  # type: ignore[import-untyped]
import pika.exceptions  # type: ignore[import-untyped]
import pytest
from pika.channel import Channel  # type: ignore[import-untyped]
from pika.spec import Basic, BasicProperties  # type: ignore[import-untyped]

from tests.integration import amqp_target
from tests.integration.amqp_target import AmqpBroker, unique

amqp_broker = amqp_target.amqp_broker  # the fixture, by the name tests ask for

PERSISTENT = pika.DeliveryMode.Persistent.value  # 2


def parameters(broker: AmqpBroker) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        host=broker.host, port=broker.port, credentials=pika.PlainCredentials("guest", "guest"),
        connection_attempts=1, socket_timeout=5, stack_timeout=15, blocked_connection_timeout=15,
    )


def test_blocking_publish_confirms_get_and_consume(amqp_broker: AmqpBroker) -> None:
    connection = pika.BlockingConnection(parameters(amqp_broker))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        q = unique("pika.blocking")
        declared = channel.queue_declare(q, durable=True)
        assert declared.method.queue == q and declared.method.message_count == 0
        for i in range(20):  # with confirms, basic_publish returns once the broker acked
            channel.basic_publish("", q, f"m{i}".encode(),
                                  BasicProperties(delivery_mode=PERSISTENT, headers={"i": i}))
        assert channel.queue_declare(q, passive=True).method.message_count == 20

        method, props, body = channel.basic_get(q, auto_ack=False)
        assert isinstance(method, Basic.GetOk)
        assert (body, method.message_count, method.redelivered) == (b"m0", 19, False)
        assert props.headers == {"i": 0} and props.delivery_mode == PERSISTENT
        channel.basic_ack(method.delivery_tag)
        held, _, body = channel.basic_get(q, auto_ack=False)  # never acked
        assert isinstance(held, Basic.GetOk) and body == b"m1"
        got = []
        for method, props, body in channel.consume(q, inactivity_timeout=2):
            if method is None:
                break
            got.append((body, props.headers["i"], method.redelivered))
            channel.basic_ack(method.delivery_tag)
        channel.cancel()
        # m1 is held unacked by this channel: the consumer saw m2..m19
        assert got == [(f"m{i}".encode(), i, False) for i in range(2, 20)]
        channel.close()  # m1 goes back to the queue
        channel = connection.channel()
        method, _, body = channel.basic_get(q, auto_ack=True)
        assert isinstance(method, Basic.GetOk) and (body, method.redelivered) == (b"m1", True)
        assert channel.basic_get(q) == (None, None, None)  # get-empty
        channel.queue_delete(q)
    finally:
        connection.close()


def test_blocking_unroutable_mandatory(amqp_broker: AmqpBroker) -> None:
    connection = pika.BlockingConnection(parameters(amqp_broker))
    try:
        ex = unique("pika.nowhere")
        # with confirms: basic.return (then basic.ack) makes basic_publish raise
        channel = connection.channel()
        channel.exchange_declare(ex, "direct", auto_delete=True)
        channel.confirm_delivery()
        with pytest.raises(pika.exceptions.UnroutableError) as unroutable:
            channel.basic_publish(ex, "no.route", b"lost", mandatory=True)
        (returned,) = unroutable.value.messages
        assert returned.body == b"lost"
        assert (returned.method.reply_code, returned.method.reply_text) == (312, "NO_ROUTE")
        channel.basic_publish(ex, "no.route", b"dropped", mandatory=False)  # confirmed, dropped

        # without confirms: only the on-return callback
        plain = connection.channel()
        returns: list[tuple[Basic.Return, bytes]] = []
        plain.add_on_return_callback(lambda _ch, method, _props, body: returns.append((method, body)))
        plain.basic_publish(ex, "no.route", b"lost2", mandatory=True)
        deadline = 50
        while not returns and deadline:
            connection.process_data_events(time_limit=0.1)
            deadline -= 1
        assert [(m.reply_code, m.exchange, m.routing_key, b) for m, b in returns] == [
            (312, ex, "no.route", b"lost2")]
    finally:
        connection.close()


def test_select_connection_publish_consume_close(amqp_broker: AmqpBroker) -> None:
    """The callback style: every step chained from the previous one's reply."""
    count = 5
    q = unique("pika.select")
    state: dict[str, Any] = {"confirmed": [], "received": [], "error": None, "closed_by": None}
    bodies = [f"s{i}".encode() for i in range(count)]

    def fail(connection: pika.SelectConnection, why: str) -> None:
        state["error"] = state["error"] or why
        if connection.is_open:
            connection.close()
        else:
            connection.ioloop.stop()

    def on_open(connection: pika.SelectConnection) -> None:
        connection.channel(on_open_callback=functools.partial(on_channel, connection))

    def on_channel(connection: pika.SelectConnection, channel: Channel) -> None:
        channel.add_on_close_callback(lambda _ch, reason: (
            None if state["closed_by"] else fail(connection, f"channel closed: {reason!r}")))
        channel.confirm_delivery(
            lambda frame: (state["confirmed"].append(frame.method), close_when_done(channel)),
            callback=lambda _frame: channel.queue_declare(
                q, auto_delete=True, callback=lambda _ok: publish(channel)),
        )

    def publish(channel: Channel) -> None:
        for b in bodies:
            channel.basic_publish("", q, b, BasicProperties(content_type="text/plain"))
        channel.basic_qos(prefetch_count=2, callback=lambda _ok: channel.basic_consume(
            q, functools.partial(on_message, channel)))

    def on_message(channel: Channel, _ch: Channel, method: Basic.Deliver,
                   props: BasicProperties, body: bytes) -> None:
        state["received"].append((body, props.content_type, method.redelivered))
        channel.basic_ack(method.delivery_tag)
        close_when_done(channel)

    def close_when_done(channel: Channel) -> None:
        # a delivery may overtake its publish confirm (RabbitMQ's too), so wait for both
        confirmed = max((m.delivery_tag for m in state["confirmed"]), default=0)
        if len(state["received"]) == count and confirmed == count and not state["closed_by"]:
            state["closed_by"] = "us"
            channel.connection.close()

    connection = pika.SelectConnection(
        parameters(amqp_broker), on_open_callback=on_open,
        on_open_error_callback=lambda conn, err: fail(conn, f"open failed: {err!r}"),
        on_close_callback=lambda conn, reason: conn.ioloop.stop(),
    )
    connection.ioloop.call_later(30, lambda: fail(connection, "timed out after 30 s"))
    connection.ioloop.start()
    connection.ioloop.close()

    assert state["error"] is None, state
    assert state["received"] == [(b, "text/plain", False) for b in bodies]
    # five confirms, basic.ack each (or fewer, with multiple=True covering several)
    assert all(isinstance(m, Basic.Ack) for m in state["confirmed"]), state["confirmed"]
    assert max(m.delivery_tag for m in state["confirmed"]) == count
    assert connection.is_closed
