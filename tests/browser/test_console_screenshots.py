"""The console's screenshots in docs/operations.md ("Web console"), made from a real
`logbus serve` fed by real clients, at 1280x800:

    make console-screenshots     # LOGBUS_CONSOLE_SCREENSHOTS=docs/images pytest this file

writes docs/images/console-{overview,queues,queue,group,search}.png. In the ordinary run
they go to a temporary directory: the pages they show still render, and each stays under
MAX_BYTES."""

from __future__ import annotations

import json
import os
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
from selenium.webdriver.common.by import By

from tests.browser.console import DEADLINE, ConsoleBrowser
from tests.browser.test_console_queues import publish_amqp
from tests.integration.mgmt import Mgmt
from tests.serverproc import REPO_ROOT, LogbusServer

MAX_BYTES = 150_000
SIZE = (1280, 800)


def produce_payments(server: LogbusServer, mgmt: Mgmt) -> None:
    """Topic "payments" (3 partitions) with 60 records keyed by customer, and group
    "billing" behind by a few records on each partition."""
    mgmt.ok("POST", "/api/topics", {"name": "payments", "partitions": 3})
    host, port = server.host_port("kafka")
    producer = KafkaProducer(bootstrap_servers=f"{host}:{port}", acks="all")
    try:
        for i in range(60):
            record = {"customer": f"customer-{i % 7}", "amount_cents": 1000 + 37 * i, "currency": "EUR"}
            producer.send("payments", json.dumps(record).encode(), key=f"customer-{i % 7}".encode(), partition=i % 3)
        producer.flush(DEADLINE)
    finally:
        producer.close(DEADLINE)
    consumer = KafkaConsumer(bootstrap_servers=f"{host}:{port}", group_id="billing", enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition("payments", p) for p in range(3)])
        consumer.commit({TopicPartition("payments", p): OffsetAndMetadata(20 - 3 * p - 1, "", -1) for p in range(3)})
    finally:
        consumer.close(autocommit=False)


def test_screenshots_of_the_console(console: ConsoleBrowser, server: LogbusServer, mgmt: Mgmt,
                                    tmp_path: Path) -> None:
    to = os.environ.get("LOGBUS_CONSOLE_SCREENSHOTS")
    folder = REPO_ROOT / to if to else tmp_path
    for_docs = to is not None
    publish_amqp(server, "orders", 42)
    publish_amqp(server, "invoices", 5)
    produce_payments(server, mgmt)
    driver = console.driver
    driver.set_window_size(*SIZE)  # then the window grows by its frame: the page's viewport is SIZE
    frame = driver.execute_script("return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight]")
    driver.set_window_size(SIZE[0] + frame[0], SIZE[1] + frame[1])

    def shot(name: str) -> None:
        path = folder / f"console-{name}.png"
        driver.save_screenshot(str(path))
        assert path.stat().st_size < MAX_BYTES, (path, path.stat().st_size)

    try:
        console.login("guest", "guest")
        console.until(lambda: driver.find_elements(By.CSS_SELECTOR, "#depth-chart .uplot canvas"), "the charts")
        if for_docs:  # lines, not points: a few samples of each series
            console.until(lambda: len(driver.execute_script(
                "return fetch('/rates.json').then(r => r.json()).then(d => d.depth.t)")) >= 3, "three depth samples",
                timeout=30)
            driver.refresh()
            console.until(lambda: driver.find_elements(By.CSS_SELECTOR, "#depth-chart .uplot canvas"), "the charts")
        shot("overview")
        console.go("/queues?sort=ready&dir=desc")
        assert console.table("Queues")
        shot("queues")
        console.go("/queues/%2F/orders")
        assert console.facts("queue-facts")["Ready"] == "42"
        shot("queue")
        console.go("/consumer-groups/billing?to=earliest")
        assert len(console.table("Reset plan")) == 3
        shot("group")
        console.go("/topics/payments?key=customer-3")
        assert console.table("Messages found: 9")
        shot("search")
    finally:
        driver.set_window_size(1280, 1000)
