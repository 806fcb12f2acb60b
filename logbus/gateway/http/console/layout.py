"""The frame of every console page: head, skip link, navigation, who is logged in, the
status line an action's result is announced in (``aria-live``), the main region; and the
login and error pages. Text is escaped with ``h`` (html.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

from .html import Html, h, hidden

if TYPE_CHECKING:
    from .app import Console
    from .page import Page, View

HTMX_CONFIG = '{"includeIndicatorStyles": false, "allowEval": false, "allowScriptTags": false}'


def _head(title: str, urls: dict[str, str]) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="htmx-config" content="{h(HTMX_CONFIG)}">'
            f"<title>{h(title)} · logbus</title>"
            '<link rel="icon" href="data:,">'  # no /favicon.ico request
            f'<link rel="stylesheet" href="{h(urls["uplot_css"])}">'
            f'<link rel="stylesheet" href="{h(urls["css"])}">'
            f'<script src="{h(urls["htmx"])}" defer></script>'
            f'<script src="{h(urls["uplot"])}" defer></script>'
            f'<script src="{h(urls["js"])}" defer></script></head>')


def layout(page: Page, region: Html, view: View, console: Console, done: str, title: str | None = None) -> str:
    """A page's frame; ``title``: one object's page (a queue), under its page's menu entry."""
    links = []
    for p in console.nav:
        if not view.can(p.needs):
            continue
        current = ' aria-current="page"' if p is page and title is None else ""
        links.append(f'<li><a href="/{h(quote(p.path))}"{current}>{h(p.nav or p.title)}</a></li>')
    logout = (f'<form method="post" action="/logout" class="inline">{hidden("csrf", view.csrf)}'
              f'<button type="submit">Log out</button></form>') if view.session.nonce else ""
    status = f"{h(done)}" if done else ""
    heading = page.title if title is None else title
    header = page.header(view) if page.header and title is None else ""
    return (_head(heading, console.urls())
            + '<body><a class="skip" href="#main">Skip to main content</a>'
            f'<header><a class="brand" href="/">logbus</a>'
            f'<nav aria-label="Main"><ul>{"".join(links)}</ul></nav>'
            f'<div class="who">Logged in as <strong>{h(view.user)}</strong> {logout}</div></header>'
            f'<main id="main" tabindex="-1"><h1>{h(heading)}</h1>'
            f'<p id="status" role="status" aria-live="polite">{status}</p>'
            f"{header}{region}</main></body></html>")


def login_page(urls: dict[str, str], target: str, problem: str) -> str:
    alert = f'<p class="problem" role="alert">{h(problem)}</p>' if problem else ""
    return (_head("Log in", urls)
            + '<body><a class="skip" href="#main">Skip to main content</a>'
            '<header><span class="brand">logbus</span></header>'
            '<main id="main" tabindex="-1" class="narrow"><h1>Log in</h1>'
            f"{alert}"
            f'<form method="post" action="/login" class="block">{hidden("next", target)}'
            '<div class="field"><label for="username">User name</label>'
            '<input id="username" name="username" type="text" autocomplete="username" required autofocus></div>'
            '<div class="field"><label for="password">Password</label>'
            '<input id="password" name="password" type="password" autocomplete="current-password" required></div>'
            '<button type="submit" id="login">Log in</button></form>'
            "<p>Users with the management, policymaker, monitoring or administrator tag may log in.</p>"
            "</main></body></html>")


def error_page(status: int, message: str, urls: dict[str, str]) -> str:
    return (_head(f"Error {status}", urls)
            + '<body><a class="skip" href="#main">Skip to main content</a>'
            '<header><a class="brand" href="/">logbus</a></header>'
            f'<main id="main" tabindex="-1"><h1>Error {status}</h1>'
            f'<p class="problem" role="alert">{h(message)}</p>'
            '<p><a href="/">Back to the overview</a></p>'
            "</main></body></html>")
