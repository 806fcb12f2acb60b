"""Per-topic log settings, with Kafka-style names for the keys users type.

``TopicConfig.from_mapping({"partitions": "3", "flush": "interval:50"})`` validates and
returns a frozen config; ``to_mapping()`` gives the same keys back (for describe and
for storing in the state store).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from ..errors import InvalidConfig, InvalidTopicName
from .format import topic_dirname

MAX_TOPIC_NAME = 249
MAX_DIRNAME = 255  # the file system's limit for one name
_TOPIC_RE = re.compile(r"^[^\x00-\x1f/\\]+$")

# user key -> dataclass field
_KEYS = {
    "partitions": "partitions",
    "flush": "flush",
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "max.message.bytes": "max_message_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "remote.storage.enable": "remote_storage_enable",
    "local.retention.ms": "local_retention_ms",
    "local.retention.bytes": "local_retention_bytes",
}
_FIELD_TO_KEY = {v: k for k, v in _KEYS.items()}


def parse_flush(value: str) -> tuple[str, int]:
    """'sync' -> ('sync', 0); 'interval:50' -> ('interval', 50); 'none' -> ('none', 0)."""
    v = value.strip().lower()
    if v in ("sync", "none"):
        return v, 0
    if v.startswith("interval:"):
        ms = v.split(":", 1)[1]
        if ms.isdigit() and 0 < int(ms) <= 3_600_000:
            return "interval", int(ms)
    raise InvalidConfig(
        f"flush must be 'sync', 'none' or 'interval:<ms>' (1..3600000), not {value!r}"
    )


@dataclass(frozen=True, slots=True)
class TopicConfig:
    partitions: int = 1
    flush: str = "sync"
    segment_bytes: int = 128 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: keep forever
    retention_bytes: int = -1  # per partition; -1: no size limit
    max_message_bytes: int = 1024 * 1024 + 12  # largest batch accepted (Kafka's default)
    index_interval_bytes: int = 4096
    # tiered storage (docs/tiering.md): sealed segments uploaded to the broker's remote
    # storage, and their local copies kept only this long / this large (-2: as
    # retention.ms / retention.bytes; -1: no limit), as Kafka's settings of the same names
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2

    def __post_init__(self) -> None:
        if not 1 <= self.partitions <= 100_000:
            raise InvalidConfig(f"partitions must be 1..100000, not {self.partitions}")
        parse_flush(self.flush)
        if self.segment_bytes < 1024:
            raise InvalidConfig("segment.bytes must be at least 1024")
        if self.segment_bytes > 2**31 - 1:
            raise InvalidConfig("segment.bytes must fit in 32 bits (index positions)")
        if self.segment_ms < 1:
            raise InvalidConfig("segment.ms must be positive")
        if self.retention_ms < -1 or self.retention_ms == 0:
            raise InvalidConfig("retention.ms must be positive or -1")
        if self.retention_bytes < -1 or self.retention_bytes == 0:
            raise InvalidConfig("retention.bytes must be positive or -1")
        if self.max_message_bytes < 64:
            raise InvalidConfig("max.message.bytes must be at least 64")
        if self.index_interval_bytes < 1:
            raise InvalidConfig("index.interval.bytes must be positive")
        for key, local, whole in (("ms", self.local_retention_ms, self.retention_ms),
                                  ("bytes", self.local_retention_bytes, self.retention_bytes)):
            if local < -2:
                raise InvalidConfig(f"local.retention.{key} must be -2 (as retention.{key}), -1 or at least 0")
            if whole != -1 and local != -2 and (local == -1 or local > whole):
                raise InvalidConfig(f"local.retention.{key} ({local}) must not be more than retention.{key} "
                                    f"({whole})")

    @property
    def flush_mode(self) -> str:
        return parse_flush(self.flush)[0]

    @property
    def flush_interval_ms(self) -> int:
        return parse_flush(self.flush)[1]

    @classmethod
    def from_mapping(
        cls, values: Mapping[str, Any], base: "TopicConfig | None" = None
    ) -> "TopicConfig":
        changes: dict[str, Any] = {}
        for key, raw in values.items():
            field = _KEYS.get(key) or (key if key in _FIELD_TO_KEY else None)
            if field is None:
                known = ", ".join(sorted(_KEYS))
                raise InvalidConfig(f"unknown topic setting {key!r} (known: {known})")
            if field == "remote_storage_enable":
                changes[field] = _as_bool(raw)
            elif field == "flush":
                if not isinstance(raw, str):
                    raise InvalidConfig(f"flush must be a string, not {raw!r}")
                parse_flush(raw)
                changes[field] = raw.strip().lower()
            else:
                try:
                    if isinstance(raw, bool):
                        raise ValueError
                    changes[field] = int(raw)
                except (TypeError, ValueError):
                    raise InvalidConfig(f"{_FIELD_TO_KEY[field]} must be an integer, not {raw!r}")
        return replace(base or cls(), **changes)

    def to_mapping(self) -> dict[str, Any]:
        return {_FIELD_TO_KEY[f.name]: getattr(self, f.name) for f in fields(self)}


def _as_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise InvalidConfig(f"remote.storage.enable must be true or false, not {raw!r}")


def validate_topic_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidTopicName("topic name must be a non-empty string")
    if len(name.encode()) > MAX_TOPIC_NAME:
        raise InvalidTopicName(f"topic name longer than {MAX_TOPIC_NAME} bytes")
    if name in (".", "..") or not _TOPIC_RE.match(name):
        raise InvalidTopicName(
            f"topic name {name!r} may not be '.' or '..' or contain '/', '\\\\' or control characters"
        )
    if len(topic_dirname(name)) > MAX_DIRNAME:
        raise InvalidTopicName(
            f"topic name {name!r} is too long once escaped for the file system "
            f"({len(topic_dirname(name))} > {MAX_DIRNAME} bytes); use fewer non-ASCII characters"
        )
    return name
