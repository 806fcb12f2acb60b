"""HTML of the console as Python strings, escaped in one place.

Every value that comes from the broker or a request goes through ``h`` (``html.escape``
with quotes) before it is put in a page: the helpers here take plain text and escape it;
``Html`` marks a string that is already markup, so it is not escaped twice. A page
module builds its body with ``table``, ``action_form``, ``field`` and f-strings of
``h(...)`` values, never by joining unescaped text.
"""

from __future__ import annotations

import html
from typing import Iterable, Sequence


class Html(str):
    """Markup, already escaped: ``h`` leaves it as it is."""

    __slots__ = ()


def h(value: object) -> Html:
    """``value`` as HTML text: escaped, unless it is Html already."""
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value), quote=True))


def join(parts: Iterable[object]) -> Html:
    return Html("".join(h(p) for p in parts))


def table(caption: str, headers: Sequence[str], rows: Iterable[Sequence[object]], *,
          row_headers: bool = True, empty: str = "None.", numeric: Sequence[int] = (),
          sorted_by: tuple[int, str] | None = None) -> Html:
    """A data table: a caption, ``<th scope="col">`` headers and, with ``row_headers``, each
    row's first cell as its ``<th scope="row">``. Cells and headers are text (escaped) or
    Html (a sort link); columns in ``numeric`` are right-aligned; ``sorted_by`` (column,
    "asc" or "desc") says which column the rows are sorted by (``aria-sort``). No rows:
    ``empty`` in a paragraph."""
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            cls = ' class="num"' if i in numeric else ""
            if i == 0 and row_headers:
                cells.append(f'<th scope="row"{cls}>{h(cell)}</th>')
            else:
                cells.append(f"<td{cls}>{h(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    if not body:
        return Html(f'<p class="empty">{h(caption)}: {h(empty)}</p>')
    def sort(i: int) -> str:
        if sorted_by is None or sorted_by[0] != i:
            return ""
        return f' aria-sort="{"descending" if sorted_by[1] == "desc" else "ascending"}"'
    head = "".join(f'<th scope="col"{" class=num" if i in numeric else ""}{sort(i)}>{h(t)}</th>'
                   for i, t in enumerate(headers))
    return Html(f'<div class="scroll"><table><caption>{h(caption)}</caption>'
                f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def hidden(name: str, value: object) -> Html:
    return Html(f'<input type="hidden" name="{h(name)}" value="{h(value)}">')


def action_form(action: str, csrf: str, label: str, fields: dict[str, object] | None = None, *,
                describe: str = "", danger: bool = False) -> Html:
    """A one-button form POSTing ``fields`` to ``action`` with the CSRF token: what a
    row's button is. ``describe`` names what the button acts on for a screen reader
    ("Close connection 7"), the visible label stays short."""
    inputs = "".join(hidden(k, v) for k, v in (fields or {}).items())
    aria = f' aria-label="{h(describe)}"' if describe else ""
    cls = ' class="danger"' if danger else ""
    return Html(f'<form method="post" action="{h(action)}" class="inline">{hidden("csrf", csrf)}{inputs}'
                f'<button type="submit"{cls}{aria}>{h(label)}</button></form>')


def confirm_button(here: str, what: str, label: str, describe: str, keep: dict[str, str] | None = None) -> Html:
    """A destructive action's first button: a GET of ``here`` with ``confirm=what`` (and
    ``keep``), whose page asks (``confirmation``); no script needed. ``describe`` names what
    it acts on for a screen reader."""
    inputs = "".join(hidden(k, v) for k, v in (keep or {}).items())
    return Html(f'<form method="get" action="{h(here)}" class="inline">{inputs}{hidden("confirm", what)}'
                f'<button type="submit" class="danger" aria-label="{h(describe)}…">{h(label)}…</button></form>')


def confirmation(ident: str, question: str, consequence: str, action: Html, cancel: str) -> Html:
    """The page's question before a destructive action: what goes, the form that does it
    (``action``), and a way back to ``cancel``."""
    return Html(f'<section class="confirm" aria-labelledby="{h(ident)}"><h2 id="{h(ident)}">{h(question)}</h2>'
                f"<p>{h(consequence)}</p>{action} <a href=\"{h(cancel)}\">Cancel</a></section>")


def field(name: str, label: str, *, kind: str = "text", value: str = "", required: bool = False,
          autocomplete: str = "off", hint: str = "", prefix: str = "") -> Html:
    """A labelled input (``<label for>``), with an optional hint tied by aria-describedby;
    its id is ``f-<prefix><name>`` (``prefix``: two forms of a page with a field of one name)."""
    ident = f"f-{prefix}{name}"
    req = " required" if required else ""
    described = f' aria-describedby="{ident}-hint"' if hint else ""
    hint_html = f'<small id="{ident}-hint">{h(hint)}</small>' if hint else ""
    return Html(f'<div class="field"><label for="{ident}">{h(label)}</label>'
                f'<input id="{ident}" name="{h(name)}" type="{h(kind)}" value="{h(value)}"'
                f' autocomplete="{h(autocomplete)}"{req}{described}>{hint_html}</div>')


def textarea(name: str, label: str, *, value: str = "", rows: int = 3, hint: str = "", prefix: str = "") -> Html:
    """A labelled multi-line input, with an optional hint tied by aria-describedby."""
    ident = f"f-{prefix}{name}"
    described = f' aria-describedby="{ident}-hint"' if hint else ""
    hint_html = f'<small id="{ident}-hint">{h(hint)}</small>' if hint else ""
    return Html(f'<div class="field"><label for="{ident}">{h(label)}</label>'
                f'<textarea id="{ident}" name="{h(name)}" rows="{rows}"{described}>{h(value)}</textarea>{hint_html}</div>')


def checkbox(name: str, label: str, *, checked: bool = False, prefix: str = "") -> Html:
    """A labelled checkbox: sent as ``true`` when ticked."""
    ident = f"f-{prefix}{name}"
    tick = " checked" if checked else ""
    return Html(f'<div class="field check"><input id="{ident}" name="{h(name)}" type="checkbox" value="true"{tick}>'
                f'<label for="{ident}">{h(label)}</label></div>')


def select(name: str, label: str, options: Sequence[tuple[str, str]], value: str = "", *, prefix: str = "") -> Html:
    """A labelled ``<select>`` of (value, text) options, ``value`` selected."""
    ident = f"f-{prefix}{name}"
    opts = "".join(f'<option value="{h(v)}"{" selected" if v == value else ""}>{h(t)}</option>' for v, t in options)
    return Html(f'<div class="field"><label for="{ident}">{h(label)}</label>'
                f'<select id="{ident}" name="{h(name)}">{opts}</select></div>')


def get_form(action: str, legend: str, fields: Sequence[Html], submit: str, *, keep: dict[str, str] | None = None,
             cls: str = "block") -> Html:
    """A form of labelled fields that only asks (GET: a filter, a search, a dry run):
    no token, and its answer is a page one can bookmark. ``keep``: hidden values it carries
    along (the table's sort)."""
    inputs = "".join(hidden(k, v) for k, v in (keep or {}).items())
    return Html(f'<form method="get" action="{h(action)}" class="{h(cls)}">{inputs}'
                f"<fieldset><legend>{h(legend)}</legend>{''.join(fields)}"
                f'<button type="submit">{h(submit)}</button></fieldset></form>')


def form(action: str, csrf: str, legend: str, fields: Sequence[Html], submit: str) -> Html:
    """A form of several labelled fields in a fieldset, POSTing to ``action``."""
    return Html(f'<form method="post" action="{h(action)}" class="block">{hidden("csrf", csrf)}'
                f"<fieldset><legend>{h(legend)}</legend>{''.join(fields)}"
                f'<button type="submit">{h(submit)}</button></fieldset></form>')


def size(n: int) -> str:
    """Bytes for a reader: 1.5 MiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def duration(seconds: float) -> str:
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d {hours}h {minutes}m"
    if hours:
        return f"{hours}h {minutes}m {s}s"
    return f"{minutes}m {s}s"


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, plural unless one: "1 dead letter", "3 partitions"."""
    return f"{n} {word}" + ("" if n == 1 else "s")
