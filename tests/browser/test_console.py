"""The web console in a real browser against a real `logbus serve`: logging in and out,
the read-only role (no buttons, and the server refuses the action anyway), connections
of real AMQP and MQTT clients and closing them, a topic produced to over Kafka, the
overview's charts and their time axis, and the basics of accessibility (labels, table
headers, the keyboard)."""

from __future__ import annotations

import json
import re
import threading
from typing import Any, Iterator, cast

import paho.mqtt.client as mqtt
import pika
import pytest
from kafka import KafkaProducer
from paho.mqtt.enums import CallbackAPIVersion
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from tests.browser.console import DEADLINE, ConsoleBrowser
from tests.integration.mgmt import Mgmt
from tests.serverproc import LogbusServer

PAGES = ["/", "/queues", "/consumer-groups", "/connections", "/mqtt", "/topics", "/pop-groups", "/users", "/vhosts",
         "/permissions", "/node"]


class AmqpClient:
    """A pika connection as guest, and its id in the broker's connection registry."""

    def __init__(self, server: LogbusServer, mgmt: Mgmt) -> None:
        before = set(connection_ids(mgmt, protocol="amqp"))
        host, port = server.host_port("amqp")
        self.connection = pika.BlockingConnection(pika.ConnectionParameters(
            host, port, credentials=pika.PlainCredentials("guest", "guest")))
        [self.id] = set(connection_ids(mgmt, protocol="amqp")) - before


@pytest.fixture
def amqp(server: LogbusServer, mgmt: Mgmt) -> Iterator[AmqpClient]:
    client = AmqpClient(server, mgmt)
    try:
        yield client
    finally:
        if client.connection.is_open:
            client.connection.close()


class MqttClient:
    """paho-mqtt on its own thread; ``gone`` is set when the broker drops it."""

    def __init__(self, server: LogbusServer, client_id: str) -> None:
        self.connected, self.gone = threading.Event(), threading.Event()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
        self.client.username_pw_set("guest", "guest")
        self.client.on_connect = lambda *a: self.connected.set()
        self.client.on_disconnect = lambda *a: self.gone.set()
        host, port = server.host_port("mqtt")
        self.client.connect(host, port, clean_start=False, properties=_expiry(300))
        self.client.loop_start()
        assert self.connected.wait(DEADLINE)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _expiry(seconds: int) -> Any:
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = seconds
    return props


def connection_ids(mgmt: Mgmt, **match: str) -> list[int]:
    return [c["id"] for c in mgmt.ok("GET", "/api/connections").json()
            if all(c.get(k) == v for k, v in match.items())]


# -- logging in ----------------------------------------------------------------------------------


def test_a_wrong_password_is_refused_the_right_one_lets_in_and_logout_ends_the_session(
        console: ConsoleBrowser, mgmt: Mgmt) -> None:
    console.login("guest", "not-the-password", then="/topics")
    assert console.path().startswith("/login")
    assert "Login failed" in console.alert()

    console.fill("username", "guest")
    console.fill("password", "guest")
    console.driver.find_element(By.ID, "login").click()
    console.until(lambda: console.path() == "/topics", "the page asked for first")
    assert console.h1() == "Topics"
    assert "guest" in console.driver.find_element(By.CLASS_NAME, "who").text

    console.driver.find_element(By.XPATH, "//button[text()='Log out']").click()
    console.until(lambda: console.path().startswith("/login"), "the login page after logging out")
    console.go("/connections")
    assert console.path().startswith("/login?next=")


def test_a_user_without_the_management_tag_may_not_log_in(console: ConsoleBrowser, mgmt: Mgmt) -> None:
    console.login("worker", "work-pw")
    assert console.path().startswith("/login")
    assert "management" in console.alert()


# -- the read-only role ----------------------------------------------------------------------------


