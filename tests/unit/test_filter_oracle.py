"""SQL92 message selectors (logbus/filters) checked against SQLite as an oracle.

Random selectors are drawn from the part of the grammar where JMS-style selectors and
SQLite share their semantics: numbers compared with numbers, strings with strings, booleans
only with = / <> (stored in SQLite as 1 / 0), LIKE on string properties, IN over
homogeneous literal lists, Kleene AND / OR / NOT over NULL for a missing property.
Each selector is evaluated by ``Selector.matches`` and by SQLite on a one-row table whose
columns are the property names; the two must agree. A handful of golden cases (RocketMQ's
documented example, three-valued logic, the semantics SQLite does not share) follow.
"""

from __future__ import annotations

import random
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeAlias

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbus.filters import Selector

Value: TypeAlias = int | float | str | bool | None

KINDS = ("int", "float", "str", "bool")
PRESENT = ("a", "b", "c", "d", "e", "my prop")  # each may still be drawn missing
ABSENT = ("zz", "x.y", "$m", 'q"t')  # never in the properties: always NULL
NAMES = PRESENT + ABSENT
KEYWORDS = {"and", "or", "not", "between", "in", "is", "null", "like", "escape", "true", "false"}
PLAIN_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$.]*")
# no digits (a numeric-looking string is compared numerically against numbers), no letters
# that could spell "nan" / "inf"; with the LIKE wildcards, quotes, the escape characters,
# a newline, case pairs and non-ASCII (2- and 4-byte UTF-8)
ALPHABET = "aAbéÉ%_'\"!\\ \n😀"
ESCAPES = ("!", "\\", "~", "#")
EXAMPLES = 1000

pytestmark = pytest.mark.skipif(sqlite3.sqlite_version_info < (3, 23), reason="SQLite before 3.23 has no TRUE / FALSE")


# -- selector syntax tree ---------------------------------------------------------------------


@dataclass(frozen=True)
class Ident:
    name: str


@dataclass(frozen=True)
class NumLit:
    value: int | float
    text: str  # as written: 5, 2.25, .25, 225e-2, 1E3


@dataclass(frozen=True)
class StrLit:
    value: str


@dataclass(frozen=True)
class BoolLit:
    value: bool


@dataclass(frozen=True)
class Neg:
    operand: Num


@dataclass(frozen=True)
class Arith:
    op: str  # + - * /
    left: Num
    right: Num


@dataclass(frozen=True)
class Compare:
    op: str  # = <> < <= > >=
    left: Operand
    right: Operand


@dataclass(frozen=True)
class Between:
    expr: Num
    low: Num
    high: Num
    negated: bool


@dataclass(frozen=True)
class In:
    ident: Ident
    items: tuple[NumLit | StrLit, ...]
    negated: bool


@dataclass(frozen=True)
class Like:
    ident: Ident
    pattern: str
    escape: str | None
    negated: bool


@dataclass(frozen=True)
class IsNull:
    expr: Num
    negated: bool


@dataclass(frozen=True)
class Bare:
    term: Ident | BoolLit  # a boolean property or TRUE / FALSE used as a condition


@dataclass(frozen=True)
class Not:
    operand: Cond


@dataclass(frozen=True)
class And:
    left: Cond
    right: Cond


@dataclass(frozen=True)
class Or:
    left: Cond
    right: Cond


Num: TypeAlias = Ident | NumLit | Neg | Arith
Operand: TypeAlias = Num | StrLit | BoolLit
Cond: TypeAlias = Compare | Between | In | Like | IsNull | Bare | Not | And | Or


def names_read(node: Cond | Operand) -> set[str]:
    if isinstance(node, Ident):
        return {node.name}
    if isinstance(node, NumLit | StrLit | BoolLit):
        return set()
    if isinstance(node, Neg):
        return names_read(node.operand)
    if isinstance(node, Arith | Compare | And | Or):
        return names_read(node.left) | names_read(node.right)
    if isinstance(node, Between):
        return names_read(node.expr) | names_read(node.low) | names_read(node.high)
    if isinstance(node, In | Like):
        return {node.ident.name}
    if isinstance(node, IsNull):
        return names_read(node.expr)
    if isinstance(node, Bare):
        return names_read(node.term)
    return names_read(node.operand)


