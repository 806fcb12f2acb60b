"""Hostile input for the selector and tag-filter parsers (logbus/filters): whatever the
text, ``Selector.parse`` and ``TagFilter.parse`` either succeed or raise ``FilterError``
with a position inside the text; a selector that parses evaluates any properties to a
bool; nesting and length that would exhaust the Python stack are refused, not crashed on."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbus.filters import FilterError, Selector, TagFilter

Value: TypeAlias = int | float | str | bool | None

FUZZ = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KEYWORDS = ("AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "LIKE", "ESCAPE", "TRUE", "FALSE")
IDENTS = ("a", "b", "x.y", "$m", "_u", "a1", '"my prop"', '"q""t"', '""', '"open', "é", "1a")
STRINGS = ("'x'", "'it''s'", "''", "'%_'", "'!'", "'open", "'''", "'é😀'", "'\n'")
NUMBERS = (
    "0", "5", "-5", "1.5", ".5", "5.", "1e3", "1E-3", "1e+3", "1e", "1e+", "1.2.3", "0x1F", "007",
    "1e999", "-1e999", "99999999999999999999999", "9" * 5000, "1" + "0" * 400 + ".5", "..", "1_000",
)  # fmt: skip
SYMBOLS = (
    "=", "<>", "<", "<=", ">", ">=", "!=", "==", "+", "-", "*", "/", "%", "(", ")", ",", "||",
    "&&", ";", ".", "!", "?", "@", "`", "\\", "[", "]", "--", "/*", "*/",
)  # fmt: skip
SPACES = (" ", "\t", "\n", "\r", "\f", "\x00", "\u00a0", "\u2028", "\ud800")


def keyword_variants() -> st.SearchStrategy[str]:
    return st.sampled_from(KEYWORDS).flatmap(
        lambda word: st.lists(st.booleans(), min_size=len(word), max_size=len(word)).map(
            lambda upper: "".join(ch if up else ch.lower() for ch, up in zip(word, upper))
        )
    )


TOKENS = st.one_of(
    keyword_variants(),
    st.sampled_from(IDENTS),
    st.sampled_from(STRINGS),
    st.sampled_from(NUMBERS),
    st.sampled_from(SYMBOLS),
    st.sampled_from(SPACES),
    st.text(max_size=3),
)
TOKEN_SOUP = st.lists(st.tuples(TOKENS, st.sampled_from(("", " ", " ", "\n"))), max_size=30).map(
    lambda parts: "".join(token + gap for token, gap in parts)
)

SEEDS = (
    "a > 5 AND b = 'abc'",
    "type='user' or a <7",
    "a BETWEEN 1 AND 3 OR NOT (b IN ('x', 'y') AND c IS NOT NULL)",
    "s NOT LIKE '10!%' ESCAPE '!' AND (a + 1) * -2.5 >= 1e3 / b",
    '"my prop" <> \'it\'\'s\' OR x.y IS NULL OR $m = TRUE',
    "NOT c AND d = FALSE AND e NOT BETWEEN -1 AND .5",
)


@st.composite
def mutated_selectors(draw: st.DrawFn) -> str:
    """A valid selector with a few random splices: deletions, insertions of grammar
    tokens, duplications, swaps, truncation."""
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 8)))
        op = draw(st.sampled_from(("delete", "insert", "insert", "duplicate", "swap", "truncate")))
        if op == "delete":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + draw(TOKENS) + text[i:]
        elif op == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        elif op == "swap" and j - i >= 2:
            text = text[:i] + text[j - 1] + text[i + 1 : j - 1] + text[i] + text[j:]
        elif op == "truncate":
            text = text[:i]
    return text


# -- well-formed selectors without any type discipline (strings times numbers, LIKE on a
#    boolean, ...): each parses or is refused, and evaluates on any properties


def wrap(text: str, parens: bool) -> str:
    return f"({text})" if parens else text


VALUES = st.one_of(
    st.sampled_from(("a", "b", "x.y", '"my prop"')),
    st.sampled_from(STRINGS[:5]),
    st.sampled_from(("0", "5", "1.5", ".5", "1e3", "1e999", "99999999999999999999999", "1" + "0" * 400)),
    keyword_variants().filter(lambda k: k.upper() in ("TRUE", "FALSE", "NULL")),
)
EXPRS = st.recursive(
    VALUES,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from("+-*/"), inner, st.booleans()).map(
            lambda t: wrap(f"{t[0]} {t[1]} {t[2]}", t[3])
        ),
        inner.map(lambda x: f"- {x}"),
    ),
    max_leaves=4,
)
PREDICATES = st.one_of(
    st.tuples(EXPRS, st.sampled_from(("=", "<>", "<", "<=", ">", ">=")), EXPRS).map(" ".join),
    st.tuples(EXPRS, st.sampled_from(("", "NOT ")), EXPRS, EXPRS).map(
        lambda t: f"{t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]}"
    ),
    st.tuples(VALUES, st.sampled_from(("", "NOT ")), st.lists(VALUES, min_size=1, max_size=3)).map(
        lambda t: f"{t[0]} {t[1]}IN ({', '.join(t[2])})"
    ),
    st.tuples(VALUES, st.sampled_from(("", "NOT ")), st.sampled_from(STRINGS[:5] + ("1", "a")),
              st.sampled_from(("", " ESCAPE '!'", " ESCAPE ''", " ESCAPE '!!'", " ESCAPE 1"))).map(
        lambda t: f"{t[0]} {t[1]}LIKE {t[2]}{t[3]}"
    ),  # fmt: skip
    st.tuples(EXPRS, st.sampled_from(("IS NULL", "IS NOT NULL"))).map(" ".join),
    VALUES,
)
CONDITIONS = st.recursive(
    PREDICATES,
    lambda inner: st.one_of(
        inner.map(lambda c: f"NOT ({c})"),
        st.tuples(inner, st.sampled_from(("AND", "OR")), inner, st.booleans()).map(
            lambda t: wrap(f"{t[0]} {t[1]} {t[2]}", t[3])
        ),
    ),
    max_leaves=5,
)
PROPERTY_VALUES: st.SearchStrategy[Value] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(2**80), 2**80),
    st.floats(),
    st.text(max_size=6),
    st.sampled_from(("10", "-2.5", " 5 ", "1e400", "nan", "NaN", "inf", "-0", "0x10", "1_000", "١٢", "9" * 5000)),
)


def parse_or_refuse(parse: Callable[[str], object], text: str) -> object | None:
    """``parse(text)``, or None when it raised FilterError (checked); any other exception
    propagates and fails the test."""
    try:
        return parse(text)
    except FilterError as err:
        assert isinstance(err, ValueError)
        assert type(err.position) is int, repr(err.position)
        assert 0 <= err.position <= len(text), (err.position, len(text), str(err))
        assert str(err.position) in str(err), str(err)  # the message names the position
        return None


def check_selector(text: str, props: list[dict[str, Value]] | None = None) -> Selector | None:
    selector = parse_or_refuse(Selector.parse, text)
    if selector is None:
        return None
    assert isinstance(selector, Selector)
    assert isinstance(selector.names, frozenset)
    assert all(isinstance(name, str) for name in selector.names)
    for p in [{}, *(props or [])]:
        assert type(selector.matches(p)) is bool, (text, p)
    return selector


@FUZZ
@given(st.text(max_size=200))
def test_selector_arbitrary_text(text: str) -> None:
    check_selector(text)


@FUZZ
@given(TOKEN_SOUP)
def test_selector_token_soup(text: str) -> None:
    check_selector(text, [{"a": 1, "b": "x", "x.y": 2.5, "my prop": True, "$m": None}])


@FUZZ
@given(mutated_selectors())
def test_selector_mutated(text: str) -> None:
    check_selector(text, [{"a": 10, "b": "abc", "c": True, "s": "10%", "e": 0}])


@FUZZ
@given(CONDITIONS, st.lists(st.dictionaries(st.sampled_from(("a", "b", "x.y", "my prop")), PROPERTY_VALUES), max_size=3))
def test_selector_untyped_grammar(text: str, props: list[dict[str, Value]]) -> None:
    """Unlike types compare FALSE, arithmetic on non-numbers and huge or infinite values
    are all evaluated without raising."""
    check_selector(text, props)


def test_filter_error_is_value_error() -> None:
    assert issubclass(FilterError, ValueError)
    with pytest.raises(FilterError) as info:
        Selector.parse("a > ")
    assert 2 <= info.value.position <= 4  # at the operator missing its operand, or the end


DEEP = 10_000
LONG = 1_000_000


@pytest.mark.parametrize(
    "text",
    [
        "(" * DEEP,
        ")" * DEEP,
        "(" * DEEP + "a = 1",
        "a = 1" + ")" * DEEP,
        "(" * DEEP + "a = 1" + ")" * (DEEP - 1),
        "a = " + "(" * DEEP + "1",
        "NOT " * DEEP,
        "a IN (" + "'x', " * DEEP,
        "a" * LONG,
        "'" + "x" * LONG,
        '"' + "x" * LONG,
        "9" * LONG,
        "a = " + "9" * LONG,
        "a = 1 AND " * DEEP,
        "a = 1 " + "AND " * DEEP,
    ],
    ids=lambda text: repr(text[:12]) + f"..{len(text)}",
)
def test_selector_deep_or_long_invalid(text: str) -> None:
    with pytest.raises(FilterError) as info:
        Selector.parse(text)
    assert 0 <= info.value.position <= len(text)


@pytest.mark.parametrize(
    ("text", "props", "expected"),
    [
        ("(" * DEEP + "a = 1" + ")" * DEEP, {"a": 1}, True),
        ("a = " + "(" * DEEP + "1" + ")" * DEEP, {"a": 1}, True),
        ("NOT " * DEEP + "(a = 1)", {"a": 1}, True),  # an even number of NOTs
        ("NOT (" * DEEP + "a = 1" + ")" * DEEP, {"a": 1}, True),
        ("a = " + "- " * DEEP + "1", {"a": 1}, True),
        (" AND ".join(["a = 1"] * DEEP), {"a": 1}, True),
        (" OR ".join(["a = 2"] * DEEP + ["a = 1"]), {"a": 1}, True),
        ("a = " + " + ".join(["1"] * DEEP), {"a": DEEP}, True),
        ("a IN (" + ", ".join(f"'{i}'" for i in range(DEEP)) + ")", {"a": "9999"}, True),
        ("a = '" + "x" * LONG + "'", {"a": "x" * LONG}, True),
        ("a = " + "9" * LONG, {"a": 1}, False),
    ],
    ids=lambda v: repr(v[:12]) + f"..{len(v)}" if isinstance(v, str) else None,
)
def test_selector_deep_or_long_valid(text: str, props: dict[str, Value], expected: bool) -> None:
    """Nesting, chains and lengths a hand-written selector never reaches: either refused
    with FilterError (a limit) or evaluated correctly - never a RecursionError, a Python
    compiler error or an int-conversion limit."""
    selector = parse_or_refuse(Selector.parse, text)
    if selector is not None:
        assert isinstance(selector, Selector)
        assert selector.matches(props) is expected


@pytest.mark.parametrize(
    ("text", "props"),
    [
        ("a = 1.5 + 1" + "0" * 400, {}),  # an int literal beyond float range meets a float
        ("a = 1" + "0" * 400 + " / 2.5", {"a": 1}),
        ("a > 1", {"a": "9" * 5000}),  # a numeric string beyond int('...')'s digit limit
        ("a = 1.5", {"a": "1" + "0" * 400}),
        ("0 IS NULL", {}),  # never compiled to Python's `0 is None` (a SyntaxWarning)
        ("-1 IS NOT NULL", {}),
    ],
    ids=lambda v: repr(v[:16]) if isinstance(v, str) else None,
)
def test_selector_extreme_values(text: str, props: dict[str, Value]) -> None:
    """Parsed, or refused with FilterError; evaluated to a bool, never raising."""
    check_selector(text, [props])


# -- tag filters ----------------------------------------------------------------------------

TAG_TOKENS = st.one_of(
    st.sampled_from(("TagA", "TagB", "*", "||", "|", " ", "\t", "\n", "**", "a*", "é", "\x00", "\ud800")),
    st.text(max_size=4),
)
TAG_SOUP = st.lists(TAG_TOKENS, max_size=12).map("".join)


def check_tags(text: str) -> None:
    tags = parse_or_refuse(TagFilter.parse, text)
    if tags is not None:
        assert isinstance(tags, TagFilter)
        for tag in (None, "", "TagA", "*", "x" * 100, text):
            assert type(tags.matches(tag)) is bool, (text, tag)


@FUZZ
@given(st.text(max_size=100))
def test_tags_arbitrary_text(text: str) -> None:
    check_tags(text)


@FUZZ
@given(TAG_SOUP)
def test_tags_token_soup(text: str) -> None:
    check_tags(text)


def test_tags_long() -> None:
    check_tags(" || ".join(f"Tag{i}" for i in range(DEEP)))
    check_tags("|" * LONG)
    check_tags("x" * LONG)


@pytest.mark.parametrize(
    ("text", "tag", "expected"),
    [
        ("*", None, True),
        ("*", "TagA", True),
        ("TagA || TagB", "TagA", True),
        ("TagA || TagB", "TagB", True),
        ("TagA || TagB", "TagC", False),
        ("TagA || TagB", None, False),
        ("TagA", "taga", False),
    ],
)
def test_tags_golden(text: str, tag: str | None, expected: bool) -> None:
    assert TagFilter.parse(text).matches(tag) is expected
