"""The console's screenshots in docs/operations.md ("Web console"), made from a real
`logbus serve` fed by real clients, at 1280x800:

    make console-screenshots     # LOGBUS_CONSOLE_SCREENSHOTS=docs/images pytest this file

writes docs/images/console-<page>.png for every page of the menu and each kind of object
page (a queue, an exchange, a connection, a consumer group, a topic's search). In the
ordinary run they go to a temporary directory: the pages they show still render, and each
stays under MAX_BYTES."""

from __future__ import annotations

import json
import os
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
from selenium.webdriver.common.by import By

import pika

from tests.browser.console import DEADLINE, ConsoleBrowser
from tests.browser.test_console_queues import publish_amqp
from tests.integration.mgmt import Mgmt
from tests.integration.mqtt_clients import Paho
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

    def with_rates(path: str, rates: str) -> None:
        """An object's page once its rates have two samples and its chart is drawn."""
        def ready() -> bool:
            console.go(path)
            return ("sampling started" not in driver.find_element(By.ID, rates).text
                    and bool(driver.find_elements(By.CSS_SELECTOR, ".chart canvas")))
        console.until(ready, f"{path}'s rates and chart", timeout=30)

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
        with_rates("/queues/%2F/orders", "queue-rates")
        assert console.facts("queue-facts")["Ready"] == "42"
        shot("queue")
        console.go("/consumer-groups/billing?to=earliest")
        assert len(console.table("Reset plan")) == 3
        shot("group")
        console.go("/topics/payments?key=customer-3")
        assert console.table("Messages found: 9")
        shot("search")

        # the rest of the menu, and an exchange's and a connection's page, with clients on
        mgmt.ok("PUT", "/api/exchanges/%2F/order-events", {"type": "topic"})
        mgmt.ok("POST", "/api/bindings/%2F/e/order-events/q/orders", {"routing_key": "order.*"})
        mgmt.ok("POST", "/api/pop/settlement/payments/receive", {"max": 1, "invisible_ms": 60000})
        host, port = server.host_port("amqp")
        amqp = pika.BlockingConnection(pika.ConnectionParameters(
            host, port, credentials=pika.PlainCredentials("guest", "guest"),
            client_properties={"connection_name": "billing-worker"}))
        device = Paho(server, "sensor-17", keepalive=30)
        try:
            device.connect()
            device.publish("sensors/kitchen/temperature", b"21.5", qos=1, retain=True)
            channel = amqp.channel()
            channel.basic_qos(prefetch_count=20)
            channel.basic_consume("invoices", lambda *a: None, consumer_tag="billing-1")
            amqp.process_data_events(time_limit=0.2)
            for name, path, ready in [
                ("exchanges", "/exchanges", lambda: console.table("Exchanges")),
                ("channels", "/channels", lambda: console.table("Open channels")),
                ("connections", "/connections", lambda: console.table("Open connections")),
                ("consumer-groups", "/consumer-groups", lambda: True),
                ("mqtt", "/mqtt", lambda: True),
                ("mqtt-retained", "/mqtt/retained", lambda: "sensors/kitchen/temperature" in driver.page_source),
                ("topics", "/topics", lambda: console.table("Topics")),
                ("pop-groups", "/pop-groups", lambda: True),
                ("users", "/users", lambda: True),
                ("vhosts", "/vhosts", lambda: True),
                ("permissions", "/permissions", lambda: True),
                ("node", "/node", lambda: True),
            ]:
                console.go(path)
                assert console.until(ready, f"the {name} page's content")
                shot(name)
            with_rates("/exchanges/%2F/order-events", "exchange-rates")
            assert console.table("Bindings from this exchange")
            shot("exchange")
            [worker] = [c for c in mgmt.ok("GET", "/api/connections").json() if c["client_id"] == "billing-worker"]
            with_rates(f"/connections/{worker['id']}", "connection-rates")
            shot("connection")
        finally:
            device.close()
            amqp.close()
    finally:
        driver.set_window_size(1280, 1000)
