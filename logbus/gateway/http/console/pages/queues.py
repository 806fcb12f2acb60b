"""Queues of every kind (``Admin.list_queues``) as ``GET /api/queues`` shows them: AMQP's
declared queues, MQTT sessions and shared subscriptions, pop groups; only those of the
vhosts the user sees (a pop group: its topic's vhost, queues.py ``sees_queue``).

    /queues?name=&vhost=&kind=&sort=ready&dir=desc   the table: filtered and sorted by
                                                     the query, links in the headers
    /queues/<vhost>/<name>                           one queue: its figures and a browse
                                                     of its first ready messages (nothing
                                                     taken); a pop group's vhost is ``~``
    /queues/<vhost>/<name>?confirm=purge             the purge's confirmation
    /queues/<vhost>/<name>?confirm=delete            the delete's confirmation
    POST /queues/purge                               ``DELETE /api/queues/<v>/<q>/contents``:
                                                     read on the queue (a pop group: on
                                                     its topic)
    POST /queues/declare | delete                    ``PUT`` / ``DELETE /api/queues/<v>/<q>``
                                                     (topology.py: configure on the queue)

An AMQP queue's page lists its consumers (prefetch, ack mode, channel and connection) and
the bindings to it, with a form to add one and a button to remove each (posted to
``/exchanges/bind`` and ``/exchanges/unbind``).

A pop group's page also says how many of its dead letters wait, with the pop groups
page's Replay button (``POST /pop-groups/replay``: the same check as the API's replay).
"""

from __future__ import annotations

from typing import Any, Callable
from urllib.parse import quote, urlencode

from .....core.errors import LogbusError
from .....core.types import QueueInfo, Resource, dlq_topic
from ... import topology
from ...queues import POP_PATH as POP_PATH_VHOST
from ...queues import sees_queue
from ...responses import HttpError
from ..html import (Html, action_form, checkbox, confirm_button, confirmation, field, form, get_form, h, select,
                    size, table, textarea)
from ...rates import Watched
from ..page import Page, PageAction, View
from ..rates import chart, live, rate_facts
from .exchanges import bind_form, bindings_section, configures_somewhere

KINDS = ("classic", "session", "shared", "pop")
BROWSE = 10  # ready messages a queue's page shows (?count= up to 100)
PREVIEW = 120  # characters of a payload shown

# the table's columns: header, what it sorts by, and whether it is a number
COLUMNS: tuple[tuple[str, str, Callable[[QueueInfo], Any], bool], ...] = (
    ("Name", "name", lambda q: q.name, False),
    ("Vhost", "vhost", lambda q: q.vhost, False),
    ("Kind", "kind", lambda q: q.kind, False),
    ("Ready", "ready", lambda q: q.ready, True),
    ("Unacked", "unacked", lambda q: q.unacked, True),
    ("Scheduled", "scheduled", lambda q: q.scheduled, True),
    ("Consumers", "consumers", lambda q: q.consumers, True),
    ("Routed", "routed", lambda q: q.stats.routed, True),
    ("Delivered", "delivered", lambda q: q.stats.delivered, True),
)


def path_of(q: QueueInfo) -> str:
    """The queue's page: /queues/<vhost>/<name>, each one path segment (pop groups: ``~``)."""
    return f"/queues/{quote(q.vhost or POP_PATH_VHOST, safe='')}/{quote(q.name, safe='')}"


def _visible(view: View) -> list[QueueInfo]:
    return [q for q in view.admin.list_queues() if sees_queue(view.doors, view.user, q.vhost, q.name)]


def filters(view: View) -> Html:
    """The filter form (above the reloaded table: what is typed in it stays)."""
    vhosts = sorted({q.vhost for q in _visible(view)})
    keep = {k: view.arg(k, "") for k in ("sort", "dir") if view.arg(k, "")}
    return Html(get_form("/queues", "Filter queues", [
        field("name", "Name contains", value=view.arg("name", "")),
        select("vhost", "Vhost", [("", "all"), *((v or POP_PATH_VHOST, v or "~ (pop groups)") for v in vhosts)],
               view.arg("vhost", "")),
        select("kind", "Kind", [("", "all"), *((k, k) for k in KINDS)], view.arg("kind", "")),
    ], "Show", keep=keep, cls="block filters") + _declare_form(view))