def test_a_monitoring_user_sees_no_buttons_and_a_forged_post_is_refused(
        console: ConsoleBrowser, mgmt: Mgmt, amqp: AmqpClient) -> None:
    pika_id = amqp.id
    console.login("watcher", "watch-pw", then="/connections")
    assert console.h1() == "Connections"
    row = {"Id": str(pika_id), "User": "guest"}
    assert console.buttons_in_row("Open connections", row) == []  # monitoring sees all, closes none
    nav = [a.text for a in console.driver.find_elements(By.CSS_SELECTOR, "nav a")]
    assert "Users" not in nav and "Permissions" not in nav and "Connections" in nav

    # the same form, made by hand with the session's valid token: the server says no
    assert console.fetch_status("POST", "/connections/close", {"csrf": console.csrf(), "id": str(pika_id)}) == 403
    assert console.fetch_status("POST", "/users/put", {"csrf": console.csrf(), "name": "evil",
                                                       "password": "x", "tags": "administrator"}) == 403
    assert pika_id in connection_ids(mgmt, protocol="amqp")
    assert mgmt.call("GET", "/api/users/evil").status == 404
    console.go("/users")
    assert console.h1() == "Error 403"


def test_an_action_without_the_csrf_token_is_refused(console: ConsoleBrowser, mgmt: Mgmt,
                                                      amqp: AmqpClient) -> None:
    pika_id = amqp.id
    console.login("guest", "guest", then="/connections")
    assert console.fetch_status("POST", "/connections/close", {"id": str(pika_id)}) == 403
    assert console.fetch_status("POST", "/connections/close", {"csrf": "0" * 64, "id": str(pika_id)}) == 403
    assert pika_id in connection_ids(mgmt, protocol="amqp")


# -- connections and MQTT sessions ----------------------------------------------------------------------


def test_connections_of_real_clients_are_listed_and_closed(console: ConsoleBrowser, server: LogbusServer,
                                                          mgmt: Mgmt, amqp: AmqpClient) -> None:
    paho = MqttClient(server, "console-paho")
    try:
        pika_id = amqp.id
        [paho_id] = connection_ids(mgmt, client_id="console-paho")
        console.login("guest", "guest", then="/connections")
        rows = {r["Id"]: r for r in console.table("Open connections")}
        assert (rows[str(pika_id)]["Protocol"], rows[str(pika_id)]["User"]) == ("amqp", "guest")
        assert (rows[str(paho_id)]["Protocol"], rows[str(paho_id)]["Client id"]) == ("mqtt", "console-paho")

        console.press_in_row("Open connections", {"Id": str(pika_id)}, "Close")
        console.until(lambda: console.status() == f"Connection {pika_id} closed.", "the close's message")
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            amqp.connection.process_data_events(time_limit=DEADLINE)  # the client hears 320 CONNECTION_FORCED
        assert closed.value.reply_code == 320
        console.reload_until("/connections", lambda: str(pika_id) not in {r["Id"] for r in
                                                                          console.table("Open connections")},
                             "the closed connection to leave the list")

        console.go("/mqtt")
        assert console.table("MQTT sessions")[0]["Client id"] == "console-paho"
        console.press_in_row("MQTT sessions", {"Client id": "console-paho"}, "Disconnect")
        console.until(lambda: "disconnected" in console.status(), "the kick's message")
        assert paho.gone.wait(DEADLINE)
        row = {r["Client id"]: r for r in console.table("MQTT sessions")}["console-paho"]
        assert row["Connected"] == "no"  # kept: it has an expiry interval
        console.press_in_row("MQTT sessions", {"Client id": "console-paho"}, "Delete session")
        console.until(lambda: "deleted" in console.status(), "the deletion's message")
        assert "console-paho" not in {r["Client id"] for r in console.table("MQTT sessions")}
    finally:
        paho.close()


# -- topics ------------------------------------------------------------------------------------------


