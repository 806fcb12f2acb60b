"""Topics (``Broker.list_topics``) as ``GET /api/topics`` shows them: those of the vhosts
the user has a permission in (monitoring: all); per topic its partitions, messages, size
and retention, and per partition its offsets and segments."""

from __future__ import annotations

from .....core.types import topic_exchange
from ..html import Html, size, table
from ..page import Page, View


def _retention(config: dict[str, object]) -> str:
    ms = config.get("retention.ms")
    if ms is None or ms == -1:
        return "forever"
    return f"{int(ms) / 3_600_000:g} h"  # type: ignore[call-overload]


def render(view: View) -> Html:
    broker = view.broker
    topics = sorted((t for t in broker.list_topics() if broker.sees_vhost(view.user, topic_exchange(t.name)[0])),
                    key=lambda t: t.name)
    summary, detail = [], []
    for t in topics:
        messages = sum(p.log_end_offset - p.log_start_offset for p in t.partitions)
        summary.append((t.name, len(t.partitions), messages, size(sum(p.size_bytes for p in t.partitions)),
                        _retention(t.config)))
        for p in t.partitions:
            detail.append((f"{t.name} [{p.partition}]", p.log_start_offset, p.log_end_offset, p.segments,
                           size(p.size_bytes)))
    return Html(table("Topics", ["Topic", "Partitions", "Messages", "Size", "Retention"], summary,
                      numeric=(1, 2))
                + table("Partitions", ["Topic [partition]", "Start offset", "End offset", "Segments", "Size"],
                        detail, numeric=(1, 2, 3)))


PAGE = Page("topics", "Topics", render)