# -- rendering: the selector (random keyword case, spacing and redundant parentheses) --------


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class SelectorWriter:
    """Renders a tree as selector text with the fewest parentheses the usual precedence
    needs (AND over OR; * / over + -; unary minus tightest) plus random extra ones. The
    operand of NOT is parenthesised unless it is a bare boolean or another NOT: whether
    ``NOT a = 1`` means ``NOT (a = 1)`` (SQL92) or ``(NOT a) = 1`` (ActiveMQ) is not shared."""

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)

    def kw(self, word: str) -> str:
        r = self.rnd.random()
        if r < 0.4:
            return word.upper()
        if r < 0.7:
            return word.lower()
        return "".join(ch.upper() if self.rnd.random() < 0.5 else ch.lower() for ch in word)

    def space(self) -> str:
        return self.rnd.choice((" ", " ", " ", " ", "  ", "\t", "\n"))

    def paren(self, text: str) -> str:
        if self.rnd.random() < 0.2:
            return f"( {text} )"
        return f"({text})"

    def binary(self, left: str, op: str, right: str) -> str:
        if self.rnd.random() < 0.3:  # tight: a>5, a+1
            gap = " " if op.endswith("-") and right.startswith("-") else ""  # never "--"
            return f"{left}{op}{gap}{right}"
        return f"{left}{self.space()}{op}{self.space()}{right}"

    def ident(self, node: Ident) -> str:
        plain = PLAIN_IDENT.fullmatch(node.name) and node.name.lower() not in KEYWORDS
        return node.name if plain and self.rnd.random() < 0.8 else quote_ident(node.name)

    def num(self, node: Num, need: int) -> str:
        text, prec = self._num(node)
        return self.paren(text) if prec < need or self.rnd.random() < 0.05 else text

    def _num(self, node: Num) -> tuple[str, int]:
        if isinstance(node, Ident):
            return self.ident(node), 4
        if isinstance(node, NumLit):
            return node.text, 4
        if isinstance(node, Neg):
            operand = self.num(node.operand, 3)
            gap = " " if operand.startswith("-") or self.rnd.random() < 0.2 else ""
            return f"-{gap}{operand}", 3
        if node.op in "+-":
            return self.binary(self.num(node.left, 1), node.op, self.num(node.right, 2)), 1
        return self.binary(self.num(node.left, 2), node.op, self.num(node.right, 3)), 2

    def operand(self, node: Operand) -> str:
        if isinstance(node, StrLit):
            return quote_str(node.value)
        if isinstance(node, BoolLit):
            return self.kw("true" if node.value else "false")
        return self.num(node, 1)

    def cond(self, node: Cond, need: int = 0) -> str:
        text, prec = self._cond(node)
        return self.paren(text) if prec < need or self.rnd.random() < 0.05 else text

    def _cond(self, node: Cond) -> tuple[str, int]:
        sp = self.space
        if isinstance(node, Or):
            return f"{self.cond(node.left, 1)}{sp()}{self.kw('or')}{sp()}{self.cond(node.right, 2)}", 1
        if isinstance(node, And):
            return f"{self.cond(node.left, 2)}{sp()}{self.kw('and')}{sp()}{self.cond(node.right, 3)}", 2
        if isinstance(node, Not):
            inner = node.operand
            operand = self.cond(inner, 3) if isinstance(inner, Not | Bare) else self.paren(self.cond(inner))
            return f"{self.kw('not')}{sp()}{operand}", 3
        if isinstance(node, Bare):
            return self.operand(node.term), 4
        if isinstance(node, Compare):
            return self.binary(self.operand(node.left), node.op, self.operand(node.right)), 4
        neg = f"{self.kw('not')}{sp()}" if node.negated else ""
        if isinstance(node, Between):
            return (
                f"{self.num(node.expr, 1)}{sp()}{neg}{self.kw('between')}{sp()}{self.num(node.low, 1)}"
                f"{sp()}{self.kw('and')}{sp()}{self.num(node.high, 1)}"
            ), 4
        if isinstance(node, In):
            sep = self.rnd.choice((", ", ",", " , "))
            items = sep.join(item.text if isinstance(item, NumLit) else quote_str(item.value) for item in node.items)
            return f"{self.ident(node.ident)}{sp()}{neg}{self.kw('in')}{sp()}{self.paren(items)}", 4
        if isinstance(node, Like):
            text = f"{self.ident(node.ident)}{sp()}{neg}{self.kw('like')}{sp()}{quote_str(node.pattern)}"
            if node.escape is not None:
                text += f"{sp()}{self.kw('escape')}{sp()}{quote_str(node.escape)}"
            return text, 4
        null = f"{self.kw('is')}{sp()}{self.kw('not') + sp() if node.negated else ''}{self.kw('null')}"
        return f"{self.num(node.expr, 1)}{sp()}{null}", 4


