"""The selector's syntax tree, and the parser that builds and checks it.

Grammar, loosest first (JMS message selectors; RocketMQ's SQL92 filters are a subset):

    condition  := and_expr (OR and_expr)*
    and_expr   := not_expr (AND not_expr)*
    not_expr   := NOT not_expr | predicate
    predicate  := sum ( (= | <> | != | < | <= | > | >=) sum
                      | [NOT] BETWEEN sum AND sum
                      | [NOT] IN ( literal, ... )
                      | [NOT] LIKE 'pattern' [ESCAPE 'c']
                      | IS [NOT] NULL )?
    sum        := product ((+ | -) product)*
    product    := unary ((* | /) unary)*
    unary      := (+ | -) unary | literal | name | ( condition )

Parentheses hold a condition or a value (``(a + 1) * 2``). Where a condition is expected
(the whole selector, the operands of AND, OR and NOT) a bare value must be something
that can be true or false: a name, TRUE, FALSE, NULL or a parenthesized condition. Literals of the wrong type for their
operator (``'a' > 1``, ``TRUE + 1``, ``5 AND x``) are refused here, with the position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .errors import FilterError
from .lexer import Token, tokenize

MAX_LENGTH = 4096  # characters of selector text
MAX_DEPTH = 32  # nesting of parentheses, NOT and signs; and of the tree built


@dataclass(frozen=True, slots=True)
class Literal:
    value: object  # int, float, str, bool, or None (NULL)
    position: int


@dataclass(frozen=True, slots=True)
class Name:
    name: str
    position: int


@dataclass(frozen=True, slots=True)
class Negate:
    operand: Node
    position: int


@dataclass(frozen=True, slots=True)
class Arith:
    op: str  # + - * /
    left: Node
    right: Node
    position: int


@dataclass(frozen=True, slots=True)
class Compare:
    op: str  # = <> < <= > >=
    left: Node
    right: Node
    position: int


@dataclass(frozen=True, slots=True)
class Between:
    operand: Node
    low: Node
    high: Node
    negated: bool
    position: int


@dataclass(frozen=True, slots=True)
class In:
    operand: Node
    values: tuple[object, ...]  # literals: all strings or all numbers
    negated: bool
    position: int


@dataclass(frozen=True, slots=True)
class Like:
    operand: Node
    pattern: str
    escape: str | None
    negated: bool
    position: int


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Node
    negated: bool
    position: int


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Node, ...]
    position: int


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Node, ...]
    position: int


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node
    position: int


Node = Union[Literal, Name, Negate, Arith, Compare, Between, In, Like, IsNull, And, Or, Not]
CONDITIONS = (Compare, Between, In, Like, IsNull, And, Or, Not)


def kind(node: Node) -> str:
    """What a node can be, as far as the text says: 'num', 'str', 'bool', 'null',
    'any' (a property: known only per message) or 'cond' (true, false or unknown)."""
    if isinstance(node, Literal):
        v = node.value
        if v is None:
            return "null"
        if isinstance(v, bool):
            return "bool"
        return "str" if isinstance(v, str) else "num"
    if isinstance(node, Name):
        return "any"
    if isinstance(node, (Negate, Arith)):
        return "num"
    return "cond"


def parse(text: str) -> Node:
    if len(text) > MAX_LENGTH:
        raise FilterError(f"a selector is at most {MAX_LENGTH} characters", MAX_LENGTH)
    return _Parser(tokenize(text)).parse()


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0
        self.depth = 0

    # -- tokens ------------------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def at(self, kind: str, value: object = None) -> bool:
        t = self.tokens[self.i]
        return t.kind == kind and (value is None or t.value == value)

    def take(self, kind: str, value: object = None) -> Token | None:
        if self.at(kind, value):
            t = self.tokens[self.i]
            self.i += 1
            return t
        return None

    def expect(self, kind: str, value: object, what: str) -> Token:
        t = self.take(kind, value)
        if t is None:
            raise self.error(f"expected {what}")
        return t

    def error(self, message: str, position: int | None = None) -> FilterError:
        t = self.tok
        if position is None:
            found = "the end" if t.kind == "END" else repr(t.value if t.kind != "STRING" else f"'{t.value}'")
            message = f"{message}, found {found}"
        return FilterError(message, t.position if position is None else position)

    def deeper(self, position: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FilterError(f"nested more than {MAX_DEPTH} deep", position)

    # -- grammar -----------------------------------------------------------------------

    def parse(self) -> Node:
        if self.at("END"):
            raise self.error("an empty selector", 0)
        node = self.condition()
        if not self.at("END"):
            raise self.error("expected AND, OR or the end")
        _condition(node)
        _check_depth(node)
        return node

    def condition(self) -> Node:
        first = self.and_expr()
        if not self.at("KEYWORD", "OR"):
            return first
        operands = [first]
        while self.take("KEYWORD", "OR"):
            operands.append(self.and_expr())
        for node in operands:
            _condition(node)
        return Or(tuple(operands), _pos(first))

    def and_expr(self) -> Node:
        first = self.not_expr()
        if not self.at("KEYWORD", "AND"):
            return first
        operands = [first]
        while self.take("KEYWORD", "AND"):
            operands.append(self.not_expr())
        for node in operands:
            _condition(node)
        return And(tuple(operands), _pos(first))

    def not_expr(self) -> Node:
        t = self.take("KEYWORD", "NOT")
        if t is None:
            return self.predicate()
        self.deeper(t.position)
        operand = self.not_expr()
        self.depth -= 1
        _condition(operand)
        return Not(operand, t.position)

    def predicate(self) -> Node:
        left = self.sum()
        t = self.tok
        if t.kind == "OP" and t.value in ("=", "<>", "<", "<=", ">", ">="):
            self.i += 1
            right = self.sum()
            return _compare(str(t.value), left, right, t.position)
        negated = False
        if self.at("KEYWORD", "NOT"):
            nxt = self.tokens[self.i + 1]
            if nxt.kind == "KEYWORD" and nxt.value in ("BETWEEN", "IN", "LIKE"):
                self.i += 1
                negated = True
                t = self.tok
        if self.take("KEYWORD", "BETWEEN"):
            low = self.sum()
            self.expect("KEYWORD", "AND", "AND (of BETWEEN)")
            high = self.sum()
            _compare(">=", left, low, t.position)
            _compare("<=", left, high, t.position)
            return Between(left, low, high, negated, t.position)
        if self.take("KEYWORD", "IN"):
            return In(left, self.in_list(left), negated, t.position)
        if self.take("KEYWORD", "LIKE"):
            return self.like(left, negated, t.position)
        if self.take("KEYWORD", "IS"):
            negated = self.take("KEYWORD", "NOT") is not None
            self.expect("KEYWORD", "NULL", "NULL (after IS)")
            return IsNull(left, negated, t.position)
        return left  # a value: a condition only where one is expected (checked there)

    def in_list(self, operand: Node) -> tuple[object, ...]:
        self.expect("OP", "(", "( after IN")
        values: list[object] = []
        while True:
            t = self.tok
            if t.kind in ("STRING", "INT", "FLOAT"):
                value = t.value
            elif t.kind == "OP" and t.value == "-" and self.tokens[self.i + 1].kind in ("INT", "FLOAT"):
                self.i += 1
                value = -self.tok.value  # type: ignore[operator]
            else:
                raise self.error("expected a string or number in the IN list")
            if values and isinstance(value, str) != isinstance(values[0], str):
                raise FilterError("an IN list mixes strings and numbers", t.position)
            values.append(value)
            self.i += 1
            if not self.take("OP", ","):
                break
        self.expect("OP", ")", ", or ) in the IN list")
        k = kind(operand)
        want = "str" if isinstance(values[0], str) else "num"
        if k not in ("any", "null", want):
            raise FilterError(f"IN compares a {_NAMES[k]} with {_NAMES[want]}s", _pos(operand))
        return tuple(values)

    def like(self, operand: Node, negated: bool, position: int) -> Like:
        pattern = self.take("STRING")
        if pattern is None:
            raise self.error("expected a string pattern after LIKE")
        escape: str | None = None
        if self.take("KEYWORD", "ESCAPE"):
            e = self.take("STRING")
            if e is None or len(str(e.value)) != 1:
                raise self.error("expected a one-character string after ESCAPE",
                                 None if e is None else e.position)
            escape = str(e.value)
        k = kind(operand)
        if k not in ("any", "null", "str"):
            raise FilterError(f"LIKE applies to strings, not to a {_NAMES[k]}", _pos(operand))
        return Like(operand, str(pattern.value), escape, negated, position)

    def sum(self) -> Node:
        node = self.product()
        while self.tok.kind == "OP" and self.tok.value in ("+", "-"):
            t = self.tok
            self.i += 1
            node = _arith(str(t.value), node, self.product(), t.position)
        return node

    def product(self) -> Node:
        node = self.unary()
        while self.tok.kind == "OP" and self.tok.value in ("*", "/"):
            t = self.tok
            self.i += 1
            node = _arith(str(t.value), node, self.unary(), t.position)
        return node

    def unary(self) -> Node:
        t = self.tok
        if t.kind == "OP" and t.value in ("+", "-"):
            self.i += 1
            self.deeper(t.position)
            operand = self.unary()
            self.depth -= 1
            _number(operand, t.value == "-" and "-" or "+")
            if isinstance(operand, Literal) and operand.value is not None:
                return Literal(-operand.value if t.value == "-" else operand.value, t.position)  # type: ignore[operator]
            return Negate(operand, t.position) if t.value == "-" else operand
        self.i += 1
        if t.kind in ("INT", "FLOAT", "STRING"):
            return Literal(t.value, t.position)
        if t.kind == "NAME":
            return Name(str(t.value), t.position)
        if t.kind == "KEYWORD" and t.value in ("TRUE", "FALSE", "NULL"):
            return Literal({"TRUE": True, "FALSE": False, "NULL": None}[str(t.value)], t.position)
        if t.kind == "OP" and t.value == "(":
            self.deeper(t.position)
            node = self.condition()
            self.depth -= 1
            self.expect("OP", ")", ")")
            return node
        self.i -= 1
        raise self.error("expected a name, a literal or (")


_NAMES = {"num": "number", "str": "string", "bool": "boolean", "cond": "condition", "null": "NULL",
          "any": "property"}


def _pos(node: Node) -> int:
    return node.position


def _condition(node: Node) -> None:
    k = kind(node)
    if k not in ("cond", "bool", "any", "null"):
        raise FilterError(f"a {_NAMES[k]} is not a condition", _pos(node))


def _number(node: Node, op: str) -> None:
    k = kind(node)
    if k not in ("num", "any", "null"):
        raise FilterError(f"{op} applies to numbers, not to a {_NAMES[k]}", _pos(node))


def _arith(op: str, left: Node, right: Node, position: int) -> Arith:
    _number(left, op)
    _number(right, op)
    return Arith(op, left, right, position)


def _compare(op: str, left: Node, right: Node, position: int) -> Compare:
    a, b = kind(left), kind(right)
    if "cond" in (a, b):
        raise FilterError(f"a condition cannot be compared with {op}", position)
    if a in ("num", "str", "bool") and b in ("num", "str", "bool") and a != b:
        raise FilterError(f"{op} compares a {_NAMES[a]} with a {_NAMES[b]}", position)
    if "bool" in (a, b) and op not in ("=", "<>"):
        raise FilterError(f"booleans compare with = and <> only, not {op}", position)
    return Compare(op, left, right, position)


def _check_depth(root: Node) -> None:
    """Arithmetic chains (``1+1+1...``) nest without parentheses; the compiled predicate
    nests as deep, so the tree is held to MAX_DEPTH too."""
    stack: list[tuple[Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH * 2:
            raise FilterError(f"nested more than {MAX_DEPTH * 2} deep", node.position)
        if isinstance(node, (And, Or)):
            stack.extend((n, depth + 1) for n in node.operands)
        elif isinstance(node, (Arith, Compare)):
            stack += [(node.left, depth + 1), (node.right, depth + 1)]
        elif isinstance(node, (Negate, Not, In, Like, IsNull)):
            stack.append((node.operand, depth + 1))
        elif isinstance(node, Between):
            stack += [(node.operand, depth + 1), (node.low, depth + 1), (node.high, depth + 1)]
