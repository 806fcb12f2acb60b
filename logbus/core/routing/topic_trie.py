"""AMQP topic patterns in a trie of dot-separated words: ``*`` is one word, ``#`` zero
or more. A routing key ``""`` is zero words, ``"a..b"`` three.

``match`` walks the trie with an explicit stack and expands each ``(#-node, position)``
state once, so no pattern (``#.#.#...``) makes it exponential. Each pattern holds a
multiset of values (the same value bound twice is removed twice). Used by topic
exchanges (core/routing/matchers.py), and open to MQTT subscriptions.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Generic, TypeVar


def split_words(key: str) -> list[str]:
    return key.split(".") if key else []


def ref_count(counts: dict[Any, int], key: Any) -> None:
    counts[key] = counts.get(key, 0) + 1


def unref_count(counts: dict[Any, int], key: Any) -> None:
    if counts[key] > 1:
        counts[key] -= 1
    else:
        del counts[key]


T = TypeVar("T", bound=Hashable)


class _Node(Generic[T]):
    __slots__ = ("children", "values")

    def __init__(self) -> None:
        self.children: dict[str, _Node[T]] = {}
        self.values: dict[T, int] = {}


class TopicTrie(Generic[T]):
    """AMQP topic patterns, each holding a multiset of values (module docstring)."""

    def __init__(self) -> None:
        self._root: _Node[T] = _Node()

    def add(self, pattern: str, value: T) -> None:
        node = self._root
        for word in split_words(pattern):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _Node()
            node = child
        ref_count(node.values, value)

    def remove(self, pattern: str, value: T) -> bool:
        words = split_words(pattern)
        path = [self._root]
        for word in words:
            child = path[-1].children.get(word)
            if child is None:
                return False
            path.append(child)
        if value not in path[-1].values:
            return False
        unref_count(path[-1].values, value)
        for depth in range(len(words), 0, -1):
            if path[depth].values or path[depth].children:
                break
            del path[depth - 1].children[words[depth - 1]]
        return True

    def match(self, routing_key: str) -> set[T]:
        words = split_words(routing_key)
        n = len(words)
        found: set[T] = set()
        stack: list[tuple[_Node[T], int]] = [(self._root, 0)]
        expanded: set[tuple[_Node[T], int]] = set()
        while stack:
            node, i = stack.pop()
            children = node.children
            if children:
                hash_node = children.get("#")
                if hash_node is not None:
                    for j in range(i, n + 1):
                        if (hash_node, j) not in expanded:
                            expanded.add((hash_node, j))
                            stack.append((hash_node, j))
                if i < n:
                    star = children.get("*")
                    if star is not None:
                        stack.append((star, i + 1))
                    word = words[i]
                    if word != "*" and word != "#":  # those children are walked above
                        child = children.get(word)
                        if child is not None:
                            stack.append((child, i + 1))
            if i == n and node.values:
                found.update(node.values)
        return found