# -- rendering: SQLite (every compound parenthesised, so precedence never matters) ------------


def sql(node: Cond | Operand) -> str:
    if isinstance(node, Ident):
        return quote_ident(node.name)
    if isinstance(node, NumLit):
        return node.text
    if isinstance(node, StrLit):
        return quote_str(node.value)
    if isinstance(node, BoolLit):
        return "TRUE" if node.value else "FALSE"
    if isinstance(node, Neg):
        return f"(- {sql(node.operand)})"
    if isinstance(node, Arith | Compare):
        return f"({sql(node.left)} {node.op} {sql(node.right)})"
    if isinstance(node, And):
        return f"({sql(node.left)} AND {sql(node.right)})"
    if isinstance(node, Or):
        return f"({sql(node.left)} OR {sql(node.right)})"
    if isinstance(node, Not):
        return f"(NOT {sql(node.operand)})"
    if isinstance(node, Bare):
        return f"({sql(node.term)})"
    neg = "NOT " if node.negated else ""
    if isinstance(node, Between):
        return f"({sql(node.expr)} {neg}BETWEEN {sql(node.low)} AND {sql(node.high)})"
    if isinstance(node, In):
        return f"({sql(node.ident)} {neg}IN ({', '.join(sql(item) for item in node.items)}))"
    if isinstance(node, Like):
        escape = f" ESCAPE {quote_str(node.escape)}" if node.escape is not None else ""
        return f"({sql(node.ident)} {neg}LIKE {quote_str(node.pattern)}{escape})"
    return f"({sql(node.expr)} IS {neg}NULL)"


@pytest.fixture(scope="module")
def db() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    conn.execute("PRAGMA case_sensitive_like = ON")
    conn.execute(f"CREATE TABLE t ({', '.join(quote_ident(name) for name in NAMES)})")  # no affinity
    yield conn
    conn.close()


def sqlite_matches(conn: sqlite3.Connection, where: str, props: dict[str, Value]) -> bool:
    conn.execute("DELETE FROM t")
    row = [int(v) if isinstance(v, bool) else v for v in (props.get(name) for name in NAMES)]
    conn.execute(f"INSERT INTO t VALUES ({', '.join('?' * len(NAMES))})", row)
    (count,) = conn.execute(f"SELECT count(*) FROM t WHERE {where}").fetchone()
    assert count in (0, 1)
    return bool(count)


# -- generation ------------------------------------------------------------------------------
# Strategies are built once; their leaves read the example's schema (property kinds and
# values) through a shared strategy, so names fit their context and literals often equal
# a property's value.


@dataclass(frozen=True)
class Schema:
    kinds: dict[str, str]  # every name in NAMES -> int / float / str / bool
    props: dict[str, Value]  # missing names absent or None

    def idents(self, *kinds: str) -> list[Ident]:
        return [Ident(name) for name in NAMES if self.kinds[name] in kinds]

    def values(self, *kinds: str) -> list[Value]:
        return [v for name, v in self.props.items() if v is not None and self.kinds[name] in kinds]


ABSENT_KINDS = dict(zip(ABSENT, ("int", "float", "str", "bool")))  # every kind has a name
PROP_VALUES: dict[str, st.SearchStrategy[Value]] = {
    "int": st.one_of(st.integers(-3, 10), st.integers(-1000, 1000)),
    "float": st.one_of(st.integers(-12, 40), st.integers(-4000, 4000)).map(lambda k: k / 4),  # exact
    "str": st.text(ALPHABET, max_size=4),
    "bool": st.booleans(),
}
PICK = st.integers(0, 63)  # an index into a list known only once the schema is drawn


