"""MQTT sessions and retained messages, from the MQTT room as /api/mqtt reaches it
(``mqtt.mqtt_room``): monitoring sees them; an administrator may disconnect a client,
delete its session or delete a retained message.

    /mqtt                              the sessions: a connected one's keep alive,
                                       connection, messages in and out
    /mqtt/retained?topic=F             the retained messages the MQTT filter F matches
                                       (none: all), the first RETAINED_SHOWN
    /mqtt/retained?topic=F&confirm=T   the confirmation of topic T's deletion
    POST /mqtt/kick | delete | delete_retained

The retained messages are listed and deleted through the JSON API's own checks and calls
(``mqtt.retained``, ``mqtt.delete_retained``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from .....core.errors import LogbusError
from ... import mqtt
from ...mqtt import mqtt_room
from ...responses import HttpError
from ..html import Html, action_form, confirm_button, confirmation, field, get_form, h, join, table
from ..page import Page, PageAction, View

RETAINED = "/mqtt/retained"
RETAINED_SHOWN = 100  # retained messages listed on the page
PREVIEW = 120  # characters of a payload shown


def render(view: View) -> Html:
    try:
        sessions = mqtt_room(view.admin).describe()
    except HttpError as exc:
        return Html(f"<p>{join([exc.message])}</p>")
    admin = view.can("administer")
    rows = []
    for s in sorted(sessions, key=lambda s: str(s["client_id"])):
        cid = str(s["client_id"])
        buttons = []
        if admin and s["connected"]:
            buttons.append(action_form("/mqtt/kick", view.csrf, "Disconnect", {"client_id": cid},
                                       describe=f"Disconnect MQTT client {cid}", danger=True))
        if admin:
            buttons.append(action_form("/mqtt/delete", view.csrf, "Delete session", {"client_id": cid},
                                       describe=f"Delete the session of MQTT client {cid}", danger=True))
        subs = ", ".join(f"{f['filter']} (QoS {f['qos']})" for f in s.get("subscriptions", []))
        rates = ""
        if s.get("connection") is not None:  # messages per second, differenced between the page's reloads
            r = view.console.reads.rates(("mqtt", s["connection"]), {"received": s.get("received") or 0,
                                                                           "sent": s.get("sent") or 0})
            rates = f"{r['received']:g}/s in, {r['sent']:g}/s out"
        rows.append((cid, s.get("user") or "", "yes" if s["connected"] else "no", s.get("peer") or "",
                     s.get("protocol") or "", _blank(s.get("keep_alive")), s.get("connected_at") or "",
                     "yes" if s.get("clean") else "no", s.get("expiry_interval"), subs,
                     _blank(s.get("received")), _blank(s.get("sent")), rates, s.get("queued", 0), s.get("in_flight", 0),
                     join(buttons)))
    headers = ["Client id", "User", "Connected", "Peer", "Protocol", "Keep alive (s)", "Connected at (UTC)", "Clean",
               "Expiry (s)", "Subscriptions", "Messages in", "Messages out", "Rates", "Queued", "In flight", "Actions"]
    return Html(f'<p><a href="{RETAINED}">Retained messages</a>: what a new subscriber to a topic gets first.</p>'
                + table("MQTT sessions", headers, rows, numeric=(5, 8, 10, 11, 13, 14))
                + '<p class="legend">Keep alive, connected at and messages in and out are the connection\'s'
                  " (blank while offline), as the Connections page shows them.</p>")


def _blank(value: object) -> object:
    return "" if value is None else value


# -- retained messages -------------------------------------------------------------------------


def _here(topic_filter: str, **more: str) -> str:
    query = {k: v for k, v in {"topic": topic_filter, **more}.items() if v}
    return RETAINED + ("?" + urlencode(query) if query else "")


def detail(view: View, parts: list[str]) -> tuple[str, Html]:
    if parts != ["retained"]:
        raise HttpError(404, "not_found", f"no such page: /mqtt/{'/'.join(parts)}")
    topic_filter = view.arg("topic", "").strip()
    out: list[str] = [get_form(RETAINED, "Filter retained messages", [
        field("topic", "Topic filter", value=topic_filter,
              hint="an MQTT topic filter: sensors/#, +/kitchen/temp, a topic; empty: every topic")],
        "Show", cls="block filters")]
    try:
        found = mqtt.retained(view.request, view.services, topic_filter or None, RETAINED_SHOWN + 1)
    except (HttpError, LogbusError) as exc:  # no MQTT listener, no topic filter
        message = exc.message if isinstance(exc, HttpError) else str(exc)
        return "Retained messages", Html("".join(out) + f'<p role="alert">{h(message)}</p>')
    admin = view.can("administer")
    confirm = view.arg("confirm", "")
    if admin and confirm:
        out.append(_confirm(view, topic_filter, confirm))
    rows = []
    for m in found[:RETAINED_SHOWN]:
        button: object = ""
        if admin:
            button = confirm_button(RETAINED, m["topic"], "Delete", f"Delete the retained message of topic {m['topic']}",
                                    keep={"topic": topic_filter})
        rows.append((m["topic"], m["qos"], m["payload_bytes"], _preview(m), m["stored_at"] or "",
                     m["expires_at"] or "never", button))
    caption = "Retained messages" + (f" matching {topic_filter}" if topic_filter else "")
    out.append(table(caption, ["Topic", "QoS", "Size (B)", "Payload", "Stored at (UTC)", "Expires at (UTC)",
                               "Action"], rows, numeric=(1, 2), empty="none."))
    if len(found) > RETAINED_SHOWN:
        out.append(f'<p class="legend">The first {RETAINED_SHOWN} topics, in order, are shown: narrow the filter'
                   " to see others.</p>")
    out.append('<p class="legend">Deleting one is what a client\'s empty retained message to its topic does:'
               " new subscribers no longer get it; nothing is sent to those subscribed now."
               " <code>GET /api/mqtt/retained?topic=F</code> lists them too.</p>")
    return "Retained messages", Html("".join(out))


def _preview(m: dict[str, Any]) -> str:
    payload = str(m["payload"])
    cut = len(payload) > PREVIEW or m["payload_truncated"]
    shown = payload[:PREVIEW] + ("…" if cut else "")
    return shown + (" (base64)" if m["payload_encoding"] == "base64" else "")


def _confirm(view: View, topic_filter: str, topic: str) -> Html:
    back = _here(topic_filter)
    return confirmation("confirm-title", f"Delete the retained message of topic {topic}?",
                        "New subscribers to the topic no longer get it, as after a client's empty retained message"
                        " to it. This cannot be undone.",
                        action_form("/mqtt/delete_retained", view.csrf, "Delete", {"topic": topic, "back": back},
                                    describe=f"Delete the retained message of topic {topic}, now", danger=True), back)


def delete_retained(view: View) -> str:
    topic = view.arg("topic")
    mqtt.delete_retained(view.request, view.services, topic)
    return f"Retained message of topic {topic!r} deleted."


# -- sessions ----------------------------------------------------------------------------------


def _act(method: str, code: str, missing: str) -> PageAction:
    def run(view: View) -> str:
        view.require("administer")
        client_id = view.arg("client_id")
        if not getattr(mqtt_room(view.admin), method)(client_id):
            raise HttpError(404, code, missing.format(client_id))
        return ("Client {!r} disconnected." if method == "kick" else "Session of {!r} deleted.").format(client_id)
    return PageAction(run)


PAGE = Page("mqtt", "MQTT sessions", render, needs="monitor", nav="MQTT", detail=detail, actions={
    "kick": _act("kick", "unknown_client", "no MQTT client {!r} is connected"),
    "delete": _act("delete_session", "unknown_session", "no MQTT session of client {!r}"),
    "delete_retained": PageAction(delete_retained),
})
