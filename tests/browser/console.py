"""The console as a test sees it through Selenium: pages by path, the login form, tables
read by their caption, buttons in a row, and waits with a deadline (never a sleep).

    c = ConsoleBrowser(driver, server.http_url)
    c.login("guest", "guest")
    rows = c.table("Open connections")       # [{"Id": "3", "Protocol": "mqtt", ...}, ...]
    c.press_in_row("Open connections", {"Client id": "x"}, "Close")
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

T = TypeVar("T")
DEADLINE = 15.0  # seconds any wait may take on a loaded 2-core CI machine


class ConsoleBrowser:
    def __init__(self, driver: Any, base_url: str) -> None:
        self.driver = driver
        self.base = base_url

    # -- navigation -----------------------------------------------------------------------

    def go(self, path: str) -> None:
        self.driver.get(self.base + path)

    def path(self) -> str:
        url: str = self.driver.current_url
        return url[len(self.base):] if url.startswith(self.base) else url

    def h1(self) -> str:
        return str(self.driver.find_element(By.TAG_NAME, "h1").text)

    def login(self, user: str, password: str, then: str = "/") -> None:
        """Log in with the form; ``then`` is the page asked for first."""
        self.go(then)
        self.until(lambda: self.path().startswith("/login"), "the login page")
        self.fill("username", user)
        self.fill("password", password)
        self.driver.find_element(By.ID, "login").click()
        self.until(lambda: not self.path().startswith("/login") or self.alert(), "the login's answer")

    def fill(self, ident: str, text: str) -> None:
        box = self.driver.find_element(By.ID, ident)
        box.clear()
        box.send_keys(text)

    def alert(self) -> str:
        found = self.driver.find_elements(By.CSS_SELECTOR, "[role=alert]")
        return str(found[0].text) if found else ""

    def status(self) -> str:
        return str(self.driver.find_element(By.ID, "status").text)

    # -- reading ----------------------------------------------------------------------------

    def table(self, caption: str) -> list[dict[str, str]]:
        """The rows of the table with ``caption`` as {header: cell text}; [] when the page
        says there are none (no table)."""
        for t in self.driver.find_elements(By.TAG_NAME, "table"):
            if _caption(t) == caption:
                headers = [th.text.strip() for th in t.find_elements(By.CSS_SELECTOR, "thead th")]
                return [dict(zip(headers, [c.text.strip() for c in row.find_elements(By.CSS_SELECTOR, "th, td")]))
                        for row in t.find_elements(By.CSS_SELECTOR, "tbody tr")]
        return []

    def row_element(self, caption: str, match: dict[str, str]) -> Any:
        for t in self.driver.find_elements(By.TAG_NAME, "table"):
            if _caption(t) != caption:
                continue
            headers = [th.text.strip() for th in t.find_elements(By.CSS_SELECTOR, "thead th")]
            for row in t.find_elements(By.CSS_SELECTOR, "tbody tr"):
                cells = dict(zip(headers, [c.text.strip() for c in row.find_elements(By.CSS_SELECTOR, "th, td")]))
                if all(cells.get(k) == v for k, v in match.items()):
                    return row
        raise AssertionError(f"no row {match} in table {caption!r}: {self.table(caption)}")

    def buttons_in_row(self, caption: str, match: dict[str, str]) -> list[str]:
        return [b.text for b in self.row_element(caption, match).find_elements(By.TAG_NAME, "button")]

    def press_in_row(self, caption: str, match: dict[str, str], label: str) -> None:
        for b in self.row_element(caption, match).find_elements(By.TAG_NAME, "button"):
            if b.text == label:
                b.click()
                return
        raise AssertionError(f"no button {label!r} in row {match} of {caption!r}")

    def facts(self, ident: str) -> dict[str, str]:
        """A ``<dl id=ident>``'s terms and their values."""
        dl = self.driver.find_element(By.ID, ident)
        terms = [t.text.strip() for t in dl.find_elements(By.TAG_NAME, "dt")]
        return dict(zip(terms, [d.text.strip() for d in dl.find_elements(By.TAG_NAME, "dd")]))

    def buttons(self) -> list[str]:
        """The labels of the page's buttons (but the menu's Log out)."""
        return [b.text for b in self.driver.find_elements(By.CSS_SELECTOR, "main button")]

    def press(self, label: str) -> None:
        """Click the main region's button labelled ``label`` (its visible text)."""
        for b in self.driver.find_elements(By.CSS_SELECTOR, "main button"):
            if b.text == label:
                b.click()
                return
        raise AssertionError(f"no button {label!r} on {self.path()}: {self.buttons()}")

    def follow(self, text: str) -> None:
        """Click the main region's link ``text``."""
        self.driver.find_element(By.CSS_SELECTOR, "main").find_element(By.LINK_TEXT, text).click()

    def choose(self, ident: str, value: str) -> None:
        from selenium.webdriver.support.ui import Select
        Select(self.driver.find_element(By.ID, ident)).select_by_value(value)

    def accessibility_problems(self) -> list[str]:
        """What a screen reader would miss on the page: inputs without a label, tables
        without a caption or column headers, nameless buttons, not one h1, no skip link
        first, no language."""
        problems: list[str] = self.driver.execute_script(ACCESSIBILITY)
        return problems

    # -- waiting ----------------------------------------------------------------------------

    def until(self, check: Callable[[], T], what: str, timeout: float = DEADLINE) -> T:
        """``check()``'s first truthy answer, asked again until the deadline (the DOM may
        be replaced under it: a stale element is a "not yet")."""
        def ask(_: Any) -> Any:
            try:
                return check()
            except StaleElementReferenceException:
                return None
            except WebDriverException as e:  # the same race, as chromedriver words it mid-lookup
                if "does not belong to the document" in str(e.msg):
                    return None
                raise
        result: T = WebDriverWait(self.driver, timeout, poll_frequency=0.1).until(ask, f"waiting for {what}")
        return result

    def reload_until(self, path: str, check: Callable[[], T], what: str, timeout: float = DEADLINE) -> T:
        """Load ``path`` until ``check()`` is truthy on it: for what the server shows
        only after it happened elsewhere (a client connected, records appended)."""
        def again() -> T:
            self.go(path)
            return check()
        return self.until(again, what, timeout)

    def fetch_status(self, method: str, path: str, form: dict[str, str]) -> int:
        """A request made by the page's own script (with its cookie): its HTTP status."""
        script = """
            const [method, path, form, done] = arguments;
            fetch(path, {method: method, body: new URLSearchParams(form), redirect: "manual",
                         credentials: "same-origin"}).then(r => done(r.status), e => done(-1));
        """
        status: int = self.driver.execute_async_script(script, method, path, form)
        return status

    def csrf(self) -> str:
        """The page's CSRF token (every form that changes something carries it)."""
        token: str = self.driver.find_element(By.CSS_SELECTOR, "input[name=csrf]").get_attribute("value")
        return token


