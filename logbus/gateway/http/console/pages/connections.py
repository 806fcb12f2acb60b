"""The clients' connections (``Admin.list_connections``): AMQP, MQTT and Kafka, with a
Close button, under the rules of ``GET`` and ``DELETE /api/connections``: a management
user sees and may close its own, monitoring sees every one, an administrator may close
any. Each shows the name the client gave (AMQP connection_name, MQTT client id, Kafka
client.id), its software where the protocol says (AMQP client properties, Kafka
ApiVersions), when it was accepted (UTC), what it carried and its messages per second in
and out (differenced between the page's reloads).

HTTP connections are not listed, as RabbitMQ's management UI lists none: each carries
requests, not a session, and most are the console's own (the browser viewing this page
holds several); /api/connections and ``logbus connection list`` list them."""

from __future__ import annotations

from .....core.types import ConnectionRecord
from ...connections import PROTOCOLS, connection_rates
from ...rates import Watched
from ...responses import HttpError
from ..html import Html, action_form, h, size, table
from ..page import Page, PageAction, View
from ..rates import chart, live, rate_facts

CLIENT_PROTOCOLS = tuple(p for p in PROTOCOLS if p != "http")  # what the console lists (and the overview counts)


def render(view: View) -> Html:
    protocol = view.arg("protocol", "")
    listed = view.admin.list_connections(protocol if protocol in CLIENT_PROTOCOLS else None)
    records = sorted((c for c in listed if c.protocol in CLIENT_PROTOCOLS), key=lambda c: c.id)
    sees_all, closes_any = view.can("monitor"), view.can("administer")
    if not sees_all:
        records = [c for c in records if c.user == view.user]
    rows = []
    for c in records:
        button: object = ""
        if closes_any or c.user == view.user:
            button = action_form("/connections/close", view.csrf, "Close", {"id": c.id},
                                 describe=f"Close {c.protocol} connection {c.id} of {c.user or 'no user'}",
                                 danger=True)
        software = " ".join(x for x in (c.client_product, c.client_version) if x)
        rate = connection_rates(view.console.reads, c)
        link = Html(f'<a href="/connections/{c.id}">{c.id}</a>')
        rows.append((link, c.protocol, c.user, c.vhost, c.peer, "yes" if c.tls else "no", c.client_id, software,
                     c.connected_at, c.received, c.sent, f"{rate['received']:g}/s", f"{rate['sent']:g}/s",
                     size(c.bytes_in), size(c.bytes_out), button))
    options = "".join(f'<option value="{h(p)}"{" selected" if p == protocol else ""}>{h(p.upper())}</option>'
                      for p in CLIENT_PROTOCOLS)
    filter_form = ('<form method="get" action="/connections" class="filters"><label for="protocol">Protocol</label>'
                   f'<select id="protocol" name="protocol"><option value="">all</option>{options}</select>'
                   '<button type="submit">Show</button></form>')
    headers = ["Id", "Protocol", "User", "Vhost", "Peer", "TLS", "Client id", "Client software", "Connected at (UTC)",
               "Messages in", "Messages out", "In/s", "Out/s", "Bytes in", "Bytes out", "Action"]
    return Html(filter_form + table("Open connections", headers, rows, numeric=(0, 9, 10, 11, 12, 13, 14))
                + '<p class="legend">HTTP connections (the API\'s and this console\'s own) are not listed:'
                ' <code>GET /api/connections?protocol=http</code> lists them.</p>')


def _record(view: View, parts: list[str]) -> ConnectionRecord:
    """The connection a page names, if the user sees it (404 otherwise)."""
    ident = parts[0] if len(parts) == 1 else ""
    record = next((c for c in view.admin.list_connections() if str(c.id) == ident
                   and c.protocol in CLIENT_PROTOCOLS), None)
    if record is None or not (view.can("monitor") or record.user == view.user):
        raise HttpError(404, "not_found", f"no connection {ident!r}")
    return record


def watch(view: View, parts: list[str]) -> Watched:
    """The connection's messages and bytes, sampled while its page is open."""
    ident = _record(view, parts).id
    admin = view.admin

    def read() -> dict[str, int] | None:
        c = next((c for c in admin.list_connections() if c.id == ident), None)
        return None if c is None else {"received": c.received, "sent": c.sent, "bytes_in": c.bytes_in,
                                       "bytes_out": c.bytes_out}

    return view.console.objects.watch(view.reactor, ("connection", ident), read)


def detail(view: View, parts: list[str]) -> tuple[str, Html]:
    c = _record(view, parts)
    here = f"/connections/{c.id}"
    software = " ".join(x for x in (c.client_product, c.client_version) if x)
    facts = [("Protocol", c.protocol), ("User", c.user), ("Vhost", c.vhost), ("Peer", c.peer),
             ("TLS", "yes" if c.tls else "no"), ("Client id", c.client_id), ("Client software", software),
             ("Connected at (UTC)", c.connected_at), ("Messages in", c.received), ("Messages out", c.sent),
             ("Bytes in", size(c.bytes_in)), ("Bytes out", size(c.bytes_out))]
    figures = Html('<dl class="facts" id="connection-facts">'
                   + "".join(f"<dt>{h(k)}</dt><dd>{h(v)}</dd>" for k, v in facts) + "</dl>"
                   + rate_facts(watch(view, parts), (("received", "Messages in"), ("sent", "Messages out")),
                                "connection-rates"))
    title = f"{c.protocol.upper()} connection {c.id}"
    if view.arg("live", "") == "1":
        return title, live(here, figures)
    return title, Html(live(here, figures) + chart(f"connections/{c.id}", "connection",
                                                   "Messages per second from the client (solid blue line) and to it"
                                                   " (dashed red line)."))


def close(view: View) -> str:
    id = view.int_arg("id")
    record = next((c for c in view.admin.list_connections() if c.id == id), None)
    if not view.can("administer") and (record is None or record.user != view.user):
        raise HttpError(403, "forbidden", f"user '{view.user}' may close only its own connections")
    if record is not None and record.protocol not in CLIENT_PROTOCOLS:
        raise HttpError(400, "bad_request", f"connection {id} is an HTTP connection: the console closes"
                                            " AMQP, MQTT and Kafka connections (DELETE /api/connections/<id>"
                                            " closes any)")
    if not view.admin.close_connection(id):
        raise HttpError(404, "unknown_connection", f"no connection {id}")
    return f"Connection {id} closed."


PAGE = Page("connections", "Connections", render, detail=detail, watch=watch, actions={"close": PageAction(close)})
