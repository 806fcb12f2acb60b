"""Pop groups (``Admin.pop_groups``) as ``GET /api/pop`` shows them (ready, invisible,
dead-lettered since the start, dead letters waiting in ``%DLQ%<pop group>``), with a button
that replays a pop group's dead letters to the row's topic, as ``POST
/api/pop/<g>/dlq/replay`` does (read on ``%DLQ%<g>``, write on the topic, refused while a
resource alarm is set):

    /pop-groups                               every pop group on every topic
    POST /pop-groups/replay                   a replay: fields group and topic
"""

from __future__ import annotations

from twisted.internet.defer import Deferred

from .....core.types import dlq_topic, topic_exchange
from ..html import Html, action_form, plural, table
from ..page import Page, PageAction, View


def render(view: View) -> Html:
    rows = []
    for g in sorted(view.admin.pop_groups(), key=lambda g: (g["pop_group"], g["topic"])):
        if not view.doors.sees_vhost(view.user, topic_exchange(g["topic"])[0]):
            continue
        button: object = ""
        if view.can_topic("read", dlq_topic(g["pop_group"])) and view.can_topic("write", g["topic"]):
            button = action_form("/pop-groups/replay", view.csrf, "Replay dead letters",
                                 {"group": g["pop_group"], "topic": g["topic"]},
                                 describe=f"Replay the dead letters of pop group {g['pop_group']} to topic {g['topic']}")
        rows.append((g["pop_group"], g["topic"], g["ready"], g["invisible"], g["dead_lettered"],
                     g["dead_letters_waiting"], button))
    return table("Pop groups", ["Pop group", "Topic", "Ready", "Invisible", "Dead-lettered", "Dead letters waiting",
                                "Replay"], rows, numeric=(2, 3, 4, 5))


def replay(view: View) -> Deferred[str | None]:
    group, topic = view.arg("group"), view.arg("topic")
    view.require_topic("read", dlq_topic(group))
    view.console.gate.check()  # a replay appends: refused while a resource alarm is set
    d = view.admin.dlq_replay(group, topic, None, lambda target: view.require_topic("write", target))
    return d.addCallback(lambda result: f"Replayed {plural(result['replayed'], 'dead letter')} of pop group {group!r}.")


PAGE = Page("pop-groups", "Pop groups", render, actions={"replay": PageAction(replay)})
