"""Kafka consumer groups with their lag (``monitoring``), as ``GET /api/consumer-groups``;
a consumer group's page with its members, its lag per partition and, for an
administrator, the offset reset of ``POST /api/consumer-groups/<g>/reset-offsets``:

    /consumer-groups                          every consumer group: state, members,
                                              uncommitted partitions, lag
    /consumer-groups/<group>                  its members and partitions (one with no
                                              committed offset is "uncommitted", its lag
                                              counted from the log start)
    /consumer-groups/<group>?to=...           the reset's plan (a dry run: nothing
                                              changes), with an Execute button
    POST /consumer-groups/reset               the same fields: the reset, executed

A consumer group with members may not be reset (``GroupActive``, as Kafka refuses): the plan says
so instead of showing one. A date and time is read as UTC.
"""

from __future__ import annotations

import calendar
import time
from urllib.parse import quote

from .....core.errors import GroupActive, InvalidRequest, NotFound
from .....core.types import GroupInfo, OffsetReset
from ...responses import HttpError
from ..html import Html, action_form, field, get_form, h, plural, select, table
from ..page import Page, PageAction, View
# what a reset may go to (Admin.reset_group_offsets checks it), as the form offers it
TO_TEXT = {"earliest": "the earliest offset", "latest": "the latest offset (skip everything)",
           "datetime": "the first offset at a date and time", "offset": "an offset",
           "shift": "a shift of the current offset"}


def path_of(group: str) -> str:
    return "/consumer-groups/" + quote(group, safe="")


def render(view: View) -> Html:
    rows = [(Html(f'<a href="{h(path_of(g.group))}">{h(g.group)}</a>'), g.state, len(g.members),
             len({p.topic for p in g.partitions}), len(g.partitions), g.uncommitted_partitions, g.lag)
            for g in sorted(view.admin.list_consumer_groups(), key=lambda g: g.group)]
    return table("Consumer groups", ["Consumer group", "State", "Members", "Topics", "Partitions",
                                     "Uncommitted partitions", "Lag"], rows, numeric=(2, 3, 4, 5, 6))


def detail(view: View, parts: list[str]) -> tuple[str, Html]:
    if len(parts) != 1:
        raise HttpError(404, "not_found", "a consumer group's page is /consumer-groups/<group>")
    g = view.admin.consumer_group_offsets(parts[0])
    out = [f'<dl class="facts"><dt>State</dt><dd>{h(g.state)}</dd><dt>Protocol</dt>'
           f'<dd>{h(g.protocol_type or "none")} {h(g.protocol)}</dd><dt>Lag</dt><dd id="group-lag">{g.lag}</dd></dl>',
           table("Members", ["Member id", "Client id", "Host", "Assigned partitions"],
                 [(m["member_id"], m["client_id"], m["host"],
                   ", ".join(f"{a['topic']} [{a['partition']}]" for a in m["assignment"])) for m in g.members],
                 empty="none (the consumer group is inactive)."),
           table("Lag per partition", ["Topic [partition]", "Committed offset", "Log start", "Log end", "Lag",
                                       "Member", "Client id", "Host"],
                 [(f"{p.topic} [{p.partition}]", "uncommitted" if p.uncommitted else p.committed, p.log_start,
                   p.log_end, p.lag, p.member_id, p.client_id, p.host)
                  for p in g.partitions], numeric=(1, 2, 3, 4))]
    if g.uncommitted_partitions:
        out.append(f'<p id="uncommitted-note">The lag of a partition with no committed offset (uncommitted) is'
                   f' counted from the log start, as a new consumer with auto.offset.reset=earliest reads it:'
                   f" {plural(g.uncommitted_partitions, 'such partition')} in the total.</p>")
    if view.can("administer"):
        out.append(_reset(view, g))
    return g.group, Html("".join(out))


def _reset(view: View, g: GroupInfo) -> Html:
    """The reset form (a GET: its answer is the plan) and, once asked, the plan."""
    to = view.arg("to", "")
    fields = [select("to", "Reset to", list(TO_TEXT.items()), to or "earliest"),
              field("value", "Offset, or shift by", kind="number", value=view.arg("value", "")),
              field("when", "Date and time (UTC)", kind="datetime-local",
                    value=view.arg("when", "")),
              field("topics", "Topics", value=view.arg("topics", ""),
                    hint="comma-separated; empty: the partitions the consumer group has committed")]
    out = ['<section aria-labelledby="reset-title"><h2 id="reset-title">Reset offsets</h2>'
           + get_form(path_of(g.group), "Plan a reset (nothing changes yet)", fields, "Show the plan",
                      cls="block filters")]
    if to:
        out.append(_plan(view, g.group))
    return Html("".join(out) + "</section>")


def _request(view: View) -> tuple[str, int | None, list[str] | None]:
    """The form's reset: (to, value, topics), as the API's body has them."""
    to = view.arg("to")
    value: int | None = None
    if to == "datetime":
        when = view.arg("when", "")
        try:
            value = calendar.timegm(time.strptime(when[:16], "%Y-%m-%dT%H:%M")) * 1000
        except ValueError:
            raise InvalidRequest("a reset to a date and time needs one (YYYY-MM-DDTHH:MM, UTC)") from None
    elif to in ("offset", "shift"):
        value = view.int_arg("value")
    topics = [t.strip() for t in view.arg("topics", "").split(",") if t.strip()] or None
    return to, value, topics


def _plan(view: View, group: str) -> Html:
    try:
        to, value, topics = _request(view)
        plan = view.admin.reset_group_offsets(group, to, value, topics=topics, execute=False)
    except (GroupActive, InvalidRequest, NotFound) as exc:
        return Html(f'<p class="problem" role="alert" id="reset-problem">No reset: {h(exc)}</p>')
    fields: dict[str, object] = {"group": group, "to": to, "value": "" if value is None else value,
                                 "topics": ",".join(topics or []), "back": path_of(group)}
    return Html(table("Reset plan", ["Topic [partition]", "Current offset", "New offset"],
                      [_row(r) for r in plan], numeric=(1, 2))
                + action_form("/consumer-groups/reset", view.csrf, "Execute the reset", fields,
                              describe=f"Execute this reset of consumer group {group}", danger=True)
                + f' <a href="{h(path_of(group))}">Cancel</a>')


def _row(r: OffsetReset) -> tuple[object, ...]:
    return (f"{r.topic} [{r.partition}]", "none" if r.current is None else r.current, r.new)


def reset(view: View) -> str:
    view.require("administer")
    group, to = view.arg("group"), view.arg("to")
    value = view.int_arg("value") if to in ("datetime", "offset", "shift") else None
    topics = [t.strip() for t in view.arg("topics", "").split(",") if t.strip()] or None
    plan = view.admin.reset_group_offsets(group, to, value, topics=topics, execute=True)
    return f"Offsets of consumer group {group!r} reset on {plural(len(plan), 'partition')}."


PAGE = Page("consumer-groups", "Consumer groups", render, needs="monitor", detail=detail,
            actions={"reset": PageAction(reset)})
