"""The start-up log's line for a new user: where the web console is and how to log in.

    web console on http://127.0.0.1:8080/: log in as 'guest' / 'guest' (the first boot's
    administrator, from loopback only; docs/security.md)

The URL is the HTTP listener's bound address (its loopback twin when it listens on every
interface), ``https`` on a TLS listener. The password is named only while it is the
built-in one: one chosen with ``default_pass`` is a secret and stays out of the log.
"""

from __future__ import annotations

from dataclasses import fields

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IAddress

from .config import Settings

BUILT_IN_PASS = next(f.default for f in fields(Settings) if f.name == "default_pass")
_EVERY_INTERFACE = {"0.0.0.0": "127.0.0.1", "::": "::1"}


def console_url(address: IAddress, tls: bool) -> str | None:
    """The web console's URL on an HTTP listener bound to ``address``; None for a Unix socket."""
    if not isinstance(address, (IPv4Address, IPv6Address)):
        return None
    host = _EVERY_INTERFACE.get(address.host, address.host)
    if isinstance(address, IPv6Address):
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{address.port}/"


def console_line(address: IAddress, tls: bool, settings: Settings) -> str:
    url = console_url(address, tls)
    where = f"on {url}" if url else f"on the HTTP listener at {address}"
    user = settings.default_user
    login = (f"'{user}' / '{settings.default_pass}'" if settings.default_pass == BUILT_IN_PASS
             else f"'{user}' with the default_pass setting's password")
    loopback = ", from loopback only" if user in settings.loopback_users else ""
    return f"web console {where}: log in as {login} (the first boot's administrator{loopback}; docs/security.md)"
