"""Output helpers of the CLI (cli.py, cli_ops.py): aligned tables and short figures."""

from __future__ import annotations

import sys
from typing import Any, TextIO


def table(header: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns separated by two spaces; ``header`` may be empty."""
    lines = ([header] if header else []) + rows
    if not lines:
        return ""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
        for line in lines
    )


def size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def duration(value: Any) -> str:
    if not isinstance(value, int):
        return "" if value is None else str(value)
    if value < 0:
        return "forever"
    for unit, ms in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if value >= ms and value % ms == 0:
            return f"{value // ms}{unit}"
    return f"{value}ms"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def printable(text: str) -> str:
    """``text`` on one line of a table: control characters escaped."""
    text = str(text)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class Progress:
    """A one-line progress bar on stderr, redrawn in place, while stderr is a terminal
    (nothing otherwise: a pipe or a log gets only the command's result)."""

    WIDTH = 30

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.on = self.stream.isatty()
        self.drawn = False

    def update(self, done: int, total: int | None = None) -> None:
        if not self.on:
            return
        if total:
            filled = min(self.WIDTH, self.WIDTH * done // total)
            line = f"{self.label} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total}"
        else:
            line = f"{self.label} {done}"
        self.stream.write("\r" + line + "\x1b[K")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False