ACCESSIBILITY = """
            const out = [];
            for (const el of document.querySelectorAll("input:not([type=hidden]), select, textarea")) {
                const label = el.id && document.querySelector(`label[for="${el.id}"]`);
                if (!label && !el.getAttribute("aria-label")) out.push("unlabelled " + el.outerHTML);
            }
            for (const t of document.querySelectorAll("table")) {
                if (!t.querySelector("caption")) out.push("table without caption");
                const heads = t.querySelectorAll("thead th[scope=col]");
                if (heads.length === 0 || heads.length !== t.querySelectorAll("thead th").length)
                    out.push("table without column headers: " + t.querySelector("caption")?.textContent);
            }
            for (const b of document.querySelectorAll("button")) {
                if (!b.textContent.trim() && !b.getAttribute("aria-label")) out.push("nameless button");
            }
            if (document.querySelectorAll("h1").length !== 1) out.push("not one h1");
            const first = document.querySelector("a, button, input:not([type=hidden])");
            if (!first || first.getAttribute("href") !== "#main") out.push("no skip link first");
            if (!document.documentElement.lang) out.push("no lang");
            return out;
        """


def _caption(table: Any) -> str:
    found = table.find_elements(By.TAG_NAME, "caption")
    return str(found[0].text).strip() if found else ""
