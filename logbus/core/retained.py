"""Retained messages: the last retained message of each MQTT topic name, durable, and found
by topic filter without a scan of every retained topic.

Theory of operation. A retained message is one record in the state store (metadata CF,
``state.retained_key(topic)``, a ``RetainedRecord``: the payload, QoS, envelope with the
MQTT 5 properties, and an expiry). It is kept apart from the log: retention may delete
the segment that held the publish, and the retained message must outlive it, as it
does in Mosquitto. Retaining an empty payload deletes the topic's record (MQTT 3.1.1
section 3.3.1.3, MQTT 5 section 3.3.1.3).

In memory there is only an index: a trie of topic levels whose nodes mark the topics
that hold a retained message (no payloads). ``match(filter)`` walks it once: a literal
level follows one child, ``+`` every child, ``#`` the node's whole subtree (the parent
level included), so a SUBSCRIBE costs the matched part of the trie, not the number of
retained topics. Wildcards at the first level do not match topics that begin with ``$``
(MQTT section 4.7.2). The records themselves are read when matched; an expired one is
deleted then (or at a later look, while the state store refuses writes), and not
returned.

Writes are not synced one by one (``sync=False``): a process crash (kill -9) keeps them,
a power loss may lose the last ones, as for queue entries (``queues/journal.py``). An
operator's deletion (``clear(topic, sync=True)``, the HTTP API and the console) is synced
before it is answered.

The operator's view (``browse``) walks the same index with each node's children in order
and stops at a limit: the first retained topics, level by level in order ("a/b" before
"a/b/c" before "a/c"), each record as JSON with a preview of its payload (``to_json``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .connections import utc_iso
from .errors import StorageError
from .inventory import text_or_base64
from .state import CF_METADATA, RETAINED_PREFIX, StateStore, retained_key, retained_topic
from .state_pb2 import RetainedRecord

PREVIEW_BYTES = 1024  # of a payload, in the operator's view (``to_json``)


@dataclass(slots=True)
class _Level:
    children: dict[str, _Level] = field(default_factory=dict)
    retained: bool = False  # a topic ending here holds a retained message


class RetainedStore:
    def __init__(self, store: StateStore | None, clock: Callable[[], int]) -> None:
        """``store`` None: in memory only (tests). ``clock``: epoch ms."""
        self._store = store
        self._clock = clock
        self._root = _Level()
        self._mem: dict[str, bytes] = {}  # without a store: the records
        self.count = 0

    def load(self) -> None:
        """Index every stored retained topic (at start)."""
        if self._store is None:
            return
        for key, _ in self._store.scan_prefix(CF_METADATA, RETAINED_PREFIX):
            self._index(retained_topic(key))

    # -- writing -------------------------------------------------------------------------

    def retain(self, record: RetainedRecord) -> None:
        """Keep ``record`` as its topic's retained message; an empty payload clears it."""
        if not record.payload:
            self.clear(record.topic)
            return
        value = record.SerializeToString()
        if self._store is None:
            self._mem[record.topic] = value
        else:
            self._store.put(CF_METADATA, retained_key(record.topic), value)
        self._index(record.topic)

    def clear(self, topic: str, *, sync: bool = False) -> None:
        """Forget the topic's retained message (if any). StorageError: not forgotten.
        ``sync``: the deletion is on disk (the WAL synced) when this returns."""
        if not self._indexed(topic):
            return
        if self._store is None:
            self._mem.pop(topic, None)
        else:
            self._store.delete(CF_METADATA, retained_key(topic), sync=sync)
        self._unindex(topic)

    # -- reading -------------------------------------------------------------------------

    def get(self, topic: str) -> RetainedRecord | None:
        """The topic's retained message, unless none or expired (then it is deleted)."""
        raw = self._mem.get(topic) if self._store is None else self._store.get(CF_METADATA, retained_key(topic))
        if raw is None:
            return None
        rec = RetainedRecord.FromString(raw)
        if rec.expires_at_ms and rec.expires_at_ms <= self._clock():
            try:
                self.clear(topic)
            except StorageError:  # not deleted now: the next look deletes it
                pass
            return None
        return rec

    def match(self, topic_filter: str) -> list[RetainedRecord]:
        """The retained messages of every topic ``topic_filter`` (a valid MQTT filter)
        matches, in topic order."""
        out = []
        for topic in sorted(self.topics(topic_filter)):
            rec = self.get(topic)
            if rec is not None:
                out.append(rec)
        return out

    def topics(self, topic_filter: str) -> Iterator[str]:
        """The retained topics ``topic_filter`` matches (index only, expiry unchecked)."""
        levels = topic_filter.split("/")
        stack: list[tuple[_Level, int, tuple[str, ...]]] = [(self._root, 0, ())]
        while stack:
            node, i, path = stack.pop()
            if i == len(levels):
                if node.retained:
                    yield "/".join(path)
                continue
            level = levels[i]
            if level == "#":
                yield from self._subtree(node, path, first=i == 0)
            elif level == "+":
                for name, child in node.children.items():
                    if i == 0 and name.startswith("$"):
                        continue
                    stack.append((child, i + 1, (*path, name)))
            else:
                found = node.children.get(level)
                if found is not None:
                    stack.append((found, i + 1, (*path, level)))

    def browse(self, topic_filter: str | None = None, limit: int = 100) -> list[RetainedRecord]:
        """The operator's view: the first ``limit`` retained messages whose topic
        ``topic_filter`` (a valid MQTT filter) matches, or every topic's (None: ``$``
        topics too), in level order; expired ones are skipped (and deleted, as ``get``).
        Costs the part of the index walked until ``limit`` are found."""
        out: list[RetainedRecord] = []
        if limit <= 0:
            return out
        for topic in self._ordered(topic_filter):
            rec = self.get(topic)
            if rec is not None:
                out.append(rec)
                if len(out) == limit:
                    break
        return out

    def _ordered(self, topic_filter: str | None) -> Iterator[str]:
        """``topics`` in level order, lazily: a depth-first walk, each node's children
        sorted (an explicit stack: a topic may have thousands of levels)."""
        levels = None if topic_filter is None else topic_filter.split("/")
        stack: list[tuple[_Level, int, tuple[str, ...]]] = [(self._root, 0, ())]
        while stack:
            node, i, path = stack.pop()
            whole = levels is None or (i < len(levels) and levels[i] == "#")  # this node and below
            if levels is not None and i == len(levels):
                if node.retained:
                    yield "/".join(path)
                continue
            if whole:
                if node.retained and path:
                    yield "/".join(path)
                after = i
            else:
                assert levels is not None
                level = levels[i]
                if level != "+":
                    found = node.children.get(level)
                    if found is not None:
                        stack.append((found, i + 1, (*path, level)))
                    continue
                after = i + 1
            skip_dollar = levels is not None and not path  # a first-level wildcard: no $ topics
            for name in sorted(node.children, reverse=True):  # popped smallest first
                if not (skip_dollar and name.startswith("$")):
                    stack.append((node.children[name], after, (*path, name)))

    @staticmethod
    def to_json(record: RetainedRecord) -> dict[str, Any]:
        """A retained message as the operator sees it: its topic, QoS, payload (the first
        PREVIEW_BYTES, as text or base64 as RabbitMQ's ``payload_encoding``), size, when it
        was retained and when it expires (UTC, ISO 8601; null: never)."""
        payload = record.payload
        shown = payload[:PREVIEW_BYTES]
        truncated = len(payload) > len(shown)
        if truncated:
            shown = _whole_characters(shown)
        text, encoding = text_or_base64(shown)
        return {"topic": record.topic, "qos": record.qos, "payload": text, "payload_encoding": encoding,
                "payload_bytes": len(payload), "payload_truncated": truncated,
                "stored_at": utc_iso(record.time_ms) if record.time_ms else None,
                "stored_ms": record.time_ms or None,
                "expires_at": utc_iso(record.expires_at_ms) if record.expires_at_ms else None}

    def _subtree(self, node: _Level, path: tuple[str, ...], first: bool) -> Iterator[str]:
        """Every retained topic at ``node`` (``#`` matches the parent level) and below."""
        if node.retained and path:
            yield "/".join(path)
        stack = [(child, (*path, name)) for name, child in node.children.items()
                 if not (first and name.startswith("$"))]
        while stack:
            node, path = stack.pop()
            if node.retained:
                yield "/".join(path)
            stack.extend((child, (*path, name)) for name, child in node.children.items())

    # -- the index -----------------------------------------------------------------------

    def _index(self, topic: str) -> None:
        node = self._root
        for level in topic.split("/"):
            child = node.children.get(level)
            if child is None:
                child = node.children[level] = _Level()
            node = child
        if not node.retained:
            node.retained = True
            self.count += 1

    def _indexed(self, topic: str) -> bool:
        node = self._root
        for level in topic.split("/"):
            child = node.children.get(level)
            if child is None:
                return False
            node = child
        return node.retained

    def _unindex(self, topic: str) -> bool:
        """Unmark ``topic`` and prune the levels left empty; False if it was not retained."""
        path = [self._root]
        for level in topic.split("/"):
            child = path[-1].children.get(level)
            if child is None:
                return False
            path.append(child)
        if not path[-1].retained:
            return False
        path[-1].retained = False
        self.count -= 1
        for parent, level, node in zip(reversed(path[:-1]), reversed(topic.split("/")), reversed(path[1:])):
            if node.retained or node.children:
                break
            del parent.children[level]
        return True


def _whole_characters(data: bytes) -> bytes:
    """``data`` cut from a longer UTF-8 text: without the character the cut split (other
    bytes as they are: not UTF-8 at all, it is shown as base64 anyway)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.reason == "unexpected end of data":
            return data[:e.start]
    return data
