"""The console's session cookies and CSRF tokens (console/session.py), its HTML escaping
(console/html.py) and where a login may send the browser back to."""

from __future__ import annotations

from typing import Any

from logbus.gateway.http.console.app import _safe_next
from logbus.gateway.http.console.html import Html, action_form, h, table
from logbus.gateway.http.console.session import SESSION_SECONDS, Sessions, cookie_header


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def sessions(hashes: dict[str, str]) -> tuple[Sessions, Clock]:
    clock = Clock()
    return Sessions(clock, hashes.get), clock


def test_a_session_cookie_names_its_user_until_it_expires() -> None:
    s, clock = sessions({"alice": "h1"})
    value, made = s.new("alice")
    checked = s.check(value)
    assert checked is not None and checked.user == "alice" and checked.csrf == made.csrf
    clock.now += SESSION_SECONDS + 1
    assert s.check(value) is None


def test_a_forged_or_mangled_cookie_is_no_session() -> None:
    s, _ = sessions({"alice": "h1", "admin": "h2"})
    value, _ = s.new("alice")
    user, expires, nonce, mac = value.split(".")
    other, _ = s.new("admin")
    for bad in ["", "x", value + "0", f"{other.split('.')[0]}.{expires}.{nonce}.{mac}",
                f"{user}.{int(expires) + 999}.{nonce}.{mac}", f"{user}.{expires}.{nonce}.{'0' * 64}",
                "%%%.1.2.3"]:
        assert s.check(bad) is None, bad
    assert Sessions(Clock(), {"alice": "h1"}.get).check(value) is None  # another key: after a restart


def test_a_changed_password_or_a_deleted_user_ends_the_sessions() -> None:
    hashes = {"alice": "h1"}
    s, _ = sessions(hashes)
    value, _ = s.new("alice")
    hashes["alice"] = "h2"
    assert s.check(value) is None
    hashes["alice"] = "h1"
    assert s.check(value) is not None
    del hashes["alice"]
    assert s.check(value) is None


def test_logging_out_revokes_the_cookie() -> None:
    s, _ = sessions({"alice": "h1"})
    value, made = s.new("alice")
    s.revoke(made)
    assert s.check(value) is None


def test_the_csrf_token_is_bound_to_the_session() -> None:
    s, _ = sessions({"alice": "h1"})
    _, one = s.new("alice")
    _, two = s.new("alice")
    assert one.csrf != two.csrf
    assert Sessions.csrf_ok(one, one.csrf) and not Sessions.csrf_ok(one, two.csrf)
    assert not Sessions.csrf_ok(one, None) and not Sessions.csrf_ok(one, "")
    assert s.basic("alice").csrf == s.basic("alice").csrf != s.basic("bob").csrf


def test_the_cookie_is_http_only_same_site_strict_and_secure_over_tls() -> None:
    assert cookie_header("v", 60, False) == "logbus_session=v; Max-Age=60; Path=/; HttpOnly; SameSite=Strict"
    assert cookie_header("v", 60, True).endswith("; Secure")


def test_everything_put_in_a_page_is_escaped_once() -> None:
    evil = '<script>alert("x")</script>'
    assert h(evil) == "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
    assert h(Html("<b>ok</b>")) == "<b>ok</b>"
    page = table(evil, [evil], [[evil, Html("<em>kept</em>")]])
    assert "<script>" not in page and "<em>kept</em>" in page
    form = action_form("/a", '"><x', evil, {evil: evil}, describe=evil)
    assert "<script>" not in form and '"><x' not in form


class FakeRequest:
    def __init__(self, target: bytes | None) -> None:
        self.args: dict[bytes, list[bytes]] = {} if target is None else {b"next": [target]}


def test_a_login_sends_the_browser_back_to_this_site_only() -> None:
    def after(target: bytes | None) -> str:
        request: Any = FakeRequest(target)
        return _safe_next(request)
    assert after(b"/connections?protocol=mqtt") == "/connections?protocol=mqtt"
    for elsewhere in (b"//evil.example/x", b"https://evil.example/", b"evil", b"/\\evil.example", None):
        assert after(elsewhere) == "/"
