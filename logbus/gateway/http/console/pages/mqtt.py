"""MQTT sessions, from the MQTT room as /api/mqtt reaches it (``mqtt.mqtt_room``):
monitoring sees them; an administrator may disconnect a client or delete its session."""

from __future__ import annotations

from ...mqtt import mqtt_room
from ...responses import HttpError
from ..html import Html, action_form, join, table
from ..page import Page, PageAction, View


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
        rows.append((cid, s.get("user") or "", "yes" if s["connected"] else "no", s.get("peer") or "",
                     s.get("protocol") or "", "yes" if s.get("clean") else "no", s.get("expiry_interval"),
                     subs, s.get("queued", 0), s.get("in_flight", 0), join(buttons)))
    headers = ["Client id", "User", "Connected", "Peer", "Protocol", "Clean", "Expiry (s)", "Subscriptions",
               "Queued", "In flight", "Actions"]
    return table("MQTT sessions", headers, rows, numeric=(6, 8, 9))


def _act(method: str, code: str, missing: str) -> PageAction:
    def run(view: View) -> str:
        view.require("administer")
        client_id = view.arg("client_id")
        if not getattr(mqtt_room(view.admin), method)(client_id):
            raise HttpError(404, code, missing.format(client_id))
        return ("Client {!r} disconnected." if method == "kick" else "Session of {!r} deleted.").format(client_id)
    return PageAction(run)


PAGE = Page("mqtt", "MQTT sessions", render, needs="monitor", nav="MQTT", actions={
    "kick": _act("kick", "unknown_client", "no MQTT client {!r} is connected"),
    "delete": _act("delete_session", "unknown_session", "no MQTT session of client {!r}"),
})
