"""Topics (``Topics.list_topics``) as ``GET /api/topics`` shows them: those of the vhosts
the user has a permission in (monitoring: all); per topic its partitions, messages, size
and retention, and per partition its offsets and segments.

    /topics                               the table, and the create form
    /topics/<topic>                       its partitions, rates, settings (the alter form,
                                          Delete after ?confirm=delete), the message search form
    /topics/<topic>?key=...&message_id=...&start=...&end=...&partition=...&limit=...
                                          the records found (``Admin.search_messages``:
                                          by key or message id through the key index, or
                                          by time range), for a user with read on the
                                          topic; times are UTC; when more match than
                                          the limit, the caption says so
"""

from __future__ import annotations

import calendar
import json
import time
from typing import Any
from urllib.parse import quote

from .....core.errors import InvalidRequest, LogbusError
from .....core.types import FoundMessage, topic_exchange
from ...responses import HttpError
from ... import topics as topics_api
from ..html import Html, checkbox, confirm_button, confirmation, field, form, get_form, h, hidden, size, table, textarea
from ...rates import Watched
from ..page import Page, PageAction, View
from ..rates import chart, live, rate_facts
from .exchanges import configures_somewhere, watch_topic

SEARCH_FIELDS = ("key", "message_id", "start", "end", "partition")
LIMIT = 100
PREVIEW = 120  # characters of a payload shown


def path_of(topic: str) -> str:
    return "/topics/" + quote(topic, safe="")


def _retention(config: dict[str, object]) -> str:
    ms = config.get("retention.ms")
    if ms is None or ms == -1:
        return "forever"
    return f"{int(ms) / 3_600_000:g} h"  # type: ignore[call-overload]


def render(view: View) -> Html:
    topics = sorted((t for t in view.topics.list_topics() if view.doors.sees_vhost(view.user, topic_exchange(t.name)[0])),
                    key=lambda t: t.name)
    summary, detail = [], []
    for t in topics:
        messages = sum(p.log_end_offset - p.log_start_offset for p in t.partitions)
        summary.append((Html(f'<a href="{h(path_of(t.name))}">{h(t.name)}</a>'), len(t.partitions), messages, size(sum(p.size_bytes for p in t.partitions)),
                        _retention(t.config)))
        for p in t.partitions:
            detail.append((f"{t.name} [{p.partition}]", p.log_start_offset, p.log_end_offset, p.segments,
                           size(p.size_bytes)))
    return Html(table("Topics", ["Topic", "Partitions", "Messages", "Size", "Retention"], summary,
                      numeric=(1, 2))
                + table("Partitions", ["Topic [partition]", "Start offset", "End offset", "Segments", "Size"],
                        detail, numeric=(1, 2, 3)))


def _partitions(t: Any) -> Html:  # a TopicInfo of Topics.list_topics
    return table("Partitions", ["Partition", "Start offset", "End offset", "Segments", "Size"],
                 [(p.partition, p.log_start_offset, p.log_end_offset, p.segments, size(p.size_bytes))
                  for p in t.partitions], numeric=(0, 1, 2, 3))


def detail(view: View, parts: list[str]) -> tuple[str, Html]:
    if len(parts) != 1:
        raise HttpError(404, "not_found", "a topic's page is /topics/<topic>")
    found = [t for t in view.topics.list_topics() if t.name == parts[0]]
    if not found or not view.doors.sees_vhost(view.user, topic_exchange(found[0].name)[0]):
        raise HttpError(404, "not_found", f"no topic '{parts[0]}'")
    t = found[0]
    here = path_of(t.name)
    figures = Html(_partitions(t) + rate_facts(watch(view, parts), (("appended", "Appended"),), "topic-rates"))
    if view.arg("live", "") == "1":
        return t.name, live(here, figures)
    out: list[str] = [live(here, figures), chart("topics/" + quote(t.name, safe=""), "appended",
                                                 "Records per second appended to the topic, from every protocol."),
                      _settings(view, t, here)]
    if not view.can_topic("read", t.name):
        out.append("<p>Searching this topic's messages needs read permission on it.</p>")
        return t.name, Html("".join(out))
    fields = [field("key", "Key", value=view.arg("key", ""), hint="the record key, as text"),
              field("message_id", "Message id", value=view.arg("message_id", "")),
              field("start", "From (UTC)", kind="datetime-local", value=view.arg("start", "")),
              field("end", "Until (UTC)", kind="datetime-local", value=view.arg("end", "")),
              field("partition", "Partition", kind="number", value=view.arg("partition", ""),
                    hint="empty: every partition"),
              field("limit", "At most", kind="number", value=view.arg("limit", str(LIMIT)))]
    out.append('<section aria-labelledby="search-title"><h2 id="search-title">Search messages</h2>'
               + get_form(path_of(t.name), "Find records by key, message id or time",
                          fields, "Search", cls="block filters"))
    if any(view.arg(k, "") for k in SEARCH_FIELDS):
        out.append(_results(view, t.name))
    return t.name, Html("".join(out) + "</section>")


