"""Exchanges (``Admin.list_exchanges``) as ``GET /api/exchanges`` shows them, and the
changes RabbitMQ's management UI makes to them, each through the JSON API's own checks and
calls (``topology.py``: the permissions of the AMQP method it stands for):

    /exchanges                          the table, and the declare form
    /exchanges/<vhost>/<name>           one exchange: its bindings out and in, a form to
                                        add one, the publish form, delete (``amq.default``:
                                        the default exchange)
    /exchanges/<vhost>/<name>?confirm=delete   the delete's confirmation
    POST /exchanges/declare | delete | publish | bind | unbind

Bindings are added and removed here for queues too: a queue's page posts to
``/exchanges/bind`` and ``/exchanges/unbind`` with itself as ``back``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from twisted.internet.defer import Deferred

from .....core.types import Resource
from ... import topology
from ...responses import HttpError
from ..html import Html, action_form, checkbox, confirm_button, confirmation, field, form, h, hidden, select, table, textarea
from ...rates import Watched
from ..page import Page, PageAction, View
from ..rates import chart, live, rate_facts

KINDS = ("direct", "fanout", "topic", "headers", "x-delayed-message")
DEFAULT = "amq.default"  # the default exchange ("") in a path and a form


def path_of(vhost: str, name: str) -> str:
    return f"/exchanges/{quote(vhost, safe='')}/{quote(name or DEFAULT, safe='')}"


def queue_path(vhost: str, name: str) -> str:
    return f"/queues/{quote(vhost, safe='')}/{quote(name, safe='')}"


def _visible(view: View) -> list[dict[str, Any]]:
    return [e for e in view.admin.list_exchanges() if view.doors.sees_vhost(view.user, e["vhost"])]


def configures_somewhere(view: View) -> bool:
    """Whether the user has a configure permission in some vhost (then the forms that
    declare are shown; whether it covers a name is checked when the form is sent)."""
    return any(p.user == view.user and p.configure not in ("", "^$") for p in view.admin.list_permissions())


def _vhosts(view: View) -> list[str]:
    return sorted(v.name for v in view.admin.list_vhosts() if view.doors.sees_vhost(view.user, v.name))


def render(view: View) -> Html:
    rows = [(Html(f'<a href="{h(path_of(e["vhost"], e["name"]))}">{h(e["name"] or "(AMQP default)")}</a>'),
             e["vhost"], e["type"] + (" (delayed)" if e["delayed"] else ""), _features(e), e["topic"])
            for e in sorted(_visible(view), key=lambda e: (e["vhost"], e["name"]))]
    return table("Exchanges", ["Name", "Vhost", "Type", "Features", "Log topic"], rows, empty="none.")


def _features(e: dict[str, Any]) -> str:
    words = [w for w, on in (("durable", e["durable"]), ("auto-delete", e["auto_delete"]),
                             ("internal", e["internal"])) if on]
    if e["arguments"]:
        words.append("args: " + ", ".join(f"{k}={v}" for k, v in sorted(e["arguments"].items())))
    return ", ".join(words) or "transient"


def header(view: View) -> Html:
    """The declare form, above the reloaded table (what is typed in it stays)."""
    if not configures_somewhere(view):
        return Html("")
    return Html('<details class="block"><summary>Add a new exchange</summary>' + form(
        "/exchanges/declare", view.csrf, "Declare an exchange", [
            select("vhost", "Vhost", [(v, v) for v in _vhosts(view)], prefix="new-"),
            field("name", "Name", required=True, prefix="new-"),
            select("type", "Type", [(k, k) for k in KINDS], "direct", prefix="new-"),
            checkbox("durable", "Durable", checked=True, prefix="new-"),
            checkbox("auto_delete", "Auto-delete", prefix="new-"),
            checkbox("internal", "Internal", prefix="new-"),
            textarea("arguments", "Arguments (JSON)", prefix="new-", hint='e.g. {"alternate-exchange": "unrouted"}; '
                     'x-delayed-message needs {"x-delayed-type": "direct"}')],
        "Declare") + "</details>")


def _exchange(view: View, vhost: str, name: str) -> dict[str, Any]:
    if view.doors.sees_vhost(view.user, vhost):
        for e in view.admin.list_exchanges(vhost):
            if e["name"] == name:
                return e
    raise HttpError(404, "not_found", f"no exchange '{name or DEFAULT}' in vhost '{vhost}'")


def detail(view: View, parts: list[str]) -> tuple[str, Html]:
    if len(parts) != 2:
        raise HttpError(404, "not_found", "an exchange's page is /exchanges/<vhost>/<name>")
    vhost, name = parts[0], "" if parts[1] == DEFAULT else parts[1]
    e = _exchange(view, vhost, name)
    here = path_of(vhost, name)
    facts = [("Vhost", vhost), ("Type", e["type"]), ("Features", _features(e)), ("Log topic", e["topic"])]
    figures = Html('<dl class="facts" id="exchange-facts">'
                   + "".join(f"<dt>{h(k)}</dt><dd>{h(v)}</dd>" for k, v in facts) + "</dl>"
                   + rate_facts(watch(view, parts), (("appended", "Published"),), "exchange-rates"))
    if view.arg("live", "") == "1":
        return name or "(AMQP default)", live(here, figures)
    out: list[str] = [live(here, figures), chart(f"exchanges/{quote(vhost, safe='')}/{quote(name or DEFAULT, safe='')}",
                                                 "appended", "Messages per second published to the exchange"
                                                 " (appended to its log topic, routed or not).")]
    out.append(_delete(view, e, here))
    bindings = [topology.with_key(b) for b in view.admin.list_bindings(vhost)]
    out.append(bindings_section(view, vhost, [b for b in bindings if b["source"] == name], "out", here))
    if name:
        out.append(bindings_section(view, vhost, [b for b in bindings if b["destination_type"] == "exchange"
                                                  and b["destination"] == name], "in", here))
        out.append(bind_form(view, vhost, here, source=name))
    out.append(_publish_form(view, vhost, name, here))
    return name or "(AMQP default)", Html("".join(out))


def watch(view: View, parts: list[str]) -> Watched:
    """The exchange's appends to its log topic, sampled while its page is open."""
    if len(parts) != 2:
        raise HttpError(404, "not_found", "an exchange is /exchanges/<vhost>/<name>")
    vhost, name = parts[0], "" if parts[1] == DEFAULT else parts[1]
    return watch_topic(view, _exchange(view, vhost, name)["topic"])


