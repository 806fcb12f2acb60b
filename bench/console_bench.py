#!/usr/bin/env python3
"""The web console's cost to a busy broker: broker CPU per message with the console open on
the busy queue's page (Debian's headless Chromium, logged in; the page's live part and
chart reload every 5 s as they do for an operator) against the console closed (the same
browser on about:blank), in rounds that alternate which goes first, as bench/ab_bench.py
does for two builds: this machine's speed drifts by a quarter within minutes, so only the
ratio of two bursts run one after the other is worth reading.

A burst: a pika publisher sends ``--messages`` messages to queue ``busy`` (persistent)
while a pika consumer (prefetch 200, acking each)
drains it; the broker's CPU (user + system, /proc) from the first publish to the last ack,
per message. Before each burst the broker is let go idle (ab_bench's ``quiesce``): what the
last burst deferred, and the page's first load, fall in no burst. ``--pin`` puts the broker on CPU 1, the clients and the browser on CPU 0.

    python bench/console_bench.py --rounds 10 --rate 2000 --seconds 15 --pin

Prints one JSON document: per condition its median CPU per message, the per-round ratios
open/closed and their median and geometric mean (with its 95% interval).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import pika  # type: ignore[import-untyped]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ab_bench import quiesce  # noqa: E402
from common import BenchError, cpu_split, exit_on_sigterm, start_logbus, stop_logbus  # noqa: E402

LOOPBACK = "tcp:0:interface=127.0.0.1"
QUEUE = "busy"


def log(text: str) -> None:
    print(f"console_bench: {text}", file=sys.stderr, flush=True)


def burst(address: str, pid: int, rate: int, seconds: float, timeout: float) -> float:
    """One burst through queue QUEUE: ``rate`` messages a second for ``seconds``, on a
    schedule (a late message goes at once: the rate holds over the burst), drained by the
    consumer as they come; the broker's CPU microseconds per message."""
    messages = int(rate * seconds)
    host, port = address.rsplit(":", 1)
    params = pika.ConnectionParameters(host, int(port), credentials=pika.PlainCredentials("guest", "guest"))
    acked = threading.Event()
    failure: list[BaseException] = []
    ready = threading.Event()

    def consume() -> None:
        try:
            connection = pika.BlockingConnection(params)
            channel = connection.channel()
            channel.basic_qos(prefetch_count=200)
            count = 0

            def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
                nonlocal count
                ch.basic_ack(method.delivery_tag)
                count += 1
                if count == messages:
                    acked.set()

            channel.basic_consume(QUEUE, on_message)
            ready.set()
            deadline = time.monotonic() + timeout
            while not acked.is_set() and time.monotonic() < deadline:
                connection.process_data_events(time_limit=0.5)
            connection.close()
        except BaseException as e:
            failure.append(e)
            ready.set()
            acked.set()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    ready.wait(timeout)
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    body = b"x" * 256
    props = pika.BasicProperties(delivery_mode=2)
    start_cpu = sum(cpu_split(pid))
    start = time.monotonic()
    for i in range(messages):
        due = start + i / rate
        now = time.monotonic()
        if due > now:
            connection.sleep(due - now)  # pika's own wait: its heartbeats go on
        channel.basic_publish("", QUEUE, body, props)
    connection.close()
    if not acked.wait(timeout):
        raise BenchError("the consumer did not get every message in time")
    consumer.join(timeout)
    if failure:
        raise BenchError(f"consumer failed: {failure[0]!r}")
    return (sum(cpu_split(pid)) - start_cpu) * 1e6 / messages


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        raise BenchError("needs Debian's chromium and chromium-driver (make test installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(driver))


def log_in(driver: Any, base: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(base + "/login")
    driver.find_element(By.ID, "username").send_keys("guest")
    driver.find_element(By.ID, "password").send_keys("guest")
    driver.find_element(By.ID, "login").click()
    deadline = time.monotonic() + 30
    while "/login" in driver.current_url:
        if time.monotonic() > deadline:
            raise BenchError("the console's login did not answer")
        time.sleep(0.1)


def geomean(ratios: list[float]) -> dict[str, float | None]:
    logs = [math.log(x) for x in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:  # no interval from one round
        return {"geomean_ratio": round(math.exp(mean), 4), "geomean_low": None, "geomean_high": None}
    half = 1.96 * statistics.stdev(logs) / math.sqrt(len(logs))
    return {"geomean_ratio": round(math.exp(mean), 4), "geomean_low": round(math.exp(mean - half), 4),
            "geomean_high": round(math.exp(mean + half), 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--rate", type=int, default=2000, help="messages a second a burst publishes")
    ap.add_argument("--seconds", type=float, default=15.0, help="how long a burst publishes")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one burst may take")
    ap.add_argument("--pin", action="store_true", help="the broker on CPU 1, clients and browser on CPU 0")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)  # a stop still ends the broker and the browser
    workdir = tempfile.mkdtemp(prefix="console-bench-")
    proc, addresses = start_logbus(workdir, {"amqp": LOOPBACK, "http": LOOPBACK})
    driver = None
    try:
        pid = proc.pid
        if args.pin and (os.cpu_count() or 1) > 1:
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.sched_setaffinity(int(tid), {1})
            os.sched_setaffinity(0, {0})  # this process, and the browser it starts
        base = f"http://{addresses['http']}"
        host, port = addresses["amqp"].rsplit(":", 1)
        setup = pika.BlockingConnection(pika.ConnectionParameters(
            host, int(port), credentials=pika.PlainCredentials("guest", "guest")))
        setup.channel().queue_declare(QUEUE, durable=True)
        setup.close()
        driver = browser()
        log_in(driver, base)
        page = f"{base}/queues/%2F/{QUEUE}"
        burst(addresses["amqp"], pid, args.rate, min(args.seconds, 2.0), args.timeout)  # warm
        per: dict[str, list[float]] = {"closed": [], "open": []}
        ratios: list[float] = []
        for r in range(args.rounds):
            order = ("closed", "open") if r % 2 == 0 else ("open", "closed")
            got: dict[str, float] = {}
            for condition in order:
                driver.get(page if condition == "open" else "about:blank")
                quiesce(pid)  # the last burst's deferred work (and the page's first load) not in this one
                got[condition] = burst(addresses["amqp"], pid, args.rate, args.seconds, args.timeout)
                per[condition].append(got[condition])
            ratios.append(got["open"] / got["closed"])
            log(f"round {r + 1}: closed {got['closed']:.1f} us/msg, open {got['open']:.1f} us/msg,"
                f" ratio {ratios[-1]:.3f}")
        driver.get(page)
        live = "queue-rates" in driver.page_source  # the page was the live queue page
        doc = {
            "bench": "console_bench",
            "args": vars(args),
            "closed_us_per_msg_median": round(statistics.median(per["closed"]), 2),
            "open_us_per_msg_median": round(statistics.median(per["open"]), 2),
            "median_ratio_open_over_closed": round(statistics.median(ratios), 4),
            **geomean(ratios),
            "ratios": [round(x, 4) for x in ratios],
            "rounds": per,
            "page_was_live": live,
        }
        print(json.dumps(doc, indent=1))
        return 0
    finally:
        if driver is not None:
            driver.quit()
        stop_logbus(proc)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
