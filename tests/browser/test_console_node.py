"""The Node page (issue 49) in a real browser, as the read-only role ("watcher",
``monitoring``) sees it: the broker's pid, its listeners as the ready file has them, the
limits in a reader's units, the process's descriptor limit from /proc, and the page
reloading itself (htmx) to show the log grown by a publish; a ``management`` user has
no Node in the menu and is refused the page."""

from __future__ import annotations

from pathlib import Path

from selenium.webdriver.common.by import By

from logbus.gateway.http.console.html import size
from tests.browser.console import ConsoleBrowser
from tests.integration.mgmt import Mgmt
from tests.serverproc import LogbusServer

LOG_ROW = "Log (every topic)"


def open_files_limit(pid: int) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return line.split()[3]  # the soft limit
    raise AssertionError("no Max open files")


def log_size(console: ConsoleBrowser) -> str:
    return {r["What"]: r["Size"] for r in console.table("Bytes on disk")}.get(LOG_ROW, "")


def test_a_monitoring_user_sees_the_node_and_the_page_follows_it(console: ConsoleBrowser, server: LogbusServer,
                                                                  mgmt: Mgmt) -> None:
    console.login("watcher", "watch-pw", then="/node")
    assert console.h1() == "Node"
    facts = console.facts("node-facts")
    assert facts["Process id"] == str(server.pid)
    assert facts["Alarms"] == "none" and facts["Problems"] == "none"
    listeners = {r["Listener"]: r for r in console.table("Listeners")}
    assert {name: r["Address"] for name, r in listeners.items()} == server.addresses
    assert {r["TLS"] for r in listeners.values()} == {"no"}
    assert {r["Problem"] for r in listeners.values()} == {"none"}
    resources = {r["Resource"]: r for r in console.table("Resources")}
    # the defaults: RabbitMQ's 50,000,000 bytes and 40% of RAM
    assert resources["Disk free (the data directory's filesystem)"]["Limit"] == "47.7 MiB"
    assert "(40% of " in resources["Memory used (resident)"]["Limit"]
    assert resources["File descriptors used"]["Limit"] == open_files_limit(server.pid)
    assert {r["Alarm"] for r in resources.values()} == {"none", "no alarm"}
    nav = [a.text for a in console.driver.find_elements(By.CSS_SELECTOR, "nav a")]
    assert "Node" in nav

    # records appended elsewhere: the page, reloading its region every 5 s, shows the log's
    # new size as the API has it, and a later uptime
    uptime, before = facts["Up for"], log_size(console)
    console.driver.execute_script("window.nodeTestMarker = 1")  # gone if the whole page were loaded again
    mgmt.ok("POST", "/api/topics", {"name": "node-page-grows"})
    mgmt.ok("POST", "/api/topics/node-page-grows/messages", {"messages": [{"value": "x" * 4096}] * 64})
    [node] = Mgmt(server, ("watcher", "watch-pw")).ok("GET", "/api/nodes").json()
    expected = size(node["log_bytes"])
    assert expected != before, "256 KiB appended should change the log's size as shown"
    console.until(lambda: log_size(console) == expected and console.facts("node-facts")["Up for"] != uptime,
                  f"the page reloaded with the log at {expected}")
    assert console.driver.execute_script("return window.nodeTestMarker") == 1  # the region, in place


def test_a_management_user_has_no_node_page(console: ConsoleBrowser, mgmt: Mgmt) -> None:
    mgmt.add_user("node-manager", "manage-pw", "management")
    console.login("node-manager", "manage-pw", then="/")
    nav = [a.text for a in console.driver.find_elements(By.CSS_SELECTOR, "nav a")]
    assert "Overview" in nav and "Node" not in nav
    console.go("/node")
    assert console.h1() == "Error 403"