def _declare_form(view: View) -> Html:
    if not configures_somewhere(view):
        return Html("")
    vhosts = sorted(v.name for v in view.admin.list_vhosts() if view.doors.sees_vhost(view.user, v.name))
    return Html('<details class="block"><summary>Add a new queue</summary>' + form(
        "/queues/declare", view.csrf, "Declare a queue", [
            select("vhost", "Vhost", [(v, v) for v in vhosts], prefix="new-"),
            field("name", "Name", required=True, prefix="new-"),
            checkbox("durable", "Durable", checked=True, prefix="new-"),
            checkbox("auto_delete", "Auto-delete", prefix="new-"),
            textarea("arguments", "Arguments (JSON)", prefix="new-",
                     hint='e.g. {"x-max-length": 1000, "x-dead-letter-exchange": "dlx", "x-message-ttl": 60000}')],
        "Declare") + "</details>")


def render(view: View) -> Html:
    name, vhost, kind = view.arg("name", ""), view.arg("vhost", ""), view.arg("kind", "")
    sort, direction = view.arg("sort", "name"), view.arg("dir", "asc")
    column = next((i for i, c in enumerate(COLUMNS) if c[1] == sort), 0)
    desc = direction == "desc"
    queues = [q for q in _visible(view) if name in q.name and (not kind or q.kind == kind)
              and (not vhost or (q.vhost or POP_PATH_VHOST) == vhost)]
    key = COLUMNS[column][2]
    queues.sort(key=lambda q: (key(q), q.vhost, q.name), reverse=desc)
    query = {k: v for k, v in (("name", name), ("vhost", vhost), ("kind", kind)) if v}
    headers = []
    for i, (title, by, _, _) in enumerate(COLUMNS):
        flip = "asc" if i == column and desc else "desc" if i == column or COLUMNS[i][3] else "asc"
        href = "/queues?" + urlencode({**query, "sort": by, "dir": flip})
        what = f"sort by {title.lower()}, {'descending' if flip == 'desc' else 'ascending'}"
        headers.append(Html(f'<a href="{h(href)}" title="{h(what)}">{h(title)}</a>'))
    rows = [(Html(f'<a href="{h(path_of(q))}">{h(q.name)}</a>'), q.vhost or POP_PATH_VHOST, q.kind, q.ready,
             q.unacked, q.scheduled, q.consumers, q.stats.routed, q.stats.delivered) for q in queues]
    return table("Queues", headers, rows, numeric=(3, 4, 5, 6, 7, 8), sorted_by=(column, "desc" if desc else "asc"),
                 empty="no queue matches." if query else "none yet.")


RATES = (("routed", "Routed"), ("delivered", "Delivered"), ("acked", "Acked"), ("redelivered", "Redelivered"),
         ("dead_lettered", "Dead-lettered"))


def watch(view: View, parts: list[str]) -> Watched:
    """The queue's counters, sampled while its page is open (its rates and chart)."""
    if len(parts) != 2:
        raise HttpError(404, "not_found", "a queue is /queues/<vhost>/<name>")
    q = _queue(view, *parts)
    admin = view.admin

    def read() -> dict[str, int] | None:
        try:
            return admin.queue_info(q.vhost or POP_PATH_VHOST, q.name).stats.to_json()
        except LogbusError:  # deleted meanwhile
            return None

    return view.console.objects.watch(view.reactor, ("queue", q.vhost, q.name), read)


def _queue(view: View, vhost: str, name: str) -> QueueInfo:
    info = view.admin.queue_info(vhost, name)  # NotFound: 404
    if not sees_queue(view.doors, view.user, info.vhost, info.name):
        raise HttpError(404, "not_found", f"no queue '{name}' in vhost '{vhost}'")
    return info


def _may_read(view: View, q: QueueInfo) -> bool:
    """What purging and browsing ask, as the API does: read on the queue (pop: its topic)."""
    if q.kind == "pop":
        return view.can_topic("read", q.name.split("/", 1)[1])
    return view.can("read", Resource(q.vhost, "queue", q.name))


