"""Who uses the console: a session cookie made at a form login, or HTTP Basic credentials,
both checked the way the HTTP API checks them (credentials.py: ``Doors.authenticate``,
then ``Doors.authorize`` for the tags).

A session cookie holds ``<user>.<expiry>.<nonce>.<mac>``: the user name (base64url), the
epoch second it expires, 16 random bytes (base64url) and an HMAC-SHA256 of those three and
of the user's stored password hash, under a key made at start and never stored. So:

- a restart logs everyone out (the key is gone);
- a changed password or a deleted user ends that user's sessions (the MAC no longer
  matches), without a session table to keep;
- logging out revokes the nonce until the cookie would have expired (``_revoked``,
  bounded: the oldest revocations go first, their cookies expiring soonest).

The CSRF token of every form that changes something is an HMAC of the session's nonce
(of the user, for HTTP Basic), so a page of another origin cannot make one; the cookie is
also ``SameSite=Strict``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections import OrderedDict
from typing import Callable

SESSION_SECONDS = 8 * 3600  # RabbitMQ's management UI logs out after 8 hours too
COOKIE = "logbus_session"
MAX_REVOKED = 10_000


class Session:
    """A checked session: the user, and the token its forms carry."""

    __slots__ = ("user", "nonce", "expires", "csrf")

    def __init__(self, user: str, nonce: str, expires: int, csrf: str) -> None:
        self.user, self.nonce, self.expires, self.csrf = user, nonce, expires, csrf


class Sessions:
    """Makes and checks session cookies and CSRF tokens. ``password_hash(user)`` is the
    user's stored hash, or None when there is no such user."""

    def __init__(self, clock: Callable[[], float], password_hash: Callable[[str], str | None],
                 key: bytes | None = None) -> None:
        self.clock = clock
        self.password_hash = password_hash
        self._key = key or os.urandom(32)
        self._revoked: OrderedDict[str, int] = OrderedDict()  # nonce -> expiry

    def _mac(self, *parts: str) -> str:
        return hmac.new(self._key, "\x00".join(parts).encode(), hashlib.sha256).hexdigest()

    def new(self, user: str) -> tuple[str, Session]:
        """A session for ``user``, just logged in: (cookie value, session)."""
        nonce = _b64(os.urandom(16))
        expires = int(self.clock()) + SESSION_SECONDS
        stored = self.password_hash(user) or ""
        mac = self._mac("session", user, str(expires), nonce, stored)
        value = f"{_b64(user.encode())}.{expires}.{nonce}.{mac}"
        return value, Session(user, nonce, expires, self._mac("csrf", nonce))

    def check(self, value: str | None) -> Session | None:
        """The session a cookie value stands for, or None: malformed, forged, expired,
        logged out, or its user's password changed or the user deleted."""
        if not value:
            return None
        try:
            raw_user, raw_expires, nonce, mac = value.split(".")
            user = _unb64(raw_user).decode("utf-8")
            expires = int(raw_expires)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None
        stored = self.password_hash(user)
        if stored is None or expires < self.clock() or nonce in self._revoked:
            return None
        if not hmac.compare_digest(mac, self._mac("session", user, raw_expires, nonce, stored)):
            return None
        return Session(user, nonce, expires, self._mac("csrf", nonce))

    def basic(self, user: str) -> Session:
        """The session of a request with HTTP Basic credentials (already checked)."""
        return Session(user, "", 0, self._mac("csrf-basic", user))

    def revoke(self, session: Session) -> None:
        if not session.nonce:
            return
        now = self.clock()
        while self._revoked and (len(self._revoked) >= MAX_REVOKED or next(iter(self._revoked.values())) < now):
            self._revoked.popitem(last=False)
        self._revoked[session.nonce] = session.expires

    @staticmethod
    def csrf_ok(session: Session, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(session.csrf, token)


def cookie_header(value: str, max_age: int, secure: bool) -> str:
    """The ``Set-Cookie`` value: HttpOnly, SameSite=Strict, Path=/ (Secure over TLS)."""
    return (f"{COOKIE}={value}; Max-Age={max_age}; Path=/; HttpOnly; SameSite=Strict"
            + ("; Secure" if secure else ""))


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