@st.composite
def schemas(draw: st.DrawFn) -> Schema:
    kinds = {name: draw(st.sampled_from(KINDS)) for name in PRESENT} | ABSENT_KINDS
    props: dict[str, Value] = {}
    for name in PRESENT:
        missing = draw(st.integers(0, 9))
        if missing == 0:
            props[name] = None  # explicit None is NULL too
        elif missing > 1:
            props[name] = draw(PROP_VALUES[kinds[name]])
    return Schema(kinds, props)


SCHEMA = st.shared(schemas(), key="filter-oracle-schema")


@st.composite
def idents(draw: st.DrawFn, *kinds: str) -> Ident:
    choices = draw(SCHEMA).idents(*kinds)
    return choices[draw(PICK) % len(choices)]


def float_texts(v: float) -> list[str]:
    """Ways to write a non-negative multiple of 0.25; all parse to exactly ``v``."""
    hundredths = round(v * 100)
    texts = [repr(v), f"{hundredths}e-2", f"{hundredths}E-2"]
    if 0 < v < 1:
        texts.append(repr(v)[1:])  # .25
    if v.is_integer() and v > 0 and int(v) % 10 == 0:
        texts.append(f"{int(v) // 10}e1")
    if v == 1000:
        texts += ["1e3", "1E3", "1e+3"]
    return texts


@st.composite
def num_literals(draw: st.DrawFn) -> NumLit:
    """A non-negative literal (negatives are unary minus): a small or any int up to 1000,
    a multiple of 0.25 written in some float syntax, or a number property's value."""
    seen = draw(SCHEMA).values("int", "float")
    source = draw(st.integers(0, 3))
    if source == 3 and seen:
        v = seen[draw(PICK) % len(seen)]
        assert isinstance(v, int | float)
        v = abs(v)
    elif source == 2:
        v = draw(st.one_of(st.integers(0, 12), st.integers(0, 4000))) / 4
    else:
        v = draw(st.one_of(st.integers(0, 10), st.integers(0, 1000)))
    if isinstance(v, int):
        return NumLit(v, str(v))
    texts = float_texts(v)
    return NumLit(v, texts[draw(PICK) % len(texts)])


@st.composite
def str_values(draw: st.DrawFn) -> str:
    seen = draw(SCHEMA).values("str")
    if draw(st.booleans()) and seen:
        v = seen[draw(PICK) % len(seen)]
        assert isinstance(v, str)
        return v
    return draw(st.text(ALPHABET, max_size=4))


def arithmetic(inner: st.SearchStrategy[Num]) -> st.SearchStrategy[Num]:
    return st.one_of(st.builds(Neg, inner), st.builds(Arith, st.sampled_from("+-*/"), inner, inner))


# At most 4 leaves of magnitude <= 1000: an int product stays far below 2**63 (SQLite would
# turn an overflow into REAL) and sums and products of multiples of 0.25 stay exact.
# Division by anything, zero included: both give NULL for a zero divisor and truncate
# int / int toward zero; a float quotient is the same IEEE double in both.
NUMS: st.SearchStrategy[Num] = st.recursive(st.one_of(idents("int", "float"), num_literals()), arithmetic, max_leaves=4)
STRS: st.SearchStrategy[Operand] = st.one_of(idents("str"), str_values().map(StrLit))
BOOLS: st.SearchStrategy[Ident | BoolLit] = st.one_of(idents("bool"), st.booleans().map(BoolLit))
NEGATED = st.booleans()
ORDER_OPS = st.sampled_from(("=", "<>", "<", "<=", ">", ">="))


