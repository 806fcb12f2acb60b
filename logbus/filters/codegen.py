"""A checked selector tree compiled to one Python function, ``match(properties) -> bool``.

SQL's three-valued logic without three-valued values: each condition is compiled twice,
as the Python expression that is true exactly when the condition is TRUE (``_true``) and
the one that is true exactly when it is FALSE (``_false``); UNKNOWN is neither.

    t(A AND B) = t(A) and t(B)      f(A AND B) = f(A) or f(B)
    t(A OR B)  = t(A) or t(B)       f(A OR B)  = f(A) and f(B)
    t(NOT A)   = f(A)               f(NOT A)   = t(A)

Each comparison appears once in the result and short-circuits like the rest. A
comparison computes its value (True, False, or None for UNKNOWN) inline when one side is
a literal, the common case, and through ``compare`` otherwise. Values: a missing
property or None is NULL; numbers are int and float (bool is not a number); a string
that reads as a number (``'42'``, ``'-1.5e3'``) is that number when compared with or
computed against a number (MQTT user properties and Kafka headers are text); any other
comparison of unlike types is FALSE (JMS); arithmetic on anything but numbers is NULL,
and so is a division by zero; int / int truncates toward zero (Java, SQLite).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from .syntax import And, Arith, Between, Compare, In, IsNull, Like, Literal, Name, Negate, Node, Not, Or

Predicate = Callable[[Mapping[str, Any]], bool]

_INT = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")


def number(v: Any) -> int | float | None:
    """``v`` as a number, if it is one or a string that reads as one."""
    t = type(v)
    if t is int or t is float:
        return v  # type: ignore[no-any-return]
    if t is str:
        if _INT.match(v):
            try:
                return int(v)
            except ValueError:  # longer than Python converts (4,300 digits): as a float
                return float(v)
        if _FLOAT.match(v):
            return float(v)
    return None


def _kind(v: Any) -> str | None:
    t = type(v)
    if t is int or t is float:
        return "num"
    if t is str:
        return "str"
    if t is bool:
        return "bool"
    return None if v is None else "other"


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b, "<>": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def compare(op: str, a: Any, b: Any) -> bool | None:
    """``a op b`` in three-valued logic, whatever the types."""
    if a is None or b is None:
        return None
    ka, kb = _kind(a), _kind(b)
    if ka != kb:
        if ka == "num" and kb == "str":
            b = number(b)
        elif ka == "str" and kb == "num":
            a = number(a)
        else:
            return False
        if a is None or b is None:
            return False
    elif ka == "other" or (ka == "bool" and op not in ("=", "<>")):
        return False
    return _OPS[op](a, b)


def compare_text(op: str, v: Any, literal: int | float) -> bool:
    """A non-number, non-NULL property against a numeric literal."""
    n = number(v) if type(v) is str else None
    return False if n is None else _OPS[op](n, literal)


def arith(op: str, a: Any, b: Any) -> int | float | None:
    a, b = number(a), number(b)
    if a is None or b is None:
        return None
    try:
        return _arith(op, a, b)
    except OverflowError:  # an int too large for a float it meets: no value
        return None


def _arith(op: str, a: int | float, b: int | float) -> int | float | None:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        return None
    if type(a) is int and type(b) is int:
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q
    return a / b


def negate(a: Any) -> int | float | None:
    n = number(a)
    return None if n is None else -n


def in_values(v: Any, values: frozenset[Any], numeric: bool) -> bool | None:
    if v is None:
        return None
    t = type(v)
    if numeric:
        if t is str:
            v = number(v)
        elif t is not int and t is not float:
            return False
        return v is not None and v in values
    return t is str and v in values


class LikePattern:
    """A LIKE pattern as a matcher that never backtracks: ``%`` splits it into segments of
    fixed length (characters and ``_``); the first is anchored at the start, the last at
    the end, and each one between is found at its leftmost place after the one before
    (which is never worse for what follows). Linear in the text for each segment."""

    __slots__ = ("_whole", "_first", "_last", "_last_len", "_middle")

    def __init__(self, pattern: str, escape: str | None) -> None:
        segments: list[list[str]] = [[]]
        i = 0
        while i < len(pattern):
            c = pattern[i]
            if escape is not None and c == escape and i + 1 < len(pattern):
                segments[-1].append(re.escape(pattern[i + 1]))
                i += 2
                continue
            if c == "%":
                segments.append([])
            else:
                segments[-1].append("." if c == "_" else re.escape(c))
            i += 1
        compiled = [re.compile("".join(seg), re.DOTALL) for seg in segments]
        self._whole = compiled[0] if len(compiled) == 1 else None
        self._first = compiled[0]
        self._last = compiled[-1]
        self._last_len = len(segments[-1])
        self._middle = compiled[1:-1]

    def __call__(self, text: str) -> bool:
        if self._whole is not None:
            return self._whole.fullmatch(text) is not None
        m = self._first.match(text)
        if m is None:
            return False
        pos, end = m.end(), len(text) - self._last_len
        if end < pos or self._last.match(text, end) is None:
            return False
        for segment in self._middle:
            m = segment.search(text, pos, end)
            if m is None:
                return False
            pos = m.end()
        return True


class _Compiler:
    def __init__(self) -> None:
        self.names: dict[str, Any] = {}  # constants the generated code refers to
        self.vars = 0

    def const(self, value: Any) -> str:
        name = f"_c{len(self.names)}"
        self.names[name] = value
        return name

    def var(self) -> str:
        self.vars += 1
        return f"v{self.vars}"

    # -- values ------------------------------------------------------------------------

    def value(self, node: Node) -> str:
        """A Python expression for a value: the value, or None for NULL."""
        if isinstance(node, Literal):
            v = node.value
            return self.const(v) if isinstance(v, (str, float)) else repr(v)
        if isinstance(node, Name):
            return f"g({self.const(node.name)})"
        if isinstance(node, Negate):
            return f"_negate({self.value(node.operand)})"
        if isinstance(node, Arith):
            return f"_arith({node.op!r}, {self.value(node.left)}, {self.value(node.right)})"
        raise AssertionError(f"not a value: {node!r}")  # the parser refuses conditions here

    def compared(self, op: str, left: Node, right: Node) -> str:
        """A Python expression for ``left op right``: True, False or None."""
        if isinstance(left, Literal) and not isinstance(right, Literal):
            left, right, op = right, left, _FLIPPED[op]
        if isinstance(right, Literal) and not isinstance(left, Literal) and right.value is not None:
            lit = right.value
            v = self.var()
            x = self.value(left)
            py = "==" if op == "=" else "!=" if op == "<>" else op
            if isinstance(lit, bool):
                cmp = "is" if op == "=" else "is not"
                return f"({v} {cmp} {lit!r} if type({v} := {x}) is bool else None if {v} is None else False)"
            if isinstance(lit, str):
                c = self.const(lit)
                return f"({v} {py} {c} if type({v} := {x}) is str else None if {v} is None else False)"
            t, n = self.var(), self.const(lit)
            return (f"({v} {py} {n} if ({t} := type({v} := {x})) is int or {t} is float "
                    f"else None if {v} is None else _compare_text({op!r}, {v}, {n}))")
        return f"_compare({op!r}, {self.value(left)}, {self.value(right)})"

    # -- conditions --------------------------------------------------------------------

    def true(self, node: Node) -> str:
        """A Python expression that is true exactly when ``node`` is TRUE."""
        return self._cond(node, True)

    def false(self, node: Node) -> str:
        return self._cond(node, False)

    def _cond(self, node: Node, want: bool) -> str:
        if isinstance(node, And):
            parts = [self._cond(n, want) for n in node.operands]
            return "(" + (" and " if want else " or ").join(parts) + ")"
        if isinstance(node, Or):
            parts = [self._cond(n, want) for n in node.operands]
            return "(" + (" or " if want else " and ").join(parts) + ")"
        if isinstance(node, Not):
            return self._cond(node.operand, not want)
        if isinstance(node, Literal):
            return repr(node.value is want)  # TRUE, FALSE; NULL is neither
        if isinstance(node, Name):
            return f"(g({self.const(node.name)}) is {want!r})"  # a boolean property; else UNKNOWN
        if isinstance(node, Compare):
            return f"({self.compared(node.op, node.left, node.right)} is {want!r})"
        if isinstance(node, Between):
            lo = self.compared(">=", node.operand, node.low)
            hi = self.compared("<=", node.operand, node.high)
            if want != node.negated:
                return f"({lo} is True and {hi} is True)"
            return f"({lo} is False or {hi} is False)"
        if isinstance(node, In):
            numeric = not isinstance(node.values[0], str)
            values = self.const(frozenset(node.values))
            return f"(_in({self.value(node.operand)}, {values}, {numeric}) is {want != node.negated!r})"
        if isinstance(node, Like):
            like = self.const(LikePattern(node.pattern, node.escape))
            v = self.var()
            got = f"({like}({v}) if type({v} := {self.value(node.operand)}) is str else None if {v} is None else False)"
            return f"({got} is {want != node.negated!r})"
        if isinstance(node, IsNull):
            positive = want != node.negated
            if isinstance(node.operand, Literal):  # known now (and Python refuses ``5 is None``)
                return repr((node.operand.value is None) == positive)
            return f"({self.value(node.operand)} {'is' if positive else 'is not'} None)"
        raise AssertionError(f"not a condition: {node!r}")  # the parser refuses values here


_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def compile_predicate(root: Node) -> tuple[Predicate, str]:
    """The function, and its source (for debugging and tests)."""
    c = _Compiler()
    body = c.true(root)
    source = f"def match(p):\n    g = p.get\n    return {body}\n"
    namespace: dict[str, Any] = {
        "_compare": compare, "_compare_text": compare_text, "_arith": arith, "_negate": negate,
        "_in": in_values, **c.names,
    }
    exec(compile(source, "<selector>", "exec"), namespace)  # noqa: S102 - our own generated code
    return namespace["match"], source
