"""Browser tests of the web console: Debian's headless Chromium driven by Selenium
through Debian's chromedriver (the same Debian source package, so always the same
version: docs/decisions/0035-web-console.md), against a real ``logbus serve``.

    def test_x(console: ConsoleBrowser, server: LogbusServer): ...

One server and one browser for the session (starting Chromium costs a second); each
test gets a fresh tab with no cookies. A failed test leaves a screenshot and the page's
HTML under ``test-output/browser/<test>/``, named in the failure's report.
"""

from __future__ import annotations

import re
import shutil
from typing import Any, Generator, Iterator

import pytest

from tests.browser.console import ConsoleBrowser
from tests.integration.mgmt import Mgmt
from tests.serverproc import REPO_ROOT, LogbusServer, module_server

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = REPO_ROOT / "test-output" / "browser"

pytestmark = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                                reason="chromium and chromedriver are installed by `make test`"
                                       " (Debian packages chromium, chromium-driver)")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    # a pop nack dead-letters at once: the pop pages have dead letters to show and replay
    yield from module_server(tmp_path_factory, "console", args=["--pop-max-deliveries", "1"])


@pytest.fixture(scope="session")
def mgmt(server: LogbusServer) -> Mgmt:
    """The management API as guest (an administrator); users "watcher" (monitoring: the
    read-only role, no permission in any vhost) and "worker" (no tag: no console)."""
    m = Mgmt(server)
    m.add_user("watcher", "watch-pw", "monitoring")  # sees everything, may act on nothing but its own
    m.add_user("worker", "work-pw", "")
    m.grant("/", "worker")
    return m


@pytest.fixture(scope="session")
def driver() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("chromium and chromedriver are installed by `make test`")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # the driver is given: Selenium Manager (which would download one) is never asked
    browser = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture
def console(driver: Any, server: LogbusServer, request: pytest.FixtureRequest) -> Iterator[ConsoleBrowser]:
    """A fresh tab, no cookies, on the server's console."""
    driver.switch_to.new_window("tab")
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})  # every site's, not the blank tab's
    request.node.browser = driver  # for the failure's screenshot (pytest_runtest_makereport)
    try:
        yield ConsoleBrowser(driver, server.http_url)
    finally:
        handles = driver.window_handles
        if len(handles) > 1:
            driver.close()
            driver.switch_to.window(driver.window_handles[0])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A failed test's screenshot and HTML, kept where its report says."""
    outcome = yield
    report = outcome.get_result()
    browser = getattr(item, "browser", None)
    if not report.failed or browser is None or report.when == "teardown":
        return
    folder = ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid)
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    try:
        browser.save_screenshot(str(folder / "screenshot.png"))
        (folder / "page.html").write_text(browser.page_source)
        lines += [f"url: {browser.current_url}", f"screenshot: {folder / 'screenshot.png'}",
                  f"html: {folder / 'page.html'}"]
    except Exception as exc:  # the browser itself failed: say so, the report still goes out
        lines.append(f"no screenshot: {exc!r}")
    report.sections.append(("browser at the failure", "\n".join(lines)))

