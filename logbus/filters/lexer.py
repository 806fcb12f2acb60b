"""Tokens of a SQL92 selector (JMS message selector syntax, as RocketMQ and ActiveMQ
read it): keywords in any case, identifiers (or "quoted" ones), 'strings' with ''
for a quote, decimal integers and floats, and the operators. Each token keeps its
position in the text, for errors."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import FilterError

KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "LIKE", "ESCAPE", "TRUE", "FALSE"})

# kind: KEYWORD (value upper-cased), NAME, STRING, INT, FLOAT, OP, END
_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>\d+)
  | (?P<word>[A-Za-z_$][A-Za-z0-9_$.]*)
  | (?P<string>'(?:[^']|'')*')
  | (?P<quoted>"(?:[^"]|"")*")
  | (?P<op><>|!=|<=|>=|[=<>()+\-*/,])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    value: object
    position: int


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos, end = 0, len(text)
    match = _TOKEN.match
    while pos < end:
        m = match(text, pos)
        if m is None:
            ch = text[pos]
            if ch == "'":
                raise FilterError("a string literal is not closed", pos)
            if ch == '"':
                raise FilterError("a quoted name is not closed", pos)
            raise FilterError(f"unexpected character {ch!r}", pos)
        kind = m.lastgroup
        raw = m.group()
        if kind == "word":
            upper = raw.upper()
            if upper in KEYWORDS:
                tokens.append(Token("KEYWORD", upper, pos))
            else:
                tokens.append(Token("NAME", raw, pos))
        elif kind == "int":
            tokens.append(Token("INT", int(raw), pos))
        elif kind == "float":
            tokens.append(Token("FLOAT", float(raw), pos))
        elif kind == "string":
            tokens.append(Token("STRING", raw[1:-1].replace("''", "'"), pos))
        elif kind == "quoted":
            name = raw[1:-1].replace('""', '"')
            if not name:
                raise FilterError("an empty quoted name", pos)
            tokens.append(Token("NAME", name, pos))
        elif kind == "op":
            tokens.append(Token("OP", "<>" if raw == "!=" else raw, pos))
        pos = m.end()
    tokens.append(Token("END", None, end))
    return tokens
