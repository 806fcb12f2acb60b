"""The web console: server-rendered HTML pages on the HTTP listener, at ``/`` beside the
JSON API (RabbitMQ's management UI, over the same checks as the API).

    app.py        Console, the root resource: login (session cookie or HTTP Basic), the
                  tag check, CSRF, pages and their actions, errors as pages
    session.py    signed session cookies and CSRF tokens
    page.py       Page (what a page module exports), View (what its functions get)
    layout.py     the frame of every page; the login and error pages
    html.py       escaping and the helpers pages build HTML with (tables, forms)
    rates.py      the overview chart's message rates, sampled while someone looks
    static.py     static/ served at /static/<hash>/<file>, cached for a year
    pages/        one module per page
    static/       console.css, console.js, vendor/ (htmx, uPlot: versions in vendor/VERSIONS)

``build_console(services)`` is what site.py mounts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..services import Services
    from .app import Console


def build_console(services: Services) -> Console:
    from .app import Console
    from .pages import PAGES
    return Console(services, PAGES)