def watch_topic(view: View, topic: str) -> Watched:
    """Records appended to ``topic``, sampled while a page showing them is open."""
    admin = view.admin

    def read() -> dict[str, int]:
        return {"appended": admin.topic_append_counts().get(topic, 0)}

    return view.console.objects.watch(view.reactor, ("topic", topic), read)


def _delete(view: View, e: dict[str, Any], here: str) -> Html:
    name, vhost = e["name"], e["vhost"]
    if not name or name.startswith("amq.") or not view.can("configure", _resource(vhost, "exchange", name)):
        return Html("")
    if view.arg("confirm", "") == "delete":
        return confirmation("confirm-title", f"Delete exchange {name}?",
                            f"Its bindings go with it; its log topic {e['topic']} and what is in it stay."
                            " This cannot be undone.",
                            action_form("/exchanges/delete", view.csrf, "Delete",
                                        {"vhost": vhost, "name": name, "back": "/exchanges"},
                                        describe=f"Delete exchange {name}, now", danger=True), here)
    return confirm_button(here, "delete", "Delete", f"Delete exchange {name}")


def _resource(vhost: str, kind: str, name: str) -> Resource:
    return Resource(vhost, "queue" if kind == "queue" else "exchange", name)


def bindings_section(view: View, vhost: str, rows: list[dict[str, Any]], direction: str, back: str) -> Html:
    """A table of bindings, each with its Unbind button where the user may unbind it.
    ``direction``: "out" (from this exchange), "in" (to this exchange or queue)."""
    title = {"out": "Bindings from this exchange", "in": "Bindings to this exchange",
             "queue": "Bindings to this queue"}[direction]
    out = []
    for b in rows:
        kind = b["destination_type"]
        dest = b["destination"]
        dest_link = Html(f'<a href="{h(queue_path(vhost, dest) if kind == "queue" else path_of(vhost, dest))}">'
                         f"{h(dest)}</a>")
        source_link = Html(f'<a href="{h(path_of(vhost, b["source"]))}">{h(b["source"] or "(AMQP default)")}</a>')
        args = topology.all_arguments(b)
        button: object = ""
        if b["source"] and view.can("write", _resource(vhost, kind, dest)) \
                and view.can("read", _resource(vhost, "exchange", b["source"])):
            button = action_form("/exchanges/unbind", view.csrf, "Unbind", {
                "vhost": vhost, "source": b["source"], "kind": kind, "destination": dest,
                "key": b["properties_key"], "back": back},
                describe=f"Unbind {kind} {dest} from {b['source']}, key {b['routing_key']}")
        out.append((source_link, kind, dest_link, b["routing_key"],
                    ", ".join(f"{k}={v}" for k, v in sorted(args.items())), button))
    return Html(f'<section aria-label="{h(title)}">'
                + table(title, ["Source", "Kind", "Destination", "Routing key", "Arguments", ""], out,
                        empty="none.") + "</section>")


