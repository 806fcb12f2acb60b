"""The overview charts' numbers: messages per second in and out of the broker, from the
message counters received and sent summed over the protocols (``Admin.message_totals``:
closed connections' included, so a close takes nothing away), and the queues' depth
(ready and unacked messages of every queue, ``Admin.list_queues``).

``Rates`` samples the sums once a second into a ring of the last ``KEEP`` seconds, and
the depth every ``DEPTH_EVERY`` seconds, but only while someone looks: every overview or
chart request calls ``watched()``, which starts the sampling, and it stops itself
``IDLE`` seconds after the last one, so an unwatched broker pays nothing for it. A rate
sample walks every connection; a depth sample every queue (10,000 MQTT sessions: a few
milliseconds), hence the slower pace.

A rate is the difference of two sums; a restart's sums start at 0, and the sampling with
them.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Sequence
from urllib.parse import urlencode

from twisted.internet.task import LoopingCall

from .html import Html, h

if TYPE_CHECKING:
    from ....core.ports import Admin
    from ..rates import Watched

KEEP = 300  # seconds of history
IDLE = 120.0  # seconds without a viewer before sampling stops
DEPTH_EVERY = 5  # rate samples per depth sample


class Rates:
    def __init__(self, admin: Admin) -> None:
        self.admin = admin
        self.samples: deque[tuple[float, int, int]] = deque(maxlen=KEEP + 1)  # (t, received, sent)
        self.depths: deque[tuple[float, int, int]] = deque(maxlen=KEEP // DEPTH_EVERY + 1)  # (t, ready, unacked)
        self._ticks = 0
        self._loop: LoopingCall | None = None
        self._clock: Callable[[], float] | None = None
        self._last_watch = 0.0

    def watched(self, reactor: Any) -> None:
        """Someone looks: sample (again) from now on, if not already."""
        self._clock = reactor.seconds
        self._last_watch = reactor.seconds()
        if self._loop is None or not self._loop.running:
            self.samples.clear()  # a gap is not a rate
            self.depths.clear()
            self._ticks = 0
            self._loop = LoopingCall(self._sample)
            self._loop.clock = reactor
            self._loop.start(1.0, now=True)

    def _sample(self) -> None:
        assert self._clock is not None and self._loop is not None
        now = self._clock()
        if now - self._last_watch > IDLE:
            self._loop.stop()
            return
        received = sent = 0
        for counts in self.admin.message_totals().values():
            received += counts["received"]
            sent += counts["sent"]
        self.samples.append((now, received, sent))
        if self._ticks % DEPTH_EVERY == 0:
            ready = unacked = 0
            for q in self.admin.list_queues():
                ready += q.ready
                unacked += q.unacked
            self.depths.append((now, ready, unacked))
        self._ticks += 1

    def series(self) -> dict[str, list[float]]:
        """Per-second rates: {"t": [epoch s], "received": [...], "sent": [...]}."""
        out: dict[str, list[float]] = {"t": [], "received": [], "sent": []}
        pairs = list(self.samples)
        for (t0, r0, s0), (t1, r1, s1) in zip(pairs, pairs[1:]):
            span = max(t1 - t0, 1e-3)
            out["t"].append(round(t1, 3))
            out["received"].append(round(max(0, r1 - r0) / span, 1))
            out["sent"].append(round(max(0, s1 - s0) / span, 1))
        return out

    def depth(self) -> dict[str, list[float]]:
        """Messages waiting in every queue: {"t": [epoch s], "ready": [...], "unacked": [...]}."""
        return {"t": [round(t, 3) for t, _, _ in self.depths], "ready": [r for _, r, _ in self.depths],
                "unacked": [u for _, _, u in self.depths]}

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()


# -- one object's page: its rates and chart ------------------------------------------------

AVERAGE_SECONDS = 10  # what an object page's rates average over
LIVE_SECONDS = 5  # how often an object page's live part (figures and rates) is reloaded


def live(here: str, body: str) -> Html:
    """An object page's live part: reloaded every LIVE_SECONDS (``?live=1``: the page answers
    only this part), unlike its forms."""
    url = here + ("&" if "?" in here else "?") + "live=1"
    return Html(f'<div id="live" hx-get="{h(url)}" hx-trigger="every {LIVE_SECONDS}s" hx-select="#live"'
                f' hx-swap="outerHTML">{body}</div>')


def rate_facts(w: Watched, labels: Sequence[tuple[str, str]], ident: str) -> Html:
    """``<dl id=ident>``: each counter's messages per second over the last AVERAGE_SECONDS."""
    avg = w.average(AVERAGE_SECONDS)
    if avg is None:
        body = "<dt>Rates</dt><dd>sampling started; figures in a second or two</dd>"
    else:
        body = "".join(f"<dt>{h(text)}</dt><dd>{avg.get(name, 0.0):g}/s</dd>" for name, text in labels)
    return Html(f'<section aria-labelledby="{ident}-title"><h2 id="{ident}-title">Rates</h2>'
                f'<p class="legend">Messages per second, average of the last {AVERAGE_SECONDS} seconds.</p>'
                f'<dl class="facts" id="{ident}">{body}</dl></section>')


def chart(obj: str, series: str, legend: str) -> Html:
    """An object's chart (console.js draws it from /rates.json?object=``obj``)."""
    src = "/rates.json?" + urlencode({"object": obj})
    return Html(f'<section aria-labelledby="chart-title"><h2 id="chart-title">Rates, last five minutes</h2>'
                f'<p class="legend">{h(legend)}</p>'
                f'<div class="chart" data-src="{h(src)}" data-series="{h(series)}" role="img"'
                f' aria-label="Chart of the rates described above"></div></section>')
