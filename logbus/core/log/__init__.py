"""The partitioned log: segments of Kafka RecordBatch v2 bytes, sparse indexes,
recovery, retention and group-commit durability. See docs/format.md."""

from .batch import BatchInfo, Record, StoredRecord
from .manager import LogManager, Topic, topic_dirname
from .partition import AppendResult, FileSpan, Partition, ReadResult
from .topic_config import TopicConfig

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
