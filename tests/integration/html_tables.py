"""The data tables of a console page, read from its HTML as a screen reader would (no
browser): each table by its caption, each row as the text of its cells, the header row
first. Tables the console shows empty are paragraphs "<caption>: <empty text>"."""

from __future__ import annotations

from html.parser import HTMLParser


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._caption: str | None = None
        self._rows: list[list[str]] | None = None
        self._cell: list[str] | None = None
        self._in_caption = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._caption, self._rows = "", []
        elif tag == "caption":
            self._in_caption = True
        elif tag == "tr" and self._rows is not None:
            self._rows.append([])
        elif tag in ("td", "th") and self._rows is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "caption":
            self._in_caption = False
        elif tag in ("td", "th") and self._cell is not None and self._rows:
            self._rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table" and self._rows is not None:
            self.tables[self._caption or ""] = self._rows
            self._rows = None

    def handle_data(self, data: str) -> None:
        if self._in_caption and self._caption is not None:
            self._caption += data
        elif self._cell is not None:
            self._cell.append(data)


def html_tables(page: str) -> dict[str, list[list[str]]]:
    """{caption: [header cells, row cells, ...]} of every table of ``page``."""
    parser = _Tables()
    parser.feed(page)
    return parser.tables


def html_rows(page: str, caption: str) -> list[dict[str, str]]:
    """The rows of the table captioned ``caption``, as {header: cell}."""
    rows = html_tables(page)[caption]
    return [dict(zip(rows[0], r)) for r in rows[1:]]
