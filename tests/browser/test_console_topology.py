"""The console's topology pages in a real browser against a real `logbus serve`: an
exchange and a queue declared from their forms, bound, a message published from the
exchange's form arriving in a real aio-pika consumer whose prefetch the queue's page
shows, then everything made deleted again; the read-only role sees none of the forms."""

from __future__ import annotations

import asyncio
import time
import threading
from collections.abc import Iterator
from typing import Any

import aio_pika
import pytest
from selenium.webdriver.common.by import By

from tests.browser.console import ConsoleBrowser
from tests.integration.mgmt import Mgmt
from tests.serverproc import LogbusServer

EXCHANGE, QUEUE = "ct-orders", "ct-billing"
PREFETCH = 5
WAIT = 30.0


class Consumer:
    """An aio-pika consumer of QUEUE (prefetch PREFETCH, manual acks) on a thread of its
    own: ``got`` holds the bodies it received, ``received`` is set at the first."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.got: list[bytes] = []
        self.received = threading.Event()
        self.consuming = threading.Event()
        self.failed: BaseException | None = None
        self.loop = asyncio.new_event_loop()
        self.stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.loop.run_until_complete(self._consume())
        except BaseException as e:  # the test's thread reads it
            self.failed = e
            self.consuming.set()
            self.received.set()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    async def _consume(self) -> None:
        self.stop = asyncio.Event()
        async with await aio_pika.connect(self.url, timeout=10) as connection:
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=PREFETCH)
            queue = await channel.get_queue(QUEUE)

            async def on_message(m: aio_pika.abc.AbstractIncomingMessage) -> None:
                self.got.append(m.body)
                await m.ack()
                self.received.set()

            await queue.consume(on_message, consumer_tag="ct-worker")
            self.consuming.set()
            await self.stop.wait()

    def close(self) -> None:
        if self.stop is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(WAIT)


@pytest.fixture
def consumer(server: LogbusServer) -> Iterator[Any]:
    host, port = server.host_port("amqp")
    made: list[Consumer] = []

    def start() -> Consumer:
        c = Consumer(f"amqp://guest:guest@{host}:{port}/")
        made.append(c)
        c.thread.start()
        assert c.consuming.wait(WAIT) and c.failed is None, c.failed
        return c

    yield start
    for c in made:
        c.close()


def open_form(console: ConsoleBrowser, summary: str) -> None:
    console.driver.find_element(By.XPATH, f"//summary[normalize-space()='{summary}']").click()


def test_declare_bind_publish_to_an_aio_pika_consumer_and_delete_from_the_console(
        console: ConsoleBrowser, mgmt: Mgmt, consumer: Any) -> None:
    console.login("guest", "guest", then="/exchanges")
    assert console.accessibility_problems() == []
    open_form(console, "Add a new exchange")
    console.fill("f-new-name", EXCHANGE)
    console.choose("f-new-type", "topic")
    console.press("Declare")
    console.until(lambda: "Declared exchange" in console.status(), "the declare's answer")
    assert any(r["Name"] == EXCHANGE and r["Type"] == "topic" for r in console.table("Exchanges"))

    console.go("/queues")
    open_form(console, "Add a new queue")
    console.fill("f-new-name", QUEUE)
    console.fill("f-new-arguments", '{"x-max-length": 1000}')
    console.press("Declare")
    console.until(lambda: "Declared queue" in console.status(), "the queue's declare")
    assert mgmt.ok("GET", f"/api/queues/%2F/{QUEUE}").json()["arguments"] == {"x-max-length": 1000}

    console.go(f"/exchanges/%2F/{EXCHANGE}")
    assert console.accessibility_problems() == []
    console.choose("f-kind", "queue")
    console.fill("f-destination", QUEUE)
    console.fill("f-binding_key", "order.*")
    console.press("Bind")
    console.until(lambda: "Bound queue" in console.status(), "the bind's answer")
    assert [(r["Destination"], r["Routing key"]) for r in console.table("Bindings from this exchange")] == [
        (QUEUE, "order.*")]

    c = consumer()
    console.go(f"/queues/%2F/{QUEUE}")
    assert console.accessibility_problems() == []
    [row] = console.table("Consumers")
    assert (row["Consumer tag"], row["Prefetch"], row["Ack mode"]) == ("ct-worker", str(PREFETCH), "manual")

    console.go(f"/exchanges/%2F/{EXCHANGE}")
    console.fill("f-routing_key", "order.created")
    console.fill("f-headers", '{"source": "console"}')
    console.fill("f-payload", "from the console")
    console.press("Publish")
    console.until(lambda: "Message published." in console.status(), "the publish's answer")
    assert c.received.wait(WAIT) and c.failed is None, c.failed
    assert c.got == [b"from the console"]

    console.fill("f-routing_key", "refund.created")
    console.fill("f-payload", "nobody's")
    console.press("Publish")
    console.until(lambda: "not routed" in console.status(), "the unrouted publish's answer")

    console.go(f"/queues/%2F/{QUEUE}")
    console.press_in_row("Bindings to this queue", {"Source": EXCHANGE, "Routing key": "order.*"}, "Unbind")
    console.until(lambda: "Unbound queue" in console.status(), "the unbind's answer")
    assert console.table("Bindings to this queue") == []
    console.press("Delete…")
    console.until(lambda: "Delete" in console.buttons(), "the delete's confirmation")
    console.press("Delete")
    console.until(lambda: console.path().startswith("/queues?") and "Deleted queue" in console.status(),
                  "the queue's delete")
    assert mgmt.call("GET", f"/api/queues/%2F/{QUEUE}").status == 404
    c.close()

    console.go(f"/exchanges/%2F/{EXCHANGE}")
    console.press("Delete…")
    console.until(lambda: "Delete" in console.buttons(), "the delete's confirmation")
    console.press("Delete")
    console.until(lambda: "Deleted exchange" in console.status(), "the exchange's delete")
    assert mgmt.call("GET", f"/api/exchanges/%2F/{EXCHANGE}").status == 404


def test_the_read_only_role_sees_no_form_to_change_the_topology(console: ConsoleBrowser, mgmt: Mgmt) -> None:
    mgmt.ok("PUT", "/api/queues/%2F/ct-watched")
    console.login("watcher", "watch-pw", then="/exchanges")
    assert console.driver.find_elements(By.TAG_NAME, "summary") == []
    assert console.table("Exchanges")  # it sees them
    console.go("/exchanges/%2F/amq.direct")
    assert console.buttons() == [] and not console.driver.find_elements(By.ID, "f-payload")
    console.go("/queues")
    assert console.driver.find_elements(By.TAG_NAME, "summary") == []
    console.go("/queues/%2F/ct-watched")
    assert console.buttons() == [] and not console.driver.find_elements(By.ID, "f-source")
    mgmt.ok("DELETE", "/api/queues/%2F/ct-watched")


RATE = 100  # messages per second the publisher keeps to
RUN_S = 14  # seconds it publishes: the page's 10-second average is then all of steady publishing


def publish_paced(server: LogbusServer, queue: str, sent: list[float], done: threading.Event) -> None:
    """RATE messages a second to ``queue`` for RUN_S seconds, on a schedule (a message late
    is sent at once: the long-run rate is RATE however the machine stutters); each send's
    time in ``sent``."""
    import pika

    host, port = server.host_port("amqp")
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        host, port, credentials=pika.PlainCredentials("guest", "guest")))
    try:
        channel = connection.channel()
        start = time.monotonic()
        for i in range(RATE * RUN_S):
            due = start + i / RATE
            now = time.monotonic()
            if due > now:
                connection.sleep(due - now)  # pika's own wait: its heartbeats go on
            channel.basic_publish("", queue, b"tick")
            sent.append(time.monotonic())
    finally:
        connection.close()
        done.set()


def test_a_queues_page_shows_the_rate_a_client_publishes_at(console: ConsoleBrowser, mgmt: Mgmt,
                                                           server: LogbusServer) -> None:
    mgmt.ok("PUT", "/api/queues/%2F/ct-rated")
    console.login("guest", "guest", then="/queues/%2F/ct-rated")
    console.until(lambda: console.driver.find_elements(By.CSS_SELECTOR, ".chart canvas"), "the queue's chart")
    sent: list[float] = []
    done = threading.Event()
    publisher = threading.Thread(target=publish_paced, args=(server, "ct-rated", sent, done), daemon=True)
    publisher.start()
    try:
        # the page open all along (it is what is sampled); read it once the last 10 s were all publishing
        console.until(lambda: len(sent) >= RATE * (RUN_S - 2), "12 s of publishing", timeout=RUN_S * 4)
        console.go("/queues/%2F/ct-rated")
        shown = float(console.facts("queue-rates")["Routed"].removesuffix("/s"))
        last = [t for t in sent if t >= sent[-1] - 10.0]
        client = (len(last) - 1) / (last[-1] - last[0])  # the client's own rate over its last 10 s
        assert abs(shown - client) <= 0.10 * client, (shown, client)
    finally:
        assert done.wait(RUN_S * 4)
        publisher.join()
    mgmt.ok("DELETE", "/api/queues/%2F/ct-rated")
