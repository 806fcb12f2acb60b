"""The overview (``/``): the broker's version and uptime, its alarms (``Admin.health``),
the clients' connections (AMQP, MQTT and Kafka, as the Connections page lists them) in
all and per protocol, the message counters per protocol since start (those of
``/api/overview`` and the CLI's, closed connections included), the number of topics,
the queues' totals, and two charts (uPlot, fed by /rates.json): the message rates and the
queues' depth. The charts say no exact figure: the facts have the rates' average over
the last ``AVERAGE_SECONDS`` seconds and the queue totals the depth's latest, which is
also what a reader without JavaScript gets."""

from __future__ import annotations

import time
from importlib import metadata

from ...connections import PROTOCOLS
from ..html import Html, duration, h, table
from ..page import Page, View
from .connections import CLIENT_PROTOCOLS

AVERAGE_SECONDS = 10
# Admin.message_totals' counters, in the CLI overview's order (docs/operations.md defines them)
COUNTERS = (("received", "Received"), ("confirmed", "Confirmed"), ("sent", "Sent"), ("routed", "Routed"),
            ("delivered", "Delivered"), ("redelivered", "Redelivered"), ("acked", "Acked"),
            ("dead_lettered", "Dead-lettered"))


def version() -> str:
    try:
        return metadata.version("logbus")
    except metadata.PackageNotFoundError:
        return "unknown"


def chart(view: View) -> Html:
    """The charts' places: filled by console.js, outside the reloaded region."""
    return Html('<div class="charts"><section aria-labelledby="rates-title"><h2 id="rates-title">Message rates</h2>'
                '<p class="legend">Messages per second received from clients (solid blue line) and'
                ' sent to them (dashed red line), last five minutes; below, under "Messages per second", their average'
                f' over the last {AVERAGE_SECONDS} seconds.</p>'
                '<div id="rates-chart" class="chart" data-src="/rates.json" data-series="rates" role="img"'
                ' aria-label="Chart of the message rates described above"></div></section>'
                '<section aria-labelledby="depth-title"><h2 id="depth-title">Queue depth</h2>'
                '<p class="legend">Messages in every queue: ready (solid green line) and delivered, not yet'
                ' acknowledged (dashed purple line), every 5 seconds; the table below has the latest'
                ' totals.</p>'
                '<div id="depth-chart" class="chart" data-src="/rates.json" data-series="depth" role="img"'
                ' aria-label="Chart of the queue depth described above"></div></section></div>')


def rates(view: View) -> str:
    """The message rates' average over the last AVERAGE_SECONDS: "12.5 received, 3 sent
    (average of the last 10 s)"."""
    series = view.console.rates.series()
    received, sent = series["received"][-AVERAGE_SECONDS:], series["sent"][-AVERAGE_SECONDS:]
    if not received:
        return "sampling started; figures in a second or two"
    n = len(received)
    return f"{round(sum(received) / n, 1):g} received, {round(sum(sent) / n, 1):g} sent (average of the last {n} s)"


def render(view: View) -> Html:
    admin = view.admin
    connections = [c for c in admin.list_connections() if c.protocol in CLIENT_PROTOCOLS]
    reasons = admin.health()
    alarms = (Html("<ul>" + "".join(f"<li>{h(r)}</li>" for r in reasons) + "</ul>") if reasons
              else Html("none"))
    facts = (f"<dl class=\"facts\"><dt>Version</dt><dd>{h(version())}</dd>"
             f"<dt>Up for</dt><dd>{h(duration(time.time() - view.console.started))}</dd>"
             f"<dt>Topics</dt><dd id=\"topic-count\">{len(view.topics.list_topics())}</dd>"
             f"<dt>Connections</dt><dd id=\"connection-count\">{len(connections)}</dd>"
             f"<dt>Messages per second</dt><dd id=\"message-rates\">{h(rates(view))}</dd>"
             f"<dt>Alarms</dt><dd class=\"{'problem' if reasons else 'ok'}\">{alarms}</dd></dl>")
    per = [(p.upper(), sum(1 for c in connections if c.protocol == p)) for p in CLIENT_PROTOCOLS]
    totals = admin.message_totals()
    counted = [(protocol.upper(), *(totals[protocol][k] for k, _ in COUNTERS)) for protocol in PROTOCOLS]
    queues = admin.list_queues()
    depth = [(len(queues), sum(q.ready for q in queues), sum(q.unacked for q in queues),
              sum(q.scheduled for q in queues))]
    return Html(facts
                + table("Queue totals", ["Queues", "Ready", "Unacked", "Scheduled"], depth, row_headers=False,
                        numeric=(0, 1, 2, 3))
                + table("Connections per protocol", ["Protocol", "Connections"], per, numeric=(1,))
                + table("Messages since start", ["Protocol", *(label for _, label in COUNTERS)], counted,
                        numeric=tuple(range(1, len(COUNTERS) + 1))))


PAGE = Page("", "Overview", render, header=chart)
