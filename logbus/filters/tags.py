"""Tag expressions (RocketMQ's): ``*`` takes every message; ``TagA || TagB || TagC``
takes the messages whose one tag is one of those. Blanks around tags are ignored."""

from __future__ import annotations

from .errors import FilterError

MAX_LENGTH = 4096


class TagFilter:
    __slots__ = ("text", "tags")

    def __init__(self, text: str, tags: frozenset[str] | None) -> None:
        self.text = text
        self.tags = tags  # None: every message

    @classmethod
    def parse(cls, text: str) -> TagFilter:
        if len(text) > MAX_LENGTH:
            raise FilterError(f"a tag expression is at most {MAX_LENGTH} characters", MAX_LENGTH)
        if text.strip() == "*":
            return cls(text, None)
        tags: list[str] = []
        pos = 0
        for part in text.split("||"):
            tag = part.strip()
            at = pos + (len(part) - len(part.lstrip()))
            if not tag:
                raise FilterError("an empty tag" if text.strip() else "an empty tag expression", at)
            if tag == "*":
                raise FilterError("* stands alone: it takes every tag", at)
            bad = next((i for i, ch in enumerate(tag) if ch.isspace() or ch == "|"), None)
            if bad is not None:
                raise FilterError(f"a tag cannot hold {tag[bad]!r} (tags are separated by ||)", at + bad)
            tags.append(tag)
            pos += len(part) + 2
        return cls(text, frozenset(tags))

    def matches(self, tag: str | None) -> bool:
        tags = self.tags
        return tags is None or (tag is not None and tag in tags)

    def __repr__(self) -> str:
        return f"TagFilter({self.text!r})"