def test_a_topic_produced_to_over_kafka_shows_its_offsets(console: ConsoleBrowser, server: LogbusServer,
                                                         mgmt: Mgmt) -> None:
    mgmt.ok("POST", "/api/topics", {"name": "console-kafka", "partitions": 2})
    host, port = server.host_port("kafka")
    producer = KafkaProducer(bootstrap_servers=f"{host}:{port}", acks="all")
    try:
        for i in range(7):
            producer.send("console-kafka", json.dumps(i).encode(), partition=0)
        for i in range(5):
            producer.send("console-kafka", json.dumps(i).encode(), partition=1)
        producer.flush(DEADLINE)
    finally:
        producer.close(DEADLINE)
    console.login("guest", "guest", then="/topics")
    topic = {r["Topic"]: r for r in console.table("Topics")}["console-kafka"]
    assert (topic["Partitions"], topic["Messages"]) == ("2", "12")
    parts = {r["Topic [partition]"]: r for r in console.table("Partitions")}
    assert (parts["console-kafka [0]"]["Start offset"], parts["console-kafka [0]"]["End offset"]) == ("0", "7")
    assert parts["console-kafka [1]"]["End offset"] == "5"


# -- users, vhosts, permissions --------------------------------------------------------------------------


def test_an_administrator_creates_a_user_grants_it_and_deletes_it(console: ConsoleBrowser, mgmt: Mgmt) -> None:
    console.login("guest", "guest", then="/users")
    console.fill("f-name", "carol")
    console.fill("f-password", "carol-pw")
    console.fill("f-tags", "management")
    console.driver.find_element(By.XPATH, "//button[text()='Save user']").click()
    console.until(lambda: console.status() == "User 'carol' created.", "the user's creation")
    assert {r["Name"]: r["Tags"] for r in console.table("Users")}["carol"] == "management"

    console.go("/permissions")
    console.fill("f-user", "carol")
    console.fill("f-write", "^orders$")
    console.driver.find_element(By.XPATH, "//button[text()='Set permissions']").click()
    console.until(lambda: "set" in console.status(), "the permission's message")
    assert mgmt.ok("GET", "/api/permissions/%2F/carol").json()["write"] == "^orders$"

    console.go("/users")
    console.press_in_row("Users", {"Name": "carol"}, "Delete")
    console.until(lambda: console.status() == "User 'carol' deleted.", "the deletion")
    assert mgmt.call("GET", "/api/users/carol").status == 404


def test_an_administrator_adds_and_deletes_a_vhost(console: ConsoleBrowser, mgmt: Mgmt) -> None:
    console.login("guest", "guest", then="/vhosts")
    console.fill("f-name", "console-vh")
    console.fill("f-description", "made in a browser")
    console.driver.find_element(By.XPATH, "//button[text()='Save virtual host']").click()
    console.until(lambda: console.status() == "Vhost 'console-vh' created.", "the vhost's creation")
    assert {r["Name"]: r["Description"] for r in console.table("Virtual hosts")}["console-vh"] == "made in a browser"
    console.press_in_row("Virtual hosts", {"Name": "console-vh"}, "Delete")
    console.until(lambda: console.status() == "Vhost 'console-vh' deleted.", "the vhost's deletion")
    assert mgmt.call("GET", "/api/vhosts/console-vh").status == 404