@st.composite
def likes(draw: st.DrawFn) -> Like:
    """A pattern, often derived from a string property's value so that it can match."""
    escape = draw(st.one_of(st.none(), st.sampled_from(ESCAPES)))
    out: list[str] = []
    for ch in draw(str_values()):
        action = draw(st.sampled_from(("keep", "keep", "keep", "_", "%", "drop", "insert%")))
        if action == "insert%":
            out.append("%")
            action = "keep"
        if action == "keep":
            if escape is not None and ch in ("%", "_", escape):
                out.append(escape + ch)  # literal % / _ / escape character
            else:
                out.append(ch)  # without ESCAPE a % or _ here is a wildcard: still valid
        elif action in ("_", "%"):
            out.append(action)
    if draw(st.integers(0, 3)) == 0:
        out.insert(draw(st.integers(0, len(out))), "%")
    return Like(draw(idents("str")), "".join(out), escape, draw(NEGATED))


PREDICATES: st.SearchStrategy[Cond] = st.one_of(
    st.builds(Compare, ORDER_OPS, NUMS, NUMS),
    st.builds(Compare, ORDER_OPS, STRS, STRS),
    st.builds(Compare, st.sampled_from(("=", "<>")), BOOLS, BOOLS),
    st.builds(Between, NUMS, NUMS, NUMS, NEGATED),
    st.builds(Bare, BOOLS),
    st.builds(IsNull, st.one_of(idents(*KINDS), NUMS), NEGATED),
    st.builds(In, idents("int", "float"), st.lists(num_literals(), min_size=1, max_size=4).map(tuple[NumLit, ...]), NEGATED),
    st.builds(In, idents("str"), st.lists(str_values().map(StrLit), min_size=1, max_size=4).map(tuple[StrLit, ...]), NEGATED),
    likes(),
    likes(),
)


def logic(inner: st.SearchStrategy[Cond]) -> st.SearchStrategy[Cond]:
    return st.one_of(st.builds(Not, inner), st.builds(And, inner, inner), st.builds(Or, inner, inner))


CONDITIONS = st.recursive(PREDICATES, logic, max_leaves=6)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Schema, Cond, int]:
    return draw(SCHEMA), draw(CONDITIONS), draw(st.integers(0, 2**32 - 1))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_selector_agrees_with_sqlite(db: sqlite3.Connection, case: tuple[Schema, Cond, int]) -> None:
    schema, tree, seed = case
    text = SelectorWriter(seed).cond(tree)
    where = sql(tree)
    selector = Selector.parse(text)
    assert selector.names == frozenset(names_read(tree)), text
    expected = sqlite_matches(db, where, schema.props)
    assert selector.matches(schema.props) is expected, f"{text!r} on {schema.props!r} (SQLite: {where})"


# -- golden cases ----------------------------------------------------------------------------

RM = "a > 5 AND b = 'abc'"  # RocketMQ's documented SQL92 filter example

