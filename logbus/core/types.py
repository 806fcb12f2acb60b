"""The value types the Broker's methods take and return, for the gateways.

A gateway imports from ``logbus.core`` the facade (``broker.py``), the error vocabulary
(``errors.py``) and this module; for the stream model and the log, never
``core.log.*`` or ``core.streams.*`` themselves (tests/unit/test_layering.py checks it for
the Kafka gateway and ``gateway/output.py``). Each name keeps its one owner: it is only
re-exported here, except ``PartitionOffsets``, which exists for the facade.
"""

from __future__ import annotations

from typing import NamedTuple

from .log.partition import AppendResult, FileSpan, ReadResult
from .log.topic_config import TopicConfig, validate_topic_name
from .streams.group_model import (
    Code,
    GroupDescription,
    GroupListing,
    JoinGroup,
    JoinResult,
    MemberDescription,
    OffsetAndMetadata,
    SyncResult,
    TopicPartition,
)

__all__ = [
    "AppendResult",
    "Code",
    "FileSpan",
    "GroupDescription",
    "GroupListing",
    "JoinGroup",
    "JoinResult",
    "MemberDescription",
    "OffsetAndMetadata",
    "PartitionOffsets",
    "ReadResult",
    "SyncResult",
    "TopicConfig",
    "TopicPartition",
    "validate_topic_name",
]


class PartitionOffsets(NamedTuple):
    """Where a partition's readable records are (``Broker.offsets``)."""

    log_start_offset: int  # the first offset still kept
    log_end_offset: int  # the offset the next append gets
    high_watermark: int  # readers see offsets below it (Partition.high_watermark)
