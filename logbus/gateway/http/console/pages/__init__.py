"""The console's pages, in the order of the menu. A page is one module exporting
``PAGE`` (page.py says what it holds); adding one is writing that module and naming it
here."""

from __future__ import annotations

from ..page import Page
from . import (channels, connections, exchanges, groups, mqtt, node, overview, permissions, pop, queues, topics, users,
               vhosts)

PAGES: tuple[Page, ...] = (
    overview.PAGE,
    node.PAGE,
    queues.PAGE,
    exchanges.PAGE,
    groups.PAGE,
    connections.PAGE,
    channels.PAGE,
    mqtt.PAGE,
    topics.PAGE,
    pop.PAGE,
    users.PAGE,
    vhosts.PAGE,
    permissions.PAGE,
)