GOLDEN: list[tuple[str, dict[str, Value], bool]] = [
    (RM, {"a": 10, "b": "abc", "c": True}, True),
    (RM, {"a": 1, "b": "abc", "c": True}, False),
    (RM, {"a": 10, "b": "abd", "c": True}, False),
    ("type='user' or a <7", {"type": "user"}, True),
    ("type='user' OR a <7", {"type": "admin", "a": 3}, True),
    ("type='user' Or a <7", {"type": "admin", "a": 7}, False),
    ("type='user' oR a <7", {}, False),
    ("TYPE = 'user'", {"type": "user"}, False),  # identifiers are case-sensitive
    # three-valued logic: a missing (or None) property is NULL
    ("a > 5", {}, False),
    ("NOT (a > 5)", {}, False),
    ("not (a > 5)", {"a": None}, False),
    ("a > 5 OR TRUE", {}, True),
    ("a > 5 AND FALSE", {}, False),
    ("NOT (a > 5 AND TRUE)", {}, False),
    ("NOT (a > 5 AND FALSE)", {}, True),
    ("a > 5 OR b = 1", {"b": 1}, True),
    ("NOT (a > 5 OR b = 1)", {"b": 2}, False),
    ("a IS NULL", {}, True),
    ("a is null", {"a": None}, True),
    ("a IS NOT NULL", {}, False),
    ("a IS NOT NULL", {"a": 0}, True),
    ("a BETWEEN 1 AND 3", {}, False),
    ("a NOT BETWEEN 1 AND 3", {}, False),
    ("a BETWEEN 1 AND 3", {"a": 3}, True),
    ("a NOT BETWEEN 1 AND 3 AND b = 1", {"a": 4, "b": 1}, True),
    ("s IN ('x', 'y')", {}, False),
    ("s NOT IN ('x', 'y')", {}, False),
    ("s NOT IN ('x', 'y')", {"s": "z"}, True),
    ("s LIKE 'a%'", {}, False),
    ("s NOT LIKE 'a%'", {}, False),
    ("a + 1 IS NULL", {}, True),
    ("a + 1 > 0 OR a + 1 <= 0", {}, False),
    # arithmetic: int / int truncates toward zero; division by zero is NULL
    ("-7 / 2 = -3", {}, True),
    ("7 / -2 = -3", {}, True),
    ("a / 2 = -3", {"a": -7}, True),
    ("a / 2 = 3.5", {"a": 7.0}, True),
    ("a / b IS NULL", {"a": 1, "b": 0}, True),
    ("a / 0 = 0", {"a": 1}, False),
    ("NOT (a / 0 = 0)", {"a": 1}, False),
    ("1e3 = 1000 AND .5 = 0.5 AND 1.5 * 2 = 3", {}, True),
    ("2 + 3 * 4 = 14 AND 10 - 2 - 3 = 5 AND 12 / 2 / 3 = 2 AND -a * 2 = -4", {"a": 2}, True),
    # parenthesised arithmetic
    ("(2 + 3) * 4 = 20", {}, True),
    ("a * (b + 1) = 6", {"a": 2, "b": 2}, True),
    ("(-a) = 5", {"a": -5}, True),
    ("a = (5)", {"a": 5}, True),
    ("(a + 1) > 0 AND 10 - (2 - 3) = 11", {"a": 0}, True),
    # IS NULL on a literal or an expression
    ("0 IS NULL", {}, False),
    ("-1 IS NOT NULL", {}, True),
    ("'x' IS NOT NULL", {}, True),
    ("1.5 IS NULL", {}, False),
    # strings: '' inside a literal, LIKE is case-sensitive, _ is one character, ESCAPE
    ("b = 'it''s'", {"b": "it's"}, True),
    ("s LIKE 'a_c'", {"s": "abc"}, True),
    ("s LIKE 'a_c'", {"s": "a\nc"}, True),
    ("s LIKE 'a_c'", {"s": "ac"}, False),
    ("s LIKE 'A%'", {"s": "abc"}, False),
    ("s LIKE '%c'", {"s": "abc\n"}, False),
    ("s LIKE '10!%' ESCAPE '!'", {"s": "10%"}, True),
    ("s LIKE '10!%' ESCAPE '!'", {"s": "100"}, False),
    ("s LIKE '10%'", {"s": "100"}, True),
    ("s NOT LIKE 'x!_y' escape '!'", {"s": "xzy"}, True),
    ('"my prop" = \'x\' AND "q""t" = 1', {"my prop": "x", 'q"t': 1}, True),
    # booleans
    ("c", {"c": True}, True),
    ("NOT c", {"c": False}, True),
    ("NOT c", {}, False),
    ("c = TRUE AND d <> true", {"c": True, "d": False}, True),
    # unlike types compare FALSE, not UNKNOWN (so NOT makes them TRUE) - SQLite differs here
    ("s > 5", {"s": "abc"}, False),
    ("NOT (s = 5)", {"s": "abc"}, True),
    ("NOT (c = 1)", {"c": True}, True),
    ("c = 1", {"c": True}, False),
    # a string property that parses as a number is compared numerically against numbers
    ("s > 5", {"s": "10"}, True),
    ("s = 10", {"s": "10"}, True),
]


@pytest.mark.parametrize(("text", "props", "expected"), GOLDEN)
def test_golden(text: str, props: dict[str, Value], expected: bool) -> None:
    assert Selector.parse(text).matches(props) is expected


def test_names() -> None:
    assert Selector.parse(RM).names == frozenset({"a", "b"})
    assert Selector.parse("TRUE").names == frozenset()
    assert Selector.parse('"my prop" IS NULL OR x.y IN (\'1\') OR $m LIKE \'%\'').names == frozenset(
        {"my prop", "x.y", "$m"}
    )
