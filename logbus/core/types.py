"""The public types the ports (``ports.py``) list: what their methods take and return,
for the gateways.

A gateway imports from ``logbus.core`` the ports (``ports.py``), the error vocabulary
(``errors.py``) and this module, nothing else (tests/unit/test_layering.py). Each name
keeps its one owner: it is only re-exported here, except ``PartitionOffsets``, which
exists for the Streams port. The names are loaded on first use, so that a gateway's
sans-I/O parts (the MQTT session machine) import what they name here without the
broker's Twisted side.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .access.auth import SHA256, AccessChange, Action, Kind, Perm, Resource, User
    from .access.scram import SCRAM_ITERATIONS, ScramCredential, scram_signature, scram_verify
    from .connections import ConnectionRecord
    from .definitions import LegacyTranslation
    from .deadletters import DeadLetterCopy
    from .forms import Forms
    from .inventory import GroupInfo, OffsetReset, PartitionLag, PeekedMessage, QueueInfo
    from .search import FoundMessage
    from .log.partition import AppendResult, FileSpan, ReadResult
    from .message import ENVELOPE_HEADER, Envelope, Message
    from .metrics import Metrics, Tally
    from .pressure import RESOURCES
    from .queues.pop import MAX_INVISIBLE_MS, Popped, check_delay, dlq_topic
    from .queues.entry import Delivery
    from .queues.queue import DROP_NEW, OVERFLOW_MODES, Outcome, QueueLimits
    from .queues.service import Consumer, DeadLetterTarget, QueueSettings, QueueState
    from .retained import RetainedStore
    from .routing.log_topics import DEFAULT_EXCHANGE_TOPIC, topic_exchange, vhost_topic
    from .halves import HALF_TARGET_HEADER, HALVES_TOPIC
    from .routing.definitions import (
        HEADERS,
        QUEUE,
        TOPIC,
        Arguments,
        DestKind,
        ExchangeDef,
        HeaderMatch,
        freeze_arguments,
    )
    from .state_pb2 import MqttSessionRecord, RetainedRecord
    from .tick import Tick, tick_of
    from .pipeline import Published, one_row
    from .log.topic_config import TopicConfig, validate_topic_name
    from .topics import TopicInfo
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

_OWNER = {
    "AccessChange": "access.auth",
    "Action": "access.auth",
    "AppendResult": "log.partition",
    "Arguments": "routing.definitions",
    "Code": "streams.group_model",
    "ConnectionRecord": "connections",
    "Consumer": "queues.service",
    "DROP_NEW": "queues.queue",
    "DeadLetterCopy": "deadletters",
    "DeadLetterTarget": "queues.service",
    "Delivery": "queues.entry",
    "DestKind": "routing.definitions",
    "ExchangeDef": "routing.definitions",
    "ENVELOPE_HEADER": "message",
    "Envelope": "message",
    "FileSpan": "log.partition",
    "Forms": "forms",
    "FoundMessage": "search",
    "GroupDescription": "streams.group_model",
    "GroupInfo": "inventory",
    "OffsetReset": "inventory",
    "PartitionLag": "inventory",
    "PeekedMessage": "inventory",
    "QueueInfo": "inventory",
    "GroupListing": "streams.group_model",
    "HEADERS": "routing.definitions",
    "HeaderMatch": "routing.definitions",
    "JoinGroup": "streams.group_model",
    "JoinResult": "streams.group_model",
    "Kind": "access.auth",
    "LegacyTranslation": "definitions",
    "MAX_INVISIBLE_MS": "queues.pop",
    "MemberDescription": "streams.group_model",
    "Message": "message",
    "Metrics": "metrics",
    "Tally": "metrics",
    "MqttSessionRecord": "state_pb2",
    "OVERFLOW_MODES": "queues.queue",
    "OffsetAndMetadata": "streams.group_model",
    "Outcome": "queues.queue",
    "Perm": "access.auth",
    "Popped": "queues.pop",
    "Published": "pipeline",
    "one_row": "pipeline",
    "QUEUE": "routing.definitions",
    "QueueLimits": "queues.queue",
    "QueueSettings": "queues.service",
    "QueueState": "queues.service",
    "RESOURCES": "pressure",
    "ReadResult": "log.partition",
    "Resource": "access.auth",
    "RetainedRecord": "state_pb2",
    "RetainedStore": "retained",
    "SHA256": "access.auth",
    "SyncResult": "streams.group_model",
    "TOPIC": "routing.definitions",
    "TopicConfig": "log.topic_config",
    "TopicInfo": "topics",
    "TopicPartition": "streams.group_model",
    "User": "access.auth",
    "check_delay": "queues.pop",
    "SCRAM_ITERATIONS": "access.scram",
    "ScramCredential": "access.scram",
    "scram_signature": "access.scram",
    "scram_verify": "access.scram",
    "dlq_topic": "queues.pop",
    "topic_exchange": "routing.log_topics",
    "vhost_topic": "routing.log_topics",
    "DEFAULT_EXCHANGE_TOPIC": "routing.log_topics",
    "HALVES_TOPIC": "halves",
    "HALF_TARGET_HEADER": "halves",
    "freeze_arguments": "routing.definitions",
    "tick_of": "tick",
    "Tick": "tick",
    "validate_topic_name": "log.topic_config",
}

__all__ = [
    "DROP_NEW",
    "ENVELOPE_HEADER",
    "HEADERS",
    "MAX_INVISIBLE_MS",
    "OVERFLOW_MODES",
    "QUEUE",
    "RESOURCES",
    "SCRAM_ITERATIONS",
    "SHA256",
    "TOPIC",
    "AccessChange",
    "Action",
    "AppendResult",
    "Arguments",
    "Code",
    "ConnectionRecord",
    "Consumer",
    "DeadLetterCopy",
    "DeadLetterTarget",
    "Delivery",
    "DestKind",
    "Envelope",
    "ExchangeDef",
    "FileSpan",
    "Forms",
    "FoundMessage",
    "GroupDescription",
    "GroupInfo",
    "GroupListing",
    "HeaderMatch",
    "JoinGroup",
    "JoinResult",
    "Kind",
    "LegacyTranslation",
    "MemberDescription",
    "Message",
    "Metrics",
    "MqttSessionRecord",
    "OffsetAndMetadata",
    "OffsetReset",
    "Outcome",
    "PartitionLag",
    "PartitionOffsets",
    "Perm",
    "PeekedMessage",
    "Popped",
    "Published",
    "one_row",
    "QueueInfo",
    "QueueLimits",
    "QueueSettings",
    "QueueState",
    "ReadResult",
    "Resource",
    "RetainedRecord",
    "RetainedStore",
    "SyncResult",
    "Tally",
    "TopicConfig",
    "TopicInfo",
    "TopicPartition",
    "User",
    "check_delay",
    "ScramCredential",
    "scram_signature",
    "scram_verify",
    "dlq_topic",
    "freeze_arguments",
    "tick_of",
    "Tick",
    "topic_exchange",
    "vhost_topic",
    "DEFAULT_EXCHANGE_TOPIC",
    "HALVES_TOPIC",
    "HALF_TARGET_HEADER",
    "validate_topic_name",
]


def __getattr__(name: str) -> Any:
    owner = _OWNER.get(name)
    if owner is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{owner}", __package__), name)
    globals()[name] = value
    return value


class PartitionOffsets(NamedTuple):
    """Where a partition's readable records are (``Streams.offsets``)."""

    log_start_offset: int  # the first offset still kept
    log_end_offset: int  # the offset the next append gets
    high_watermark: int  # readers see offsets below it (Partition.high_watermark)