def test_pop_groups_show_their_dead_letters_and_replay_them(console: ConsoleBrowser, mgmt: Mgmt) -> None:
    """The server dead-letters at the first nack (--pop-max-deliveries 1): the pop page
    counts the dead letters, its Replay button and the queue page's Requeue button put
    them back on the topic, where the group reads them again."""
    mgmt.ok("POST", "/api/topics", {"name": "console-jobs", "partitions": 1})
    pop = "/api/pop/console-workers/console-jobs"
    assert mgmt.ok("POST", pop + "/receive", {"max": 1}).json()["messages"] == []  # the group reads from here on
    mgmt.ok("POST", "/api/topics/console-jobs/messages", {"messages": [{"value": v} for v in "abc"]})

    def receive() -> dict[str, Any]:
        got = mgmt.ok("POST", pop + "/receive", {"max": 1, "wait_ms": 5000}).json()["messages"]
        assert len(got) == 1
        return cast(dict[str, Any], got[0])

    def group() -> dict[str, Any]:
        return cast(dict[str, Any], next(g for g in mgmt.ok("GET", "/api/pop").json()
                                         if g["pop_group"] == "console-workers"))

    first = receive()
    assert mgmt.call("POST", pop + "/nack", {"handle": first["handle"]}).status == 204
    console.until(lambda: group()["dead_letters_waiting"] == 1, "the nacked message's dead letter")
    receive()  # b: invisible

    console.login("guest", "guest", then="/pop-groups")
    row = {r["Pop group"]: r for r in console.table("Pop groups")}["console-workers"]
    assert (row["Topic"], row["Ready"], row["Invisible"], row["Dead-lettered"], row["Dead letters waiting"]) == (
        "console-jobs", "1", "1", "1", "1")
    console.press_in_row("Pop groups", {"Pop group": "console-workers"}, "Replay dead letters")
    console.until(lambda: console.status().startswith("Replayed") or console.alert(), "the replay's answer")
    assert console.status() == "Replayed 1 dead letter of pop group 'console-workers'."
    row = {r["Pop group"]: r for r in console.table("Pop groups")}["console-workers"]
    assert (row["Ready"], row["Invisible"], row["Dead-lettered"], row["Dead letters waiting"]) == ("2", "1", "1", "0")

    # the group's queue page: its figures, the dead letters waiting, the same replay
    second = receive()  # c
    assert mgmt.call("POST", pop + "/nack", {"handle": second["handle"]}).status == 204
    console.until(lambda: group()["dead_letters_waiting"] == 1, "the second dead letter")
    console.go("/queues?kind=pop&name=console-workers")
    console.follow("console-workers/console-jobs")
    console.until(lambda: console.h1() == "console-workers/console-jobs", "the pop group's queue page")
    assert console.path() == "/queues/~/console-workers%2Fconsole-jobs"
    facts = console.facts("queue-facts")
    assert (facts["Ready"], facts["Unacked"]) == ("1", "1")  # the replayed a; b
    assert console.driver.find_element(By.ID, "dead-letters").text == "1"
    console.press("Requeue dead letters")
    console.until(lambda: console.status() == "Replayed 1 dead letter of pop group 'console-workers'.", "the requeue")
    assert console.path().startswith("/queues/~/console-workers%2Fconsole-jobs?done=")
    assert console.driver.find_element(By.ID, "dead-letters").text == "0"
    assert console.facts("queue-facts")["Ready"] == "2"
    # and the group reads the replayed messages again
    values = sorted(receive()["value"] for _ in range(2))
    assert values == [first["value"], second["value"]] == ["a", "c"]


# -- the overview ----------------------------------------------------------------------------------------


