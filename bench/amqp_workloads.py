"""The four workloads of bench/amqp_bench.py: publish, consume, fanout, latency. Each takes
a fresh Run (amqp_client.py) and returns its figures as a dict for the output JSON."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import aio_pika
import amqp_raw
from amqp_client import (
    ConfirmWindow,
    ConsumerProcess,
    Drain,
    Run,
    percentiles_ms,
    persistent,
    round_trip,
)
from common import LATENCY_HEAD, BenchError, Meter, slowest

MIN_SLEEP_S = 0.001  # the latency publisher's shortest sleep: uvloop's timer resolution


async def w_publish(run: Run) -> dict[str, Any]:
    a = run.args
    ch = await run.channel(await run.connect(), confirms=True)
    q = await run.queue(ch, "work")
    message = persistent(os.urandom(a.size))
    window = ConfirmWindow(ch.default_exchange, a.window, run.progress)
    meter = Meter(run.pid)
    try:
        for _ in range(a.messages):
            run.check()
            await window.publish(message, q.name)
        await run.until(window.drain())
    finally:
        window.cancel()
    out = meter.stop(a.messages, "msg", "msgs")
    ready = await round_trip(ch, q.name)
    if ready != a.messages:
        raise BenchError(f"{a.messages} confirmed but the queue holds {ready}")
    return out


async def w_consume(run: Run, queue: str) -> dict[str, Any]:
    a = run.args
    run.queues.append(queue)  # deleted at the end of this workload
    ch = await run.channel(await run.connect(), prefetch=a.prefetch)
    q = await ch.declare_queue(queue, passive=True)
    drain = Drain(a.messages, run.progress, "acked")
    meter = Meter(run.pid)
    tag = await q.consume(drain, no_ack=False)
    await run.until(drain.done.wait())
    await round_trip(ch, queue)
    out = meter.stop(a.messages, "msg", "msgs")
    await q.cancel(tag)
    left = await round_trip(ch, queue)
    if left or drain.redelivered:
        raise BenchError(f"{left} messages left in the queue, {drain.redelivered} redelivered")
    return out


async def w_fanout(run: Run) -> dict[str, Any]:
    a = run.args
    sch = await run.channel(await run.connect())
    name = f"{run.prefix}.fanout"
    run.exchanges.append(name)
    exchange = await sch.declare_exchange(name, aio_pika.ExchangeType.FANOUT, durable=True)
    queues = []
    for i in range(a.fanout_queues):
        q = await run.queue(sch, f"fanout.{i}")
        await q.bind(exchange)
        queues.append(q.name)
    pch = await run.channel(await run.connect(), confirms=True)
    window = ConfirmWindow(await pch.get_exchange(name, ensure=False), a.window, run.progress)
    message = persistent(os.urandom(a.size))
    consumers = ConsumerProcess(run, queues, a.fanout_messages)
    try:
        await run.until(consumers.expect("ready"))
        meter = Meter(run.pid)
        try:
            for _ in range(a.fanout_messages):
                run.check()
                await window.publish(message, "")
            await run.until(window.drain())
        finally:
            window.cancel()
        published = time.perf_counter() - meter.t0
        child_cpu = await run.until(consumers.expect("drained"))
        out = meter.stop(a.fanout_messages * len(queues), "delivery", "deliveries", child_cpu)
        await run.until(consumers.expect("done"))
    finally:
        consumers.stop()
    out.update({"messages": a.fanout_messages, "queues": len(queues),
                "publish_seconds": published,
                "published_msgs_per_s": a.fanout_messages / published})
    return out


async def w_latency(run: Run) -> dict[str, Any]:
    a = run.args
    rate = a.latency_rate
    warmup = round(rate * a.latency_warmup)
    total = warmup + round(rate * a.latency_seconds)
    if total == warmup:
        raise BenchError("nothing to measure (--latency-rate x --latency-seconds < 1)")
    q = await run.queue(await run.channel(await run.connect()), "latency")
    pad = bytes(max(0, a.size - LATENCY_HEAD.size))
    raw = a.latency_client == "raw"
    if raw:  # the cheap client (bench/amqp_raw.py): the broker, not the clients, is measured
        conn = await amqp_raw.connect(run.url, a.timeout)
        publisher = amqp_raw.RawPublisher(conn, q.name, len(LATENCY_HEAD.pack(0, 0, 0) + pad), a.window)
        await publisher.start(a.timeout)
    else:
        pch = await run.channel(await run.connect(), confirms=True)
        window = ConfirmWindow(pch.default_exchange, a.window, run.progress)
    lag_max = 0
    consumer = ConsumerProcess(run, [q.name], total, warmup, amqp_raw.consumer_main if raw else None)
    try:
        await run.until(consumer.expect("ready"))
        meter = Meter(run.pid)
        # Paced without drift: message i is due at t0 + i/rate. After each wake-up every
        # message already due is sent, then we sleep until the next one is due.
        t0 = time.monotonic_ns()
        period_ns = 1e9 / rate
        sent = 0
        try:
            while sent < total:
                due_now = min(total, int((time.monotonic_ns() - t0) / period_ns) + 1)
                while sent < due_now:
                    due = t0 + round(sent * period_ns)
                    stamp = time.monotonic_ns()
                    lag_max = max(lag_max, stamp - due)
                    run.check()
                    body = LATENCY_HEAD.pack(sent, due, stamp) + pad
                    if raw:
                        await publisher.publish(body)
                    else:
                        await window.publish(persistent(body), q.name)
                    sent += 1
                if sent < total:
                    next_due = t0 + sent * period_ns
                    # At least 1 ms: uvloop's timers count whole ms, a shorter sleep
                    # returns at once, and pacing 2,000 msg/s with 0.5 ms sleeps spun a
                    # core (256,000 wake-ups/s). What falls due meanwhile goes at the wake.
                    await asyncio.sleep(max(MIN_SLEEP_S, (next_due - time.monotonic_ns()) / 1e9))
            send_seconds = (time.monotonic_ns() - t0) / 1e9
            await run.until(publisher.drain() if raw else window.drain())
        finally:
            if not raw:
                window.cancel()
        child_cpu = await run.until(consumer.expect("drained"))
        cpu = meter.stop(total, "msg", "msgs", child_cpu)
        result = await run.until(consumer.expect("done"))
    finally:
        consumer.stop()
        if raw:
            await conn.close(a.timeout)
    achieved = total / send_seconds
    return {
        "client": a.latency_client,
        "rate_per_s": rate, "seconds": a.latency_seconds, "warmup_seconds": a.latency_warmup,
        "measured_messages": len(result["latencies"]), "achieved_send_rate_per_s": achieved,
        "rate_kept": achieved >= 0.99 * rate,
        "latency": percentiles_ms(result["latencies"]),
        # from the time each message was due: adds whatever the sender fell behind
        "latency_from_schedule": percentiles_ms(result["from_schedule"]),
        "sender_max_lag_ms": lag_max / 1e6,
        "slowest": slowest(result["latencies"], result["received"]),
        "broker_cpu_us_per_msg": cpu["broker_cpu_us_per_msg"],
        "broker_cpu_percent": cpu["broker_cpu_percent"],
        "client_cpu_us_per_msg": cpu["client_cpu_us_per_msg"],
        "client_consumer_process_cpu_us_per_msg": cpu.get("client_consumer_process_cpu_us_per_msg"),
    }