def watch(view: View, parts: list[str]) -> Watched:
    if len(parts) != 1 or not view.doors.sees_vhost(view.user, topic_exchange(parts[0])[0]) \
            or not any(t.name == parts[0] for t in view.topics.list_topics()):
        raise HttpError(404, "not_found", f"no topic '{parts[0] if parts else ''}'")
    return watch_topic(view, parts[0])


def header(view: View) -> Html:
    """The create form, above the reloaded tables (for a user who may configure somewhere)."""
    if not configures_somewhere(view):
        return Html("")
    return Html('<details class="block"><summary>Add a new topic</summary>' + form(
        "/topics/create", view.csrf, "Create a topic", [
            field("name", "Name", required=True, prefix="new-",
                  hint="a vhost's exchange's topic is named <vhost>/<exchange>; others are free"),
            field("partitions", "Partitions", kind="number", value="1", prefix="new-"),
            textarea("config", "Settings (JSON)", prefix="new-",
                     hint='e.g. {"retention.ms": 604800000, "cleanup.policy": "compact"}')],
        "Create") + "</details>")


def _settings(view: View, t: Any, here: str) -> Html:
    """The topic's settings, the alter form (policymaker and configure on it) and Delete."""
    shown = json.dumps(t.config, sort_keys=True, default=str)
    out = [f'<section aria-labelledby="settings-title"><h2 id="settings-title">Settings</h2>'
           f'<p><code id="topic-config">{h(shown)}</code></p>']
    if view.can("policy") and view.can_topic("configure", t.name):
        out.append(form("/topics/alter", view.csrf, "Change settings", [
            hidden("name", t.name), hidden("back", here),
            textarea("config", "Settings to change (JSON)", hint='e.g. {"retention.ms": 86400000}')], "Change"))
    if view.can_topic("configure", t.name):
        if view.arg("confirm", "") == "delete":
            out.append(confirmation("delete-title", f"Delete topic {t.name}?",
                                    "Every partition and every record in it go; queues reading it are deleted with"
                                    " it only if ticked. This cannot be undone.",
                                    form("/topics/delete", view.csrf, "Delete the topic", [
                                        hidden("name", t.name), hidden("back", "/topics"),
                                        checkbox("force", "Also when queues read it (their entries go too)")],
                                        "Delete"), here))
        else:
            out.append(confirm_button(here, "delete", "Delete", f"Delete topic {t.name}"))
    return Html("".join(out) + "</section>")


def create(view: View) -> str:
    body: dict[str, Any] = {"name": view.arg("name"), "config": view.json_arg("config")}
    if view.arg("partitions", ""):
        body["partitions"] = view.int_arg("partitions")
    info = topics_api.create_topic(view.request, view.services, body)
    return f"Created topic {info.name!r} with {len(info.partitions)} partitions."


def alter(view: View) -> str:
    name = view.arg("name")
    topics_api.alter_topic(view.request, view.services, name, {"config": view.json_arg("config")})
    return f"Changed the settings of topic {name!r}."


def delete(view: View) -> str:
    name = view.arg("name")
    topics_api.delete_topic(view.request, view.services, name, force=view.flag("force"))
    return f"Deleted topic {name!r}."


def _utc_ms(view: View, name: str) -> int | None:
    text = view.arg(name, "")
    if not text:
        return None
    try:
        return calendar.timegm(time.strptime(text[:16], "%Y-%m-%dT%H:%M")) * 1000 + (59_999 if name == "end" else 0)
    except ValueError:
        raise InvalidRequest(f"{name} must be a date and time (YYYY-MM-DDTHH:MM, UTC)") from None


def _results(view: View, topic: str) -> Html:
    view.require_topic("read", topic)
    key, message_id = view.arg("key", ""), view.arg("message_id", "")
    partition = view.arg("partition", "")
    try:
        found = view.admin.search_messages(
            topic, key=key.encode() if key else None, message_id=message_id or None,
            start_ms=_utc_ms(view, "start"), end_ms=_utc_ms(view, "end"),
            partition=view.int_arg("partition") if partition else None, limit=view.int_arg("limit", LIMIT))
    except LogbusError as exc:  # no such partition, a range that ends before it starts
        return Html(f'<p class="problem" role="alert">No search: {h(exc)}</p>')
    count = f"first {len(found)} shown, more match" if found.truncated else str(len(found))
    return table(f"Messages found: {count}", ["Partition", "Offset", "Time (UTC)", "Key", "Message id",
                                                  "Headers", "Payload"], [_row(m) for m in found],
                 numeric=(0, 1), empty="no record matches.")


def _row(m: FoundMessage) -> tuple[object, ...]:
    j = m.to_json()
    payload = "" if j["payload"] is None else str(j["payload"])
    preview = payload if len(payload) <= PREVIEW else payload[:PREVIEW] + "…"
    if j["payload_encoding"] == "base64":
        preview += " (base64)"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(m.timestamp_ms / 1000)) + f".{m.timestamp_ms % 1000:03d}"
    headers = ", ".join(f"{x['name']}={x['value']}" for x in j["headers"])
    return (m.partition, m.offset, when, "" if j["key"] is None else j["key"], m.message_id or "", headers, preview)


PAGE = Page("topics", "Topics", render, header=header, detail=detail, watch=watch, actions={
    "create": PageAction(create), "alter": PageAction(alter), "delete": PageAction(delete)})
