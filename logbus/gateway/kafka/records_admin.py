"""DeleteRecords (API 21): move partitions' log start offsets (low watermarks) forward.

``Topics.delete_records`` records the new log start offsets in the topic's record
(RocksDB, synced) before readers see them, so they survive a restart. A fetch or a
ListOffsets below the new start is then OFFSET_OUT_OF_RANGE / answered with the new
start, and housekeeping deletes every segment wholly below it (unless a queue still points
into it). As in Kafka: offset -1 means the high watermark; an offset past the high
watermark is OFFSET_OUT_OF_RANGE; an offset at or below the current start changes nothing
and is answered with the current start. The request's ``timeout_ms`` is not needed: the
answer is given once the change is durable.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse

from ...core.errors import LogbusError
from . import errors as K
from .errors import AdminError
from .operations import DELETE
from .caller import Caller
from .codec import Request
from .handlers import KafkaHandlers

NO_WATERMARK = -1


def install(handlers: KafkaHandlers) -> None:
    """Register this module's API with ``handlers``."""

    def delete_records(req: Request, caller: Caller) -> Any:
        T = DeleteRecordsResponse.DeleteRecordsTopicResult
        P = T.DeleteRecordsPartitionResult
        topics = []
        for t in req.body.topics:
            wanted = {p.partition_index: p.offset for p in t.partitions}
            try:
                if not handlers.access.topic(caller.user, DELETE, t.name):
                    raise AdminError(K.TOPIC_AUTHORIZATION_FAILED, f"not authorized to delete records of {t.name!r}")
                results: dict[int, Any] = handlers.topics.delete_records(t.name, wanted)
            except (LogbusError, AdminError, OSError) as e:
                results = dict.fromkeys(wanted, e)
            parts = []
            for index, result in results.items():
                if isinstance(result, BaseException):
                    code, _ = K.admin_result(result)
                    parts.append(P(partition_index=index, low_watermark=NO_WATERMARK, error_code=code))
                else:
                    parts.append(P(partition_index=index, low_watermark=result, error_code=K.NONE))
            topics.append(T(name=t.name, partitions=parts))
        return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)

    handlers.register(DeleteRecordsRequest, DeleteRecordsResponse, 0, 2, delete_records)
