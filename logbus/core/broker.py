"""The facade every gateway calls. In this first cut it owns the data directory (lock),
the state store, the log and the metrics, and offers topic admin and publish.

    broker = Broker(Path("data"), reactor=reactor)
    broker.start()                      # lock, open state, recover the log
    info = broker.create_topic("t", {"partitions": 3, "flush": "sync"})
    d = broker.append("t", 0, [Record(b"k", b"v")])   # Deferred[AppendResult], fires when durable
    yield broker.stop()                 # flush everything, clean-shutdown marker, unlock
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .errors import DataDirLocked, TopicExists, UnknownTopic  # noqa: F401  (re-exported)
from .log.topic_config import TopicConfig
from .metrics import Metrics


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    log_start_offset: int
    log_end_offset: int
    segments: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    config: dict[str, Any]
    partitions: list[PartitionInfo] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "partitions": len(self.partitions),
            "config": self.config,
            "partition_detail": [
                {
                    "partition": p.partition,
                    "log_start_offset": p.log_start_offset,
                    "log_end_offset": p.log_end_offset,
                    "segments": p.segments,
                    "size_bytes": p.size_bytes,
                }
                for p in self.partitions
            ],
        }
