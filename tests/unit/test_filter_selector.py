"""Selectors and tag expressions (logbus.filters): what each construct means, what is
refused and where, beyond what the SQLite oracle (test_filter_oracle.py) can judge:
unlike types, text that reads as a number, limits."""

from __future__ import annotations

from typing import Any

import pytest

from logbus.filters import FilterError, Selector, TagFilter
from logbus.filters.syntax import MAX_DEPTH, MAX_LENGTH


def m(text: str, **props: Any) -> bool:
    return Selector.parse(text).matches(props)


@pytest.mark.parametrize(("text", "props", "expected"), [
    # RocketMQ's documented example
    ("a > 5 AND b = 'abc'", {"a": 10, "b": "abc", "c": True}, True),
    ("a > 5 AND b = 'abc'", {"a": 1, "b": "abc", "c": True}, False),
    # keywords in any case
    ("type='user' or a <7", {"type": "user", "a": 9}, True),
    ("type='user' Or a <7", {"type": "shop", "a": 9}, False),
    # three-valued logic: a missing property is NULL
    ("a > 5", {}, False),
    ("NOT (a > 5)", {}, False),
    ("a > 5 OR TRUE", {}, True),
    ("a > 5 AND FALSE", {}, False),
    ("NOT (a > 5 AND FALSE)", {}, True),
    ("a IS NULL", {}, True),
    ("a IS NOT NULL", {"a": 0}, True),
    ("a <> 1", {"a": None}, False),
    # numbers: int and float compare as numbers
    ("a = 1", {"a": 1.0}, True),
    ("a BETWEEN 1 AND 2.5", {"a": 2.5}, True),
    ("a NOT BETWEEN 1 AND 2", {"a": 3}, True),
    ("a NOT BETWEEN 1 AND 2", {}, False),
    ("a + b * 2 = 7", {"a": 1, "b": 3}, True),
    ("a / 2 = 3", {"a": 7}, True),  # int / int truncates
    ("a / 2 = -3", {"a": -7}, True),  # toward zero
    ("a / 2.0 = 3.5", {"a": 7}, True),
    ("a / 0 IS NULL", {"a": 7}, True),
    ("-a = -3", {"a": 3}, True),
    # text that reads as a number is that number against numbers (MQTT, Kafka properties)
    ("temp > 30", {"temp": "31.5"}, True),
    ("temp > 30", {"temp": "-1e3"}, False),
    ("temp + 1 = 2", {"temp": "1"}, True),
    ("temp IN (1, 2)", {"temp": "2"}, True),
    ("temp > 30", {"temp": "hot"}, False),
    ("NOT (temp > 30)", {"temp": "hot"}, True),  # FALSE, not UNKNOWN: unlike types
    # unlike types compare FALSE (JMS), whatever the operator
    ("a = 'x'", {"a": 1}, False),
    ("a <> 'x'", {"a": 1}, False),
    ("a = 1", {"a": True}, False),
    ("a = TRUE", {"a": 1}, False),
    ("a = b", {"a": "5", "b": 5}, True),
    ("a = b", {"a": "x", "b": 5}, False),
    ("a < b", {"a": True, "b": False}, False),
    # strings
    ("s < 'b'", {"s": "a"}, True),
    ("s = 'it''s'", {"s": "it's"}, True),
    ("s IN ('x', 'y')", {"s": "y"}, True),
    ("s NOT IN ('x', 'y')", {"s": "z"}, True),
    ("s NOT IN ('x', 'y')", {}, False),
    ("s LIKE 'a%c'", {"s": "abbbc"}, True),
    ("s LIKE 'a_c'", {"s": "abbc"}, False),
    ("s LIKE 'A%'", {"s": "abc"}, False),  # case-sensitive
    ("s LIKE '100!%' ESCAPE '!'", {"s": "100%"}, True),
    ("s LIKE '100!%' ESCAPE '!'", {"s": "1000"}, False),
    ("s NOT LIKE 'a%'", {"s": 5}, True),  # LIKE on a number: FALSE
    ("s LIKE '%'", {"s": "line\nbreak"}, True),
    # booleans, and a boolean property as a condition
    ("flag", {"flag": True}, True),
    ("NOT flag", {"flag": False}, True),
    ("flag", {"flag": "true"}, False),
    ("NOT flag", {"flag": "true"}, False),
    ("flag = FALSE", {"flag": False}, True),
    # quoted and dotted names
    ('"content-type" = \'json\'', {"content-type": "json"}, True),
    ("mqtt.topic = 'a/b'", {"mqtt.topic": "a/b"}, True),
])  # fmt: skip
def test_meaning(text: str, props: dict[str, Any], expected: bool) -> None:
    assert Selector.parse(text).matches(props) is expected


