"""Pages announced in the menu whose data comes from the queue and consumer-group facade
(``Broker.list_queues``, ``consumer_group_offsets``, ...): a paragraph saying so until
then."""

from __future__ import annotations

from typing import Callable

from ..html import Html, h
from ..page import Page, View


def _coming(what: str) -> Callable[[View], Html]:
    def render(view: View) -> Html:
        return Html(f"<p>{h(what)} come with the next version of the console; the JSON API and"
                    " the protocols' own tools show them meanwhile.</p>")
    return render


QUEUES = Page("queues", "Queues", _coming("Queues (depth, purge, browse, dead letters)"), refresh_seconds=0)
GROUPS = Page("consumer-groups", "Consumer groups", _coming("Consumer groups (lag per partition, offset reset)"),
              refresh_seconds=0)