def bind_form(view: View, vhost: str, back: str, *, source: str = "", queue: str = "") -> Html:
    """Add a binding: from this exchange to a queue or exchange, or to this queue from an
    exchange (``queue``)."""
    if not configures_somewhere(view) and not view.can("write", _resource(vhost, "queue", queue or "")):
        return Html("")
    if queue:
        fields = [hidden("kind", "queue"), hidden("destination", queue),
                  field("source", "From exchange", required=True)]
    else:
        fields = [hidden("source", source), select("kind", "To", [("queue", "queue"), ("exchange", "exchange")]),
                  field("destination", "Name", required=True)]
    fields += [hidden("vhost", vhost), hidden("back", back), field("binding_key", "Routing key"),
               textarea("binding_arguments", "Arguments (JSON)", rows=2,
                        hint='e.g. {"x-match": "all", "kind": "invoice"} or {"x-filter-sql": "amount > 10"}')]
    return Html('<section aria-labelledby="bind-title"><h2 id="bind-title">Add binding</h2>'
                + form("/exchanges/bind", view.csrf, "Add a binding", fields, "Bind") + "</section>")


def _publish_form(view: View, vhost: str, name: str, back: str) -> Html:
    if not view.can("write", _resource(vhost, "exchange", name)):
        return Html("")
    fields = [hidden("vhost", vhost), hidden("name", name or DEFAULT), hidden("back", back),
              field("routing_key", "Routing key"),
              select("delivery_mode", "Delivery mode", [("2", "2 - persistent"), ("1", "1 - non-persistent")], "2"),
              textarea("headers", "Headers (JSON)", rows=2, hint='e.g. {"kind": "invoice"}'),
              textarea("properties", "Properties (JSON)", rows=2,
                       hint='e.g. {"content_type": "application/json", "message_id": "m-1", "priority": 5}'),
              textarea("payload", "Payload", rows=4),
              select("payload_encoding", "Payload encoding", [("string", "string"), ("base64", "base64")],
                     "string")]
    return Html('<section aria-labelledby="publish-title"><h2 id="publish-title">Publish message</h2>'
                + form("/exchanges/publish", view.csrf, "Publish a message to this exchange", fields, "Publish")
                + "</section>")


# -- actions ----------------------------------------------------------------------------------


def declare(view: View) -> str:
    vhost, name = view.arg("vhost"), view.arg("name")
    new = topology.declare_exchange(view.request, view.services, vhost, name, {
        "type": view.arg("type", "direct"), "durable": view.flag("durable"), "auto_delete": view.flag("auto_delete"),
        "internal": view.flag("internal"), "arguments": view.json_arg("arguments")})
    return f"Declared exchange {name!r}." if new else f"Exchange {name!r} was there already, as declared."


def delete(view: View) -> str:
    vhost, name = view.arg("vhost"), view.arg("name")
    topology.delete_exchange(view.request, view.services, vhost, name)
    return f"Deleted exchange {name!r}."


def publish(view: View) -> Deferred[str | None]:
    vhost, name = view.arg("vhost"), view.arg("name")
    name = "" if name == DEFAULT else name
    view.console.gate.check()
    properties = view.json_arg("properties")
    headers = view.json_arg("headers")
    if headers:
        properties["headers"] = headers
    mode = view.arg("delivery_mode", "")
    if mode:
        properties.setdefault("delivery_mode", int(mode) if mode in ("1", "2") else mode)
    payload = view.arg("payload", "")
    if view.arg("payload_encoding", "string") == "base64":
        payload = "".join(payload.split())
    d = topology.publish(view.request, view.services, vhost, name, {
        "routing_key": view.arg("routing_key", ""), "payload": payload,
        "payload_encoding": view.arg("payload_encoding", "string"), "properties": properties})
    return d.addCallback(lambda routed: "Message published." if routed else
                         "Message published, but not routed: no binding matched (it is in the exchange's log topic).")


def bind(view: View) -> str:
    vhost, source, kind, destination = view.arg("vhost"), view.arg("source"), view.arg("kind"), view.arg("destination")
    topology.bind(view.request, view.services, vhost, source, kind, destination, {
        "routing_key": view.arg("binding_key", ""), "arguments": view.json_arg("binding_arguments")})
    return f"Bound {kind} {destination!r} to exchange {source!r}."


def unbind(view: View) -> str:
    vhost, source, kind, destination = view.arg("vhost"), view.arg("source"), view.arg("kind"), view.arg("destination")
    topology.unbind(view.request, view.services, vhost, source, kind, destination, view.arg("key"))
    return f"Unbound {kind} {destination!r} from exchange {source!r}."


PAGE = Page("exchanges", "Exchanges", render, header=header, detail=detail, watch=watch, actions={
    "declare": PageAction(declare), "delete": PageAction(delete), "publish": PageAction(publish),
    "bind": PageAction(bind), "unbind": PageAction(unbind)})
