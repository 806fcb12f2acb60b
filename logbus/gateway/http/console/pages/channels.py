"""AMQP channels (``GET /api/channels``): per channel its connection, consumers, prefetch,
unacknowledged deliveries, confirm and transaction modes, and deliveries per second
(differenced between the page's reloads). A ``management`` user sees its own connections'
channels, ``monitoring`` every one."""

from __future__ import annotations

from ...channels import visible_channels
from ..html import Html, table
from ..page import Page, View


def render(view: View) -> Html:
    rows = []
    for c in visible_channels(view.request, view.services, view.console.reads):
        stats = c["message_stats"]
        connection = f"{c['connection']}" + (f" ({c['connection_name']})" if c["connection_name"] else "")
        rows.append((c["name"], c["user"], c["vhost"], connection, c["consumer_count"],
                     c["prefetch_count"] or "unlimited", c["global_prefetch_count"] or "unlimited",
                     c["messages_unacknowledged"], "yes" if c["confirm"] else "no",
                     "yes" if c["transactional"] else "no", stats["deliver_get"],
                     f"{stats['deliver_get_details']['rate']:g}/s"))
    return table("Open channels", ["Channel", "User", "Vhost", "Connection", "Consumers", "Prefetch",
                                   "Global prefetch", "Unacked", "Confirm mode", "Transactional", "Delivered",
                                   "Delivered/s"], rows, numeric=(4, 7, 10, 11),
                 empty="no AMQP channel is open.")


PAGE = Page("channels", "Channels", render)
