"""SQL92 selectors over message properties, parsed and checked once, then compiled to a
Python function (``codegen``).

    sel = Selector.parse("region = 'eu' AND temp > 30")
    sel.matches({"region": "eu", "temp": 31})   # True
    sel.names                                   # frozenset({'region', 'temp'})
"""

from __future__ import annotations

from .codegen import Predicate, compile_predicate
from .syntax import And, Arith, Between, Compare, In, IsNull, Like, Name, Negate, Node, Not, Or, parse

class Selector:
    __slots__ = ("text", "names", "matches", "source")

    def __init__(self, text: str, root: Node) -> None:
        self.text = text
        self.names = frozenset(_names(root))
        predicate, self.source = compile_predicate(root)
        self.matches: Predicate = predicate

    @classmethod
    def parse(cls, text: str) -> Selector:
        """Raises ``FilterError`` (what, and the position) for a selector that cannot be used."""
        return cls(text, parse(text))

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Selector) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

def _names(node: Node) -> set[str]:
    found: set[str] = set()
    stack: list[Node] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Name):
            found.add(n.name)
        elif isinstance(n, (Negate, Not, In, Like, IsNull)):
            stack.append(n.operand)
        elif isinstance(n, Between):
            stack += [n.operand, n.low, n.high]
        elif isinstance(n, (And, Or)):
            stack += n.operands
        elif isinstance(n, (Arith, Compare)):
            stack += [n.left, n.right]
    return found

