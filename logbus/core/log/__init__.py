"""The partitioned log: segments of Kafka RecordBatch v2 bytes, sparse indexes,
recovery, retention and group-commit durability. See docs/format.md.

The names below are loaded on first use, so that ``logbus.core.log.format`` (the byte
layout, which readers outside the broker import) loads neither Twisted nor aiokafka.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .batch import Record, StoredRecord
    from .format import BatchInfo, topic_dirname
    from .manager import LogManager, Topic
    from .partition import AppendResult, FileSpan, Partition, ReadResult
    from .topic_config import TopicConfig

_SUBMODULE = {
    "AppendResult": "partition",
    "BatchInfo": "format",
    "FileSpan": "partition",
    "LogManager": "manager",
    "Partition": "partition",
    "ReadResult": "partition",
    "Record": "batch",
    "StoredRecord": "batch",
    "Topic": "manager",
    "TopicConfig": "topic_config",
    "topic_dirname": "format",
}

__all__ = [
    "AppendResult",
    "BatchInfo",
    "FileSpan",
    "LogManager",
    "Partition",
    "ReadResult",
    "Record",
    "StoredRecord",
    "Topic",
    "TopicConfig",
    "topic_dirname",
]


def __getattr__(name: str) -> Any:
    submodule = _SUBMODULE.get(name)
    if submodule is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{submodule}", __name__), name)
    globals()[name] = value
    return value
