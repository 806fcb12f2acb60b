"""logbus's additions to the AMQP queue model, with aio-pika against a real `logbus serve`
(docs/consumption.md): RabbitMQ's delayed-message exchange (type ``x-delayed-message``,
header ``x-delay``), a consumer argument for an invisible time (``x-invisible-time``:
an unacked delivery whose time lapses is redelivered to another consumer, and the
channel stays open), and a queue's retry backoff (``x-retry-backoff``)."""

from __future__ import annotations

import asyncio
import time
from typing import Iterator

import aio_pika
import pytest
from aio_pika.abc import AbstractIncomingMessage
from aiormq.exceptions import ChannelPreconditionFailed

from tests.integration.amqp_target import run
from tests.serverproc import LogbusServer, module_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "amqp-delay")


def url(server: LogbusServer) -> str:
    host, port = server.host_port("amqp")
    return f"amqp://guest:guest@{host}:{port}/"


def test_x_delay_on_a_delayed_message_exchange(server: LogbusServer) -> None:
    async def body() -> None:
        async with await aio_pika.connect(url(server), timeout=10) as connection:
            channel = await connection.channel(publisher_confirms=True)
            ex = await channel.declare_exchange("later", "x-delayed-message", durable=True,
                                                arguments={"x-delayed-type": "direct"})
            q = await channel.declare_queue("later-q", durable=True)
            await q.bind(ex, "k")
            got: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

            async def on_message(m: AbstractIncomingMessage) -> None:
                got.put_nowait((time.monotonic(), m.body))
                await m.ack()

            await q.consume(on_message)
            await ex.publish(aio_pika.Message(b"now"), "k")
            sent = time.monotonic()
            await ex.publish(aio_pika.Message(b"in 2 s", headers={"x-delay": 2000}), "k")
            at, first = await asyncio.wait_for(got.get(), 5)
            assert first == b"now" and at - sent < 1.0
            at, second = await asyncio.wait_for(got.get(), 5)
            assert second == b"in 2 s"
            assert 2.0 <= at - sent <= 2.1, at - sent

            with pytest.raises(ChannelPreconditionFailed):
                bad = await connection.channel()
                await bad.declare_exchange("nodelaytype", "x-delayed-message")

    run(body())


def test_a_lapsed_invisible_time_redelivers_to_another_consumer(server: LogbusServer) -> None:
    async def body() -> None:
        async with await aio_pika.connect(url(server), timeout=10) as connection:
            slow = await connection.channel()
            await slow.set_qos(prefetch_count=1)
            fast = await connection.channel()
            q = await slow.declare_queue("lapse-q")
            seen: asyncio.Queue[tuple[str, AbstractIncomingMessage]] = asyncio.Queue()

            async def hold(m: AbstractIncomingMessage) -> None:
                seen.put_nowait(("slow", m))  # never acked

            await q.consume(hold, arguments={"x-invisible-time": 300})
            await slow.default_exchange.publish(aio_pika.Message(b"job"), "lapse-q")
            who, first = await asyncio.wait_for(seen.get(), 5)
            assert who == "slow" and not first.redelivered

            fast_q = await fast.get_queue("lapse-q")

            async def work(m: AbstractIncomingMessage) -> None:
                seen.put_nowait(("fast", m))
                await m.ack()

            await fast_q.consume(work)
            who, again = await asyncio.wait_for(seen.get(), 5)
            assert (who, again.body, again.redelivered) == ("fast", b"job", True)
            await first.ack()  # its lease lapsed: a late ack settles nothing and closes nothing
            await asyncio.sleep(0.2)
            assert not slow.is_closed and not fast.is_closed
            assert seen.empty()

            with pytest.raises(ChannelPreconditionFailed):
                bad = await connection.channel()
                bad_q = await bad.get_queue("lapse-q")
                await bad_q.consume(hold, arguments={"x-invisible-time": -1})

    run(body())


def test_retry_backoff_queue_argument(server: LogbusServer) -> None:
    async def body() -> None:
        async with await aio_pika.connect(url(server), timeout=10) as connection:
            channel = await connection.channel()
            q = await channel.declare_queue("backoff-q", arguments={"x-retry-backoff": "300ms",
                                                                    "x-delivery-limit": 1})
            await channel.default_exchange.publish(aio_pika.Message(b"b"), "backoff-q")
            m = await q.get(timeout=5)
            assert m is not None
            given_back = time.monotonic()
            await m.nack(requeue=True)
            assert await q.get(fail=False) is None  # scheduled, not ready
            while True:
                again = await q.get(fail=False)
                if again is not None:
                    break
                await asyncio.sleep(0.02)
            assert time.monotonic() - given_back >= 0.3 and again.redelivered
            await again.nack(requeue=True)  # past x-delivery-limit 1: dropped (no dead-letter exchange)
            await asyncio.sleep(0.5)
            assert await q.get(fail=False) is None

    run(body())
