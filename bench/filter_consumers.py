"""The consumers workload of bench/filter_bench.py (its docstring says what it measures):
one shared queue, C consumers with or without a filter each, holding what they got while
the publishing is measured. Imported by name from bench/, as amqp_client.py is."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import aio_pika
from amqp_client import ConfirmWindow, Run
from common import BenchError, Meter


class Tally:
    """The consumers' callbacks: each holds the one message its prefetch of 1 lets through,
    until ``release`` acks those and every later one; a wrong kind counts in ``wrong``."""

    def __init__(self, progress: dict[str, int]) -> None:
        self.progress = progress
        progress["acked"] = 0
        self.wrong = 0
        self.held: list[aio_pika.abc.AbstractIncomingMessage] | None = []
        self.until = 0
        self.done = asyncio.Event()

    def consumer(self, want: bytes | None) -> Any:
        async def on_message(m: aio_pika.abc.AbstractIncomingMessage) -> None:
            if want is not None and not m.body.startswith(want):
                self.wrong += 1
            if self.held is not None:
                self.held.append(m)
            else:
                await self.ack(m)
        return on_message

    async def ack(self, m: aio_pika.abc.AbstractIncomingMessage) -> None:
        await m.ack()
        self.progress["acked"] += 1
        if self.progress["acked"] >= self.until:
            self.done.set()

    async def release(self, until: int) -> None:
        held, self.held = self.held or [], None
        self.until = until
        for m in held:
            await self.ack(m)
        if self.progress["acked"] < until:
            await self.done.wait()


async def consumers_config(url: str, pid: int, args: argparse.Namespace, kind: str, c: int,
                           tag: str) -> dict[str, Any]:
    run = Run(url, pid, args)
    try:
        async with asyncio.timeout(args.timeout):
            conn = await run.connect()
            pub = await run.channel(conn, confirms=True)
            name = f"{run.prefix}.{tag}"
            run.exchanges.append(name)
            exchange = await pub.declare_exchange(name, aio_pika.ExchangeType.DIRECT, durable=False)
            run.queues.append(f"{name}.q")
            queue = await pub.declare_queue(f"{name}.q", durable=False)
            await queue.bind(exchange, "work")
            tally = Tally(run.progress)
            for j in range(c):
                ch = await run.channel(conn, prefetch=1)
                q = await ch.get_queue(queue.name, ensure=False)
                filtered = kind == "shared-filtered"
                await q.consume(tally.consumer(f"k{j}:".encode() if filtered else None),
                                arguments={"x-filter-sql": f"kind = 'k{j}'"} if filtered else None)
            messages = [aio_pika.Message(f"k{j}:".encode().ljust(args.size, b"."), headers={"kind": f"k{j}"})
                        for j in range(c)]
            window = ConfirmWindow(exchange, args.window, run.progress)
            try:
                for count in (args.warmup, args.messages):
                    meter = Meter(run.pid)
                    for i in range(count):
                        run.check()
                        await window.publish(messages[i % c], "work")
                    await run.until(window.drain())
                out = meter.stop(args.messages, "msg", "msgs")
            finally:
                window.cancel()
            drain = Meter(run.pid)
            await run.until(tally.release(args.warmup + args.messages))
            out["drain_broker_cpu_us_per_msg"] = drain.stop(args.warmup + args.messages, "msg", "msgs")[
                "broker_cpu_us_per_msg"]
            if tally.wrong:
                raise BenchError(f"{tally.wrong} messages reached a consumer whose filter refuses them")
            left = (await pub.declare_queue(queue.name, passive=True)).declaration_result.message_count
            if left:
                raise BenchError(f"{left} messages left in the queue")
            return {"messages": out.pop("msgs"), **out}
    except TimeoutError:
        raise BenchError(f"{kind}-{c}: not finished within {args.timeout:g} s (progress {run.progress})") from None
    finally:
        await run.close()
