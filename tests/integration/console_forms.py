"""The web console's forms as a browser sends them, over plain HTTP (no browser): a login
session, an action's POST with its page's token from the console's own origin, and a wait
with a deadline.

    session = login(server, "guest", "guest")                      # its cookie, as headers
    reply = form_post(Mgmt(server, None), "/queues/declare", "/queues", {"vhost": "/", "name": "q"}, session)
    row = until(lambda: fetch(), lambda r: r is not None, "the row")
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlencode

from tests.integration.mgmt import Mgmt, Reply
from tests.integration.mqtt_clients import WAIT
from tests.serverproc import LogbusServer

T = TypeVar("T")


def login(server: LogbusServer, user: str, password: str) -> dict[str, str]:
    """A console session as the login form makes one: its cookie, as request headers."""
    host, port = server.host_port("http")
    reply = Mgmt(server, None).call("POST", "/login", raw=urlencode({"username": user, "password": password}).encode(),
                                    headers={"Content-Type": "application/x-www-form-urlencoded",
                                             "Origin": f"http://{host}:{port}"})
    assert reply.status == 303, reply
    return {"Cookie": reply.headers["Set-Cookie"].split(";", 1)[0]}


def form_post(m: Mgmt, path: str, page: str, fields: dict[str, str], session: dict[str, str] | None = None) -> Reply:
    """A console action's form as a browser sends it: the token of the page it is on (a
    form of it, or the Log out button of a ``session`` the login form made), from the
    console's own origin."""
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', m.call("GET", page, headers=session).body.decode())
    assert token is not None, f"no form token on {page}"
    host, port = m.server.host_port("http")
    return m.call("POST", path, raw=urlencode({"csrf": token.group(1), **fields}).encode(),
                  headers={**(session or {}), "Content-Type": "application/x-www-form-urlencoded",
                           "Origin": f"http://{host}:{port}"})


def until(fetch: Callable[[], T], ready: Callable[[T], bool], what: str) -> T:
    """``fetch()``'s first answer that is ``ready``, asked again until a deadline."""
    deadline = time.monotonic() + WAIT
    while True:
        value = fetch()
        if ready(value):
            return value
        assert time.monotonic() < deadline, (what, value)
        time.sleep(0.05)