def detail(view: View, parts: list[str]) -> tuple[str, Html]:
    if len(parts) != 2:
        raise HttpError(404, "not_found", "a queue's page is /queues/<vhost>/<name>")
    q = _queue(view, *parts)
    here = path_of(q)
    s = q.stats
    facts = [("Vhost", q.vhost or POP_PATH_VHOST + " (pop groups)"), ("Kind", f"{q.kind} ({q.protocol})"),
             ("Durable", "yes" if q.durable else "no"), ("Ready", q.ready), ("Unacked", q.unacked),
             ("Scheduled", q.scheduled), ("Messages", q.messages), ("Ready bytes", size(q.ready_bytes)),
             ("Consumers", q.consumers), ("Routed", s.routed), ("Delivered", s.delivered),
             ("Redelivered", s.redelivered), ("Acked", s.acked), ("Dead-lettered", s.dead_lettered)]
    figures = Html('<dl class="facts" id="queue-facts">'
                   + "".join(f"<dt>{h(k)}</dt><dd>{h(v)}</dd>" for k, v in facts) + "</dl>"
                   + rate_facts(watch(view, parts), RATES, "queue-rates"))
    if view.arg("live", "") == "1":  # the live part alone (what it reloads)
        return q.name, live(here, figures)
    out: list[str] = [live(here, figures), chart("queues/" + "/".join(quote(p, safe="") for p in parts), "queue",
                                      "Messages per second routed to the queue (solid blue line), delivered from"
                                      " it (dashed red line) and acknowledged (dotted green line).")]
    readable = _may_read(view, q)
    if readable and view.arg("confirm", "") == "purge":
        out.append(confirmation("confirm-title", f"Purge {q.name}?",
                                f"The {q.ready} ready messages go; the {q.unacked} delivered and not yet"
                                " acknowledged stay. This cannot be undone.",
                                action_form("/queues/purge", view.csrf, "Purge", {"vhost": q.vhost or POP_PATH_VHOST,
                                                                                  "name": q.name, "back": here},
                                            describe=f"Purge queue {q.name}, now", danger=True), here))
    elif readable:
        out.append(confirm_button(here, "purge", "Purge", f"Purge queue {q.name}"))
    if q.kind == "classic":
        out.append(_delete(view, q, here))
        out.append(_consumers(view, q))
        bindings = [topology.with_key(b) for b in view.admin.list_bindings(q.vhost)
                    if b["destination_type"] == "queue" and b["destination"] == q.name]
        out.append(bindings_section(view, q.vhost, bindings, "queue", here))
        out.append(bind_form(view, q.vhost, here, queue=q.name))
    if q.kind == "pop":
        out.append(_dead_letters(view, q, here))
    out.append(_browse(view, q) if readable else
               "<p>Browsing this queue needs read permission on it.</p>")
    return q.name, Html("".join(out))


def _delete(view: View, q: QueueInfo, here: str) -> Html:
    if not view.can("configure", Resource(q.vhost, "queue", q.name)):
        return Html("")
    if view.arg("confirm", "") == "delete":
        return confirmation("delete-title", f"Delete queue {q.name}?",
                            f"Its {q.messages} messages go with it (those in the log stay in the log)"
                            f" and its {q.consumers} consumers are cancelled. This cannot be undone.",
                            action_form("/queues/delete", view.csrf, "Delete", {"vhost": q.vhost, "name": q.name,
                                                                                "back": "/queues"},
                                        describe=f"Delete queue {q.name}, now", danger=True), here)
    return confirm_button(here, "delete", "Delete", f"Delete queue {q.name}")