@pytest.mark.parametrize(("text", "position", "words"), [
    ("", 0, "empty"),
    ("a >", 3, "expected a name"),
    ("a > 5 AND", 9, "expected a name"),
    ("a = 'open", 4, "not closed"),
    ('"a = 1', 0, "not closed"),
    ("a # 1", 2, "unexpected character"),
    ("'a' > 1", 4, "compares a string with a number"),
    ("TRUE + 1", 0, "applies to numbers"),
    ("TRUE > FALSE", 5, "booleans compare with = and <> only"),
    ("5 AND a", 0, "not a condition"),
    ("a AND 'x'", 6, "not a condition"),
    ("a IN ()", 6, "expected a string or number"),
    ("a IN ('x', 1)", 11, "mixes strings and numbers"),
    ("'x' IN (1, 2)", 0, "IN compares a string with numbers"),
    ("a LIKE b", 7, "expected a string pattern"),
    ("a LIKE 'x' ESCAPE 'ab'", 18, "one-character"),
    ("5 LIKE 'x'", 0, "LIKE applies to strings"),
    ("a BETWEEN 1 OR 2", 12, "expected AND"),
    ("a IS 5", 5, "expected NULL"),
    ("(a > 1) = TRUE", 8, "condition cannot be compared"),
    ("a > 1)", 5, "expected AND, OR or the end"),
    ("(a > 1", 6, "expected )"),
    ("AND = 1", 0, "expected a name"),
])  # fmt: skip
def test_refused_with_the_position(text: str, position: int, words: str) -> None:
    with pytest.raises(FilterError) as e:
        Selector.parse(text)
    assert e.value.position == position, str(e.value)
    assert words in str(e.value)
    assert f"at position {position}" in str(e.value)


def test_limits() -> None:
    with pytest.raises(FilterError, match="at most"):
        Selector.parse("a = 1 OR " * 500 + "a = 1")
    with pytest.raises(FilterError, match="nested more than"):
        Selector.parse("(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1))
    with pytest.raises(FilterError, match="nested more than"):
        Selector.parse("NOT " * (MAX_DEPTH + 1) + "a")
    with pytest.raises(FilterError, match="nested more than"):
        Selector.parse("a = " + "+".join(["1"] * (MAX_DEPTH * 2 + 1)))
    assert m("(" * MAX_DEPTH + "a" + ")" * MAX_DEPTH, a=True)
    long_or = " OR ".join(f"a = {i}" for i in range(300))
    assert len(long_or) < MAX_LENGTH and m(long_or, a=299)


def test_names_and_identity() -> None:
    s = Selector.parse("a > 1 AND (b LIKE 'x%' OR c BETWEEN d AND e + f) AND NOT g IS NULL")
    assert s.names == frozenset("abcdefg")
    assert s == Selector.parse(s.text) and hash(s) == hash(Selector.parse(s.text))


@pytest.mark.parametrize(("text", "tag", "expected"), [
    ("*", None, True),
    ("*", "A", True),
    (" * ", "A", True),
    ("TagA", "TagA", True),
    ("TagA", "taga", False),
    ("TagA || TagB || TagC", "TagC", True),
    ("TagA||TagB", "TagB", True),
    ("TagA || TagB", None, False),
    ("TagA || TagB", "TagD", False),
])  # fmt: skip
def test_tags(text: str, tag: str | None, expected: bool) -> None:
    assert TagFilter.parse(text).matches(tag) is expected


@pytest.mark.parametrize(("text", "position"), [
    ("", 0), ("  ", 2), ("TagA ||", 7), ("|| TagA", 0), ("TagA || * ", 8), ("Tag A", 3), ("TagA | TagB", 4),
])  # fmt: skip
def test_tags_refused(text: str, position: int) -> None:
    with pytest.raises(FilterError) as e:
        TagFilter.parse(text)
    assert e.value.position == position, str(e.value)


def test_tag_expression_length() -> None:
    with pytest.raises(FilterError):
        TagFilter.parse("||".join(["T"] * (MAX_LENGTH // 2 + 1)))


@pytest.mark.parametrize(("text", "props", "expected"), [
    ("a = (5)", {"a": 5}, True),  # parentheses around a value
    ("(2 + 3) * 4 = a", {"a": 20}, True),
    ("a * (b + 1) = 6", {"a": 2, "b": 2}, True),
    ("(-a) = 5", {"a": -5}, True),
    ("0 IS NULL", {}, False),  # a literal: known when parsed
    ("-1 IS NOT NULL", {}, True),
    ("NULL IS NULL", {}, True),
    ("a = 1.5 + " + "1" + "0" * 400, {"a": 1.0}, False),  # too large for a float: NULL, not an error
    ("a > 1", {"a": "9" * 5000}, True),  # longer than int() takes: as a float
    ("a = 12", {"a": "١٢"}, False),  # only ASCII digits read as a number
    ("s LIKE '%a%a%a%a%a%a%a%a%a%a%b'", {"s": "a" * 40}, False),  # no backtracking blow-up
    ("s LIKE '%a%a%b'", {"s": "xaxaxb"}, True),
    ("s LIKE 'a%'", {"s": "a"}, True),
    ("s LIKE '%a'", {"s": "ba"}, True),
    ("s LIKE 'a%a'", {"s": "a"}, False),  # the two ends may not overlap
    ("s LIKE '_%_'", {"s": "ab"}, True),
    ("s LIKE '%'", {"s": ""}, True),
])  # fmt: skip
def test_found_by_the_oracle_and_the_fuzzer(text: str, props: dict[str, Any], expected: bool) -> None:
    assert Selector.parse(text).matches(props) is expected


@pytest.mark.parametrize("text", ["(a + 1)", "a AND (5)", "NOT (a * 2)"])
def test_a_parenthesized_value_is_still_no_condition(text: str) -> None:
    with pytest.raises(FilterError, match="is not a condition"):
        Selector.parse(text)