def test_the_overview_draws_its_chart_and_the_scripts_load_under_the_content_security_policy(
        console: ConsoleBrowser, mgmt: Mgmt) -> None:
    console.driver.get_log("browser")  # drained: what earlier tests' pages logged
    console.login("guest", "guest")
    assert console.h1() == "Overview"
    for chart in ("rates-chart", "depth-chart"):
        console.until(lambda: console.driver.find_elements(By.CSS_SELECTOR, f"#{chart} .uplot canvas"),
                      f"uPlot's canvas in #{chart}")
    totals = mgmt.ok("GET", "/api/overview").json()["queue_totals"]
    [row] = console.table("Queue totals")
    assert (row["Ready"], row["Unacked"]) == (str(totals["messages_ready"]), str(totals["messages_unacknowledged"]))
    console.until(lambda: "average of the last" in console.driver.find_element(By.ID, "message-rates").text,
                  "the rates' average")
    errors = [e for e in console.driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []


# Run in each new page before its own scripts: /rates.json answered with samples a quarter
# past each second over the last ?span= seconds, and the text drawn on each chart's canvas
# kept (uPlot draws its tick labels there, not in the DOM) as window.drawn[chart id].
FAKE_RATES = """
(function () {
  window.drawn = {};
  var fillText = CanvasRenderingContext2D.prototype.fillText;
  CanvasRenderingContext2D.prototype.fillText = function (text) {
    var chart = this.canvas.closest(".chart");
    if (chart) (window.drawn[chart.id] = window.drawn[chart.id] || []).push(String(text));
    return fillText.apply(this, arguments);
  };
  var span = Number(new URLSearchParams(location.search).get("span"));
  var realFetch = window.fetch;
  window.fetch = function (url) {
    if (!span || String(url) !== "/rates.json") return realFetch.apply(this, arguments);
    var end = Math.floor(Date.now() / 1000) + 0.25, t = [], n = [];
    for (var i = span; i >= 0; i--) { t.push(end - i); n.push(i % 7); }
    var body = {t: t, received: n, sent: n, depth: {t: t, ready: n, unacked: n}};
    return Promise.resolve(new Response(JSON.stringify(body), {headers: {"Content-Type": "application/json"}}));
  };
})();
"""


def test_the_charts_time_axis_reads_whole_seconds_as_clock_times_at_every_span(
        console: ConsoleBrowser, mgmt: Mgmt) -> None:
    """A few seconds of samples (the first minute), minutes, an hour, and a drag that
    zooms into a few seconds: every time label is a clock time "12:04:25", never ":25.500"
    nor "4:12pm"."""
    driver = console.driver
    console.login("guest", "guest")
    script = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": FAKE_RATES})["identifier"]

    def time_labels(chart: str) -> list[str]:
        drawn: list[str] = driver.execute_script("return window.drawn[arguments[0]] || []", chart)
        return [t for t in drawn if ":" in t]  # the y axis says numbers, the x axis times

    def check(what: str) -> None:
        for chart in ("rates-chart", "depth-chart"):
            labels = console.until(lambda: time_labels(chart), f"the time labels of {chart}, {what}")
            assert all(re.fullmatch(r"\d\d:\d\d:\d\d", t) for t in labels), (what, chart, labels)
    try:
        for span in (2, 60, 300, 3600):
            console.go(f"/?span={span}")
            check(f"over {span} s")
        console.go("/?span=60")
        check("over 60 s")
        driver.execute_script("window.drawn = {}")
        over = driver.find_element(By.CSS_SELECTOR, "#rates-chart .u-over")
        ActionChains(driver).move_to_element_with_offset(over, 0, 0).click_and_hold().move_by_offset(
            30, 0).release().perform()  # uPlot zooms the x axis into what the mouse selected
        labels = console.until(lambda: time_labels("rates-chart"), "the zoomed chart's labels")
        assert all(re.fullmatch(r"\d\d:\d\d:\d\d", t) for t in labels), ("zoomed in", labels)
        seconds = [int(t[:2]) * 3600 + int(t[3:5]) * 60 + int(t[6:]) for t in labels]
        assert 1 in {b - a for a, b in zip(seconds, seconds[1:])}, labels  # zoomed: a tick a second
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script})


# -- accessibility ----------------------------------------------------------------------------------------


def test_every_page_labels_its_inputs_heads_its_tables_and_has_a_skip_link(console: ConsoleBrowser,
                                                                          mgmt: Mgmt) -> None:
    console.login("guest", "guest")
    for path in [*PAGES, "/login"]:
        console.go(path)
        problems = console.accessibility_problems()
        assert problems == [], (path, problems)


def test_the_keyboard_alone_logs_in(console: ConsoleBrowser, mgmt: Mgmt) -> None:
    console.go("/login")
    d = console.driver
    d.find_element(By.TAG_NAME, "body").click()  # no focus yet: the tab order starts at the top
    reached = []
    for _ in range(8):
        d.switch_to.active_element.send_keys(Keys.TAB)
        ident = d.switch_to.active_element.get_attribute("id") or d.switch_to.active_element.text
        reached.append(ident)
        if ident == "login":
            break
    assert reached[-3:] == ["username", "password", "login"], reached
    d.find_element(By.ID, "username").send_keys("guest")
    d.find_element(By.ID, "password").send_keys("guest")
    d.find_element(By.ID, "login").send_keys(Keys.ENTER)
    console.until(lambda: console.path() == "/", "the overview")
    assert console.h1() == "Overview"