def _consumers(view: View, q: QueueInfo) -> Html:
    rows = []
    for c in view.services.topology.consumers(q.vhost, q.name):
        ch = c["channel_details"] or {}
        where = (f"connection {ch.get('connection')} channel {ch.get('number')} ({ch.get('peer_host')},"
                 f" {ch.get('user')}{', ' + ch['connection_name'] if ch.get('connection_name') else ''})"
                 if ch else "")
        rows.append((c["consumer_tag"], where, c["prefetch_count"] or "unlimited",
                     "manual" if c["ack_required"] else "automatic (no ack)", c["unacked"],
                     "yes" if c["exclusive"] else "no"))
    return Html('<section aria-labelledby="consumers-title"><h2 id="consumers-title">Consumers</h2>'
                + table("Consumers", ["Consumer tag", "Channel", "Prefetch", "Ack mode", "Unacked", "Exclusive"],
                        rows, numeric=(2, 4), empty="none.") + "</section>")


def _dead_letters(view: View, q: QueueInfo, here: str) -> Html:
    group, topic = q.name.split("/", 1)
    waiting = view.admin.dead_letters_waiting(group)
    button = ""
    if view.can_topic("read", dlq_topic(group)) and view.can_topic("write", topic):
        button = action_form("/pop-groups/replay", view.csrf, "Requeue dead letters",
                             {"group": group, "topic": topic, "back": here},
                             describe=f"Requeue the dead letters of pop group {group} to topic {topic}")
    return Html(f'<section aria-labelledby="dlq-title"><h2 id="dlq-title">Dead letters</h2>'
                f'<p>Dead letters of pop group {h(group)} waiting to be replayed (every topic):'
                f' <strong id="dead-letters">{waiting}</strong>. {button}</p></section>')


def _browse(view: View, q: QueueInfo) -> Html:
    count = max(1, min(view.int_arg("count", BROWSE), 100))
    messages = view.admin.peek_queue(q.vhost or POP_PATH_VHOST, q.name, count)
    rows = []
    for m in messages:
        j = m.to_json()
        payload = str(j["payload"])
        preview = payload if len(payload) <= PREVIEW else payload[:PREVIEW] + "…"
        where = f"{m.topic} [{m.partition}] @{m.offset}"
        # an AMQP message's record key is its routing key: said once; another protocol's
        # (an MQTT topic) where it differs
        key = j["key"]
        routing = m.routing_key if key in (None, m.routing_key) else f"{m.routing_key} (record key {key})"
        rows.append((m.position, "yes" if m.redelivered else "no", m.exchange or "(default)", routing,
                     m.message_id, where,
                     f"{preview} ({j['payload_bytes']} B{', base64' if j['payload_encoding'] == 'base64' else ''})"))
    caption = f"First {count} ready messages (browsed: nothing is taken)"
    return Html('<section aria-labelledby="browse-title"><h2 id="browse-title">Browse</h2>'
                + table(caption, ["Position", "Redelivered", "Exchange", "Routing key", "Message id",
                                  "Log position", "Payload"], rows, numeric=(0,), empty="no ready message.")
                + "</section>")


def purge(view: View) -> str:
    vhost, name = view.arg("vhost"), view.arg("name")
    q = _queue(view, vhost, name)
    if q.kind == "pop":
        view.require_topic("read", q.name.split("/", 1)[1])
    else:
        view.require("read", Resource(q.vhost, "queue", q.name))
    n = view.admin.purge_queue_contents(vhost, name)
    return f"Purged {n} messages from {name!r}."


def declare(view: View) -> str:
    vhost, name = view.arg("vhost"), view.arg("name")
    new = topology.declare_queue(view.request, view.services, vhost, name, {
        "durable": view.flag("durable"), "auto_delete": view.flag("auto_delete"),
        "arguments": view.json_arg("arguments")})
    return f"Declared queue {name!r}." if new else f"Queue {name!r} was there already, as declared."


def delete(view: View) -> str:
    vhost, name = view.arg("vhost"), view.arg("name")
    q = _queue(view, vhost, name)
    if q.kind != "classic":
        raise HttpError(405, "method_not_allowed", f"a {q.kind} queue is deleted by its protocol")
    n = topology.delete_queue(view.request, view.services, vhost, name)
    return f"Deleted queue {name!r} and its {n} messages."


PAGE = Page("queues", "Queues", render, header=filters, detail=detail, watch=watch, actions={
    "purge": PageAction(purge), "declare": PageAction(declare), "delete": PageAction(delete)})
