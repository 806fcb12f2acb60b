"""What a console page is: ``Page``, the one value a page module exports, and ``View``,
what its functions are given.

A page module (pages/*.py) defines ``PAGE = Page(...)``: its path under ``/``, its title,
the tag action a user needs to see it (RabbitMQ's: "manage", "monitor", "administer"),
``render(view) -> Html`` (the page's main region), and its ``actions``: each a button or
form that POSTs to ``/<path>/<action>`` and is run by ``PageAction.run(view)``. The app
(app.py) does the rest the same way for every page: login, the tag check, the CSRF check,
the layout, redirecting back after an action (POST, redirect, GET), errors as HTML pages.

``run`` checks what the user may do with ``view.require`` (the checks of the JSON API,
credentials.py), so a forged POST is refused 403 whatever the page showed; ``render``
shows a button only when ``view.can`` says the same check would pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Union

from twisted.internet.defer import Deferred
from twisted.web import server

from ....core.errors import Refused
from ....core.types import Action, Perm, Resource
from ..credentials import allowed, require
from ..responses import HttpError
from .html import Html
from .session import Session

if TYPE_CHECKING:
    from ..rates import Watched
    from .app import Console

Done = Union[str, None, "Deferred[str | None]"]  # what an action says it did, now or later


@dataclass(frozen=True)
class PageAction:
    """A change a page offers: ``run(view)`` does it (or raises HttpError / a core
    error) and returns the sentence shown after it, or a Deferred of it."""

    run: Callable[[View], Done]


@dataclass(frozen=True)
class Page:
    path: str  # served at /<path>; "" is the overview at /
    title: str
    render: Callable[[View], Html]
    needs: Action = "manage"
    actions: dict[str, PageAction] = field(default_factory=dict)
    refresh_seconds: int = 5  # htmx reloads the main region this often (0: never)
    header: Callable[[View], Html] | None = None  # above the region, not reloaded (a chart)
    nav: str = ""  # the link's text in the menu (default: the title)
    # GET /<path>/<a>/<b>...: one object's page (a queue, a group, a topic), given the
    # path's segments (URL-decoded); answers its title and body
    detail: Callable[[View, list[str]], tuple[str, Html]] | None = None
    # one object's counters, sampled while its page is open (its chart: /rates.json?object=
    # <path>/<a>/<b>, the segments URL-encoded); 404 when it is not there or not seen
    watch: Callable[[View, list[str]], Watched] | None = None


class View:
    """One request to a page: the ports, who asks, the form's values, and the checks."""

    def __init__(self, console: Console, request: server.Request, session: Session, now: float) -> None:
        self.console = console  # the app: its start time, its rate sampler
        self.services = console.services  # the ports, as the JSON API's shared checks take them
        self.doors, self.admin, self.topics = console.doors, console.admin, console.topics
        self.request = request
        self.session = session
        self.user = session.user
        self.csrf = session.csrf
        self.now = now

    @property
    def reactor(self) -> Any:
        site: Any = self.request.site  # an ApiSite (site.py)
        return site.reactor

    def can(self, action: Action, resource: Resource | None = None) -> bool:
        """Whether the user may ``action`` (a tag's action or a permission on ``resource``)."""
        return allowed(self.request, self.doors, action, resource)

    def require(self, action: Action, resource: Resource | None = None) -> None:
        """``can``, or HttpError 403 with the broker's reason."""
        require(self.request, self.doors, action, resource)

    def can_topic(self, perm: Perm, topic: str) -> bool:
        try:
            self.doors.authorize_topic(self.user, perm, topic)
        except Refused:
            return False
        return True

    def require_topic(self, perm: Perm, topic: str) -> None:
        try:
            self.doors.authorize_topic(self.user, perm, topic)
        except Refused as exc:
            raise HttpError(403, "forbidden", str(exc)) from None

    def arg(self, name: str, default: str | None = None) -> str:
        """A form (or query) value as text; 400 when it is missing and has no default."""
        args: dict[bytes, list[bytes]] = self.request.args or {}
        raw = args.get(name.encode())
        if not raw:
            if default is None:
                raise HttpError(400, "bad_request", f"the form has no field {name!r}")
            return default
        try:
            return raw[0].decode("utf-8")
        except UnicodeDecodeError:
            raise HttpError(400, "bad_request", f"field {name!r} is not UTF-8") from None

    def flag(self, name: str) -> bool:
        """A checkbox: ticked (sent) or not."""
        return self.arg(name, "") not in ("", "false", "0")

    def json_arg(self, name: str, what: str = "a JSON object") -> dict[str, Any]:
        """A text area holding a JSON object (empty: {}); 400 when it is anything else."""
        text = self.arg(name, "").strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise HttpError(400, "bad_request", f"field {name!r} is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise HttpError(400, "bad_request", f"field {name!r} must be {what}, like {{\"x-max-length\": 1000}}")
        return value

    def int_arg(self, name: str, default: int | None = None) -> int:
        text = self.arg(name, None if default is None else "")
        if text == "" and default is not None:
            return default
        try:
            return int(text)
        except ValueError:
            raise HttpError(400, "bad_request", f"field {name!r} must be a whole number") from None
