"""The console's resource tree: ``Console`` is the root of the HTTP listener (``/``), with
the JSON API, /healthz and /metrics as its children (site.py) and the console's own paths
beside them:

    GET  /                     the overview page (pages/overview.py)
    GET  /<page>               a page (pages/__init__.py lists them); ?partial=1: only its
                               main region (what htmx reloads)
    GET  /<page>/<a>[/<b>]     one object's page (Page.detail: a queue, a group, a topic)
    POST /<page>/<action>      a page's action: CSRF token checked, then 303 back to /<page>
                               (or to the form's ``back``, a path of this site)
    GET  /login, POST /login   the login form; POST /logout
    GET  /rates.json           the overview charts' series (rates.py): rates, and the
                               queue depth under "depth"
    GET  /static/<hash>/<file> CSS and JavaScript (static.py)

Every path but /login and /static asks for a user with the ``management`` tag (or more),
as RabbitMQ's management UI: a session cookie (session.py) or HTTP Basic credentials,
checked as the JSON API checks them (credentials.py). Without either, a page redirects to
/login (303) and anything else is 401. A path the console does not know is the JSON API's
404, as before the console.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence
from urllib.parse import quote, unquote, urlencode, urlsplit

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.python.failure import Failure
from twisted.web import resource, server

from ....core.errors import LogbusError
from ..alarms import AlarmGate
from ..credentials import LoginPending, authenticate, check_password, require, set_user
from ..resource import NotFound
from ..responses import HttpError, status_for
from .html import Html, h
from .layout import error_page, layout, login_page
from .page import Page, View
from ..rates import ObjectRates, ReadRates
from .rates import Rates
from .session import COOKIE, SESSION_SECONDS, Session, Sessions, cookie_header
from .static import Static, load

if TYPE_CHECKING:
    from ..services import Services

log = logging.getLogger(__name__)
audit_log = logging.getLogger("logbus.audit")

_SESSION = "logbus_console_session"  # the request attribute the checked Session is kept in
SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
                                " frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
)


class NeedLogin(Exception):
    """No session and no credentials."""


class Console(resource.Resource):
    def __init__(self, services: Services, pages: Sequence[Page], clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.services = services  # what the JSON API's checks and changes take (topology.py)
        self.doors, self.admin, self.topics = services.doors, services.admin, services.topics
        self.clock = clock
        self.started = clock()
        self.pages = {p.path: p for p in pages}
        self.nav = list(pages)
        self.sessions = Sessions(clock, self._password_hash)
        self.static = Static(load())
        self.rates = Rates(services.admin)
        self.objects = ObjectRates()  # the objects whose pages are open, sampled for their charts
        self.reads = ReadRates(clock)  # rates of a list's rows, differenced between its reloads
        self.gate = AlarmGate(services.doors, services.metrics)

    def _password_hash(self, user: str) -> str | None:
        found = self.admin.find_user(user)
        return None if found is None else found.password_hash

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"static":
            return self.static
        if path == b"login":
            return Login(self)
        if path == b"logout":
            return Logout(self)
        if path == b"rates.json":
            return RatesJson(self)
        page = self.pages.get(path.decode("utf-8", "replace"))
        if page is None:
            return NotFound()
        return PageResource(self, page)

    def render(self, request: server.Request) -> bytes | int:  # "/" itself (no trailing name)
        return PageResource(self, self.pages[""]).render(request)

    # -- who asks -------------------------------------------------------------------------

    def session_of(self, request: server.Request) -> Session:
        """The request's user as a Session, with the ``management`` tag: from its session
        cookie, else its HTTP Basic credentials (LoginPending while checked); NeedLogin
        without either, HttpError 401 for wrong credentials, 403 without the tag."""
        known: Session | None = getattr(request, _SESSION, None)
        if known is not None:
            return known
        cookie = request.getCookie(COOKIE.encode())
        session = self.sessions.check(cookie.decode("latin-1")) if cookie else None
        if session is not None:
            set_user(request, self.doors, session.user, how="console session")  # what require() asks about
        elif request.getHeader("authorization") is not None:
            session = self.sessions.basic(authenticate(request, self.doors))
        else:
            raise NeedLogin()
        require(request, self.doors, "manage")
        setattr(request, _SESSION, session)
        return session

    def view(self, request: server.Request) -> View:
        return View(self, request, self.session_of(request), self.clock())

    def urls(self) -> dict[str, str]:
        s = self.static
        return {"css": s.url("console.css"), "js": s.url("console.js"),
                "htmx": s.url("vendor/htmx/htmx.min.js"), "uplot": s.url("vendor/uplot/uPlot.iife.min.js"),
                "uplot_css": s.url("vendor/uplot/uPlot.min.css")}


class ConsoleResource(resource.Resource):
    """One console path: ``answer(request)`` returns the HTML (or raises); here the
    login is waited for, and errors become pages."""

    isLeaf = True
    login_redirect = True  # an HTML page: without a login, a GET is sent to the form (else 401)

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console

    def render(self, request: server.Request) -> bytes | int:
        try:
            if request.method == b"POST":
                check_origin(request)
            result = self.answer(request)
        except LoginPending as pending:  # the password is checked off the reactor: again when known
            pending.checked.addCallback(lambda _: self._again(request))
            return server.NOT_DONE_YET
        except Exception as exc:
            return self._failed(Failure(exc), request)
        if isinstance(result, Deferred):
            result.addCallbacks(lambda body: _finish(request, body),
                                lambda f: _finish(request, self._failed(f, request)))
            return server.NOT_DONE_YET
        return result

    def answer(self, request: server.Request) -> bytes | int | Deferred[bytes]:
        """The body (or NOT_DONE_YET, or a Deferred body); raises to answer an error page."""
        raise NotImplementedError

    def _again(self, request: server.Request) -> None:
        if request.finished or request.channel is None:
            return
        body = self.render(request)
        if body is not server.NOT_DONE_YET:
            assert isinstance(body, bytes)
            _finish(request, body)

    def _failed(self, failure: Failure, request: server.Request) -> bytes | int:
        exc = failure.value
        if isinstance(exc, NeedLogin):
            if self.login_redirect and request.method in (b"GET", b"HEAD") and not request.getHeader("hx-request"):
                target = request.uri.decode("latin-1")
                return redirect(request, "/login?" + urlencode({"next": target}))
            request.setHeader(b"HX-Redirect", b"/login")
            return self.error(request, 401, "Log in first.")
        if isinstance(exc, HttpError):
            for name, value in exc.headers:
                if name.lower() != "www-authenticate":  # no browser dialog: the form is the way in
                    request.setHeader(name.encode(), value.encode())
            if exc.delay:  # a login refused once too often from this host: answered later
                site: Any = request.site
                site.reactor.callLater(exc.delay, _finish, request, self.error(request, exc.status, exc.message))
                return server.NOT_DONE_YET
            return self.error(request, exc.status, exc.message)
        if isinstance(exc, LogbusError):
            return self.error(request, status_for(exc.code), str(exc))
        log.error("console %s %r failed: %s", request.method.decode("latin-1"), request.uri, failure.getTraceback())
        return self.error(request, 500, "Internal error (see the broker log).")

    def error(self, request: server.Request, status: int, message: str) -> bytes:
        request.setResponseCode(status)
        return html_response(request, error_page(status, message, self.console.urls()))


class PageResource(ConsoleResource):
    def __init__(self, console: Console, page: Page) -> None:
        super().__init__(console)
        self.page = page

    def answer(self, request: server.Request) -> bytes | Deferred[bytes]:
        view = self.console.view(request)
        view.require(self.page.needs)
        rest = [p for p in request.postpath or [] if p]
        if request.method == b"POST":
            if len(rest) != 1:
                raise HttpError(404, "not_found", "no such action")
            return self.act(view, rest[0].decode("utf-8", "replace"))
        if request.method not in (b"GET", b"HEAD"):
            raise HttpError(405, "method_not_allowed", "use GET, or POST to an action")
        title = None
        if rest and self.page.detail is not None:
            title, content = self.page.detail(view, [p.decode("utf-8", "replace") for p in rest])
        elif rest:
            raise HttpError(404, "not_found", f"no such page: {request.path.decode('latin-1')}")
        else:
            if self.page.path == "":
                self.console.rates.watched(_reactor(request))
            content = self.page.render(view)
        body = region(self.page, content, request, refresh=title is None)
        if view.arg("partial", "") == "1":
            return html_response(request, body)
        return html_response(request, layout(self.page, body, view, self.console, view.arg("done", ""), title))

    def act(self, view: View, name: str) -> bytes | Deferred[bytes]:
        action = self.page.actions.get(name)
        if action is None:
            raise HttpError(404, "not_found", f"page {self.page.title!r} has no action {name!r}")
        if not self.console.sessions.csrf_ok(view.session, view.arg("csrf", "")):
            raise HttpError(403, "forbidden", "The form's token is missing or stale: reload the page and try again.")
        request = view.request
        run: Callable[[View], Any] = action.run  # a sentence, or a Deferred of one
        d: Deferred[str | None] = maybeDeferred(run, view)

        def done(message: str | None) -> bytes:
            audit_log.info("user %r from %s: console %s %s -> done", view.user,
                           getattr(request.getClientAddress(), "host", "?"), self.page.path or "overview", name)
            back = _safe_path(view.arg("back", "")) or "/" + quote(self.page.path)
            sep = "&" if "?" in back else "?"
            return redirect(request, back + (sep + urlencode({"done": message}) if message else ""))
        return d.addCallback(done)


def region(page: Page, body: Html, request: server.Request, refresh: bool = True) -> Html:
    """The page's main region: what htmx reloads every ``refresh_seconds``, with the
    request's query (a filter) but for the last action's message. One object's page (a
    queue) is not reloaded: its forms would be, under the hands of who fills them in."""
    if not page.refresh_seconds or not refresh:
        return Html(f'<div id="region">{body}</div>')
    args: dict[bytes, list[bytes]] = request.args or {}
    query = [(k, v) for k, values in args.items() if k not in (b"done", b"partial") for v in values]
    url = request.path.decode("latin-1") + "?" + urlencode([*query, (b"partial", b"1")])
    return Html(f'<div id="region" hx-get="{h(url)}" hx-trigger="every {page.refresh_seconds}s"'
                f' hx-swap="outerHTML" hx-select="#region">{body}</div>')


class Login(ConsoleResource):
    def answer(self, request: server.Request) -> bytes | int | Deferred[bytes]:
        target = _safe_next(request)
        if request.method == b"POST":
            return self.log_in(request, target)
        try:
            self.console.session_of(request)
        except (NeedLogin, HttpError):
            return html_response(request, login_page(self.console.urls(), target, ""))
        return redirect(request, target)

    def log_in(self, request: server.Request, target: str) -> bytes | int:
        args: dict[bytes, list[bytes]] = request.args or {}
        user = (args.get(b"username") or [b""])[0].decode("utf-8", "replace")
        password = (args.get(b"password") or [b""])[0].decode("utf-8", "replace")
        # checked as the API checks HTTP Basic credentials: the login cache, the password
        # thread, the refusal log and the slow-down of repeated failures
        try:
            name = check_password(request, self.console.doors, user, password, how="console login")
        except HttpError as exc:
            if exc.status != 401:
                raise
            request.setResponseCode(401)
            body = html_response(request, login_page(self.console.urls(), target, "Login failed: wrong user name"
                                                     " or password."))
            if exc.delay:
                site: Any = request.site
                site.reactor.callLater(exc.delay, _finish, request, body)
                return server.NOT_DONE_YET
            return body
        try:
            require(request, self.console.doors, "manage")
        except HttpError as exc:
            request.setResponseCode(403)
            return html_response(request, login_page(self.console.urls(), target, f"Login refused: {exc.message}"
                                                     " (the console needs the management tag, or more)."))
        value, _ = self.console.sessions.new(name)
        request.setHeader(b"Set-Cookie", cookie_header(value, SESSION_SECONDS, request.isSecure()).encode())
        return redirect(request, target)


class Logout(ConsoleResource):
    def answer(self, request: server.Request) -> bytes:
        if request.method != b"POST":
            raise HttpError(405, "method_not_allowed", "log out with the Log out button (POST)")
        view = self.console.view(request)
        if not self.console.sessions.csrf_ok(view.session, view.arg("csrf", "")):
            raise HttpError(403, "forbidden", "The form's token is missing or stale.")
        self.console.sessions.revoke(view.session)
        request.setHeader(b"Set-Cookie", cookie_header("", 0, request.isSecure()).encode())
        return redirect(request, "/login")


class RatesJson(ConsoleResource):
    """The charts' series: the overview's, or (``?object=<page>/<vhost>/<name>``, as the
    object's page names itself) one object's, sampled while its page is open."""

    login_redirect = False

    def answer(self, request: server.Request) -> bytes:
        view = self.console.view(request)
        request.setHeader(b"Content-Type", b"application/json")
        request.setHeader(b"Cache-Control", b"no-store")
        wanted = view.arg("object", "")
        if wanted:
            page_path, _, rest = wanted.partition("/")
            page = self.console.pages.get(page_path)
            if page is None or page.watch is None:
                raise HttpError(404, "not_found", f"no chart of {wanted!r}")
            view.require(page.needs)
            watched = page.watch(view, [unquote(p) for p in rest.split("/")])
            return json.dumps(watched.series()).encode()
        rates = self.console.rates
        rates.watched(_reactor(request))
        return json.dumps({**rates.series(), "depth": rates.depth()}).encode()


def check_origin(request: server.Request) -> None:
    """A POST a browser sends from a page of another site says so in its ``Origin``
    header: refused (403), the login form's included, before anything is read from it.
    (Non-browser clients send no Origin; their credentials are their own.)"""
    origin = request.getHeader("origin")
    if origin is None:
        return
    host = request.getHeader("host") or ""
    if urlsplit(origin).netloc.lower() != host.lower():
        raise HttpError(403, "forbidden", "The form was sent from another site.")


def _reactor(request: server.Request) -> Any:
    site: Any = request.site  # an ApiSite (site.py)
    return site.reactor


def _safe_next(request: server.Request) -> str:
    """Where to go after the login: a path of this site only (no ``//host`` or scheme)."""
    args: dict[bytes, list[bytes]] = request.args or {}
    return _safe_path((args.get(b"next") or [b"/"])[0].decode("utf-8", "replace")) or "/"


def _safe_path(target: str) -> str:
    """``target`` if it is a path of this site (no ``//host``, scheme or backslash), else ""."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return ""
    return target


def html_response(request: server.Request, page: str) -> bytes:
    request.setHeader(b"Content-Type", b"text/html; charset=utf-8")
    for name, value in SECURITY_HEADERS:
        request.setHeader(name.encode(), value.encode())
    body = page.encode()
    request.setHeader(b"Content-Length", str(len(body)).encode())
    return b"" if request.method == b"HEAD" else body


def redirect(request: server.Request, location: str) -> bytes:
    request.setResponseCode(303)
    request.setHeader(b"Location", location.encode())
    return html_response(request, f'<!doctype html><title>See other</title><a href="{h(location)}">Continue</a>')


def _finish(request: server.Request, body: bytes | int) -> None:
    if request.finished or request.channel is None:  # the client went away
        return
    if body is server.NOT_DONE_YET:
        return
    assert isinstance(body, bytes)
    if body:
        request.write(body)
    request.finish()
