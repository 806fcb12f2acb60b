"""Kafka error codes (the subset logbus answers with), and the core's errors mapped
onto them. Numbers from Apache Kafka's ``Errors`` enum."""

from __future__ import annotations

import logging

from ...core import errors as E
from ...core.types import Code

log = logging.getLogger(__name__)

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
REQUEST_TIMED_OUT = 7  # a produce held past its timeout_ms by a resource alarm: nothing appended
MESSAGE_TOO_LARGE = 10
COORDINATOR_NOT_AVAILABLE = 15
INVALID_TOPIC_EXCEPTION = 17
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_CONFIG = 40
INVALID_REQUEST = 42
POLICY_VIOLATION = 44  # a topic queues read: its deletion is refused (logbus's policy)
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
KAFKA_STORAGE_ERROR = 56
INVALID_RECORD = 87
UNKNOWN_SERVER_ERROR = -1

_BY_CODE = {
    E.UnknownTopic.code: UNKNOWN_TOPIC_OR_PARTITION,
    E.UnknownPartition.code: UNKNOWN_TOPIC_OR_PARTITION,
    E.InvalidTopicName.code: INVALID_TOPIC_EXCEPTION,
    E.OffsetOutOfRange.code: OFFSET_OUT_OF_RANGE,
    E.CorruptBatch.code: CORRUPT_MESSAGE,
    E.RecordTooLarge.code: MESSAGE_TOO_LARGE,
    E.StorageError.code: KAFKA_STORAGE_ERROR,
    E.InvalidRecord.code: INVALID_RECORD,
    E.OutOfOrderSequence.code: OUT_OF_ORDER_SEQUENCE_NUMBER,
    E.ProducerFenced.code: INVALID_PRODUCER_EPOCH,
    E.InvalidTxnState.code: INVALID_TXN_STATE,
    E.AccessRefused.code: TOPIC_AUTHORIZATION_FAILED,
    E.TopicInUse.code: POLICY_VIOLATION,
}


# Kafka's retriable error numbers among those above (its RetriableException subclasses):
# a client retries the request
RETRIABLE = frozenset({UNKNOWN_TOPIC_OR_PARTITION, CORRUPT_MESSAGE, REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR})


def code_for(error: BaseException) -> int:
    """The Kafka error code for a failure raised by the core. One the core marks
    ``retriable`` and that has no code of its own is KAFKA_STORAGE_ERROR, which clients
    retry (the broker's passing failures are its disk's); any other, UNKNOWN_SERVER_ERROR."""
    if isinstance(error, E.LogbusError):
        code = _BY_CODE.get(error.code)
        if code is not None:
            return code
        return KAFKA_STORAGE_ERROR if error.retriable else UNKNOWN_SERVER_ERROR
    return UNKNOWN_SERVER_ERROR


class AdminError(Exception):
    """One topic's or resource's failure in an admin request, with its Kafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def admin_result(e: BaseException) -> tuple[int, str]:
    """(Kafka error code, message) for one topic's or resource's failure. A disk
    failure (OSError) is KAFKA_STORAGE_ERROR."""
    if isinstance(e, OSError):
        log.error("kafka admin request failed on storage: %s", e)
        return KAFKA_STORAGE_ERROR, f"storage error: {e}"
    if isinstance(e, AdminError):
        return e.code, e.message
    if isinstance(e, E.TopicExists):
        return TOPIC_ALREADY_EXISTS, str(e)
    if isinstance(e, E.InvalidConfig):
        return INVALID_CONFIG, str(e)
    return code_for(e), str(e)


# the group coordinator's results (core/streams/group_model.Code) as Kafka's error numbers
GROUP_ERROR_CODES: dict[Code, int] = {
    Code.NONE: 0,
    Code.UNKNOWN_TOPIC_OR_PARTITION: 3,
    Code.OFFSET_METADATA_TOO_LARGE: 12,
    Code.COORDINATOR_LOAD_IN_PROGRESS: 14,
    Code.COORDINATOR_NOT_AVAILABLE: COORDINATOR_NOT_AVAILABLE,
    Code.NOT_COORDINATOR: 16,
    Code.ILLEGAL_GENERATION: 22,
    Code.INCONSISTENT_GROUP_PROTOCOL: 23,
    Code.INVALID_GROUP_ID: 24,
    Code.UNKNOWN_MEMBER_ID: 25,
    Code.INVALID_SESSION_TIMEOUT: 26,
    Code.REBALANCE_IN_PROGRESS: 27,
    Code.NON_EMPTY_GROUP: 68,
    Code.GROUP_ID_NOT_FOUND: 69,
    Code.MEMBER_ID_REQUIRED: 79,
    Code.FENCED_INSTANCE_ID: 82,
    Code.INVALID_PRODUCER_EPOCH: INVALID_PRODUCER_EPOCH,
    Code.INVALID_TXN_STATE: INVALID_TXN_STATE,
    Code.INVALID_PRODUCER_ID_MAPPING: 49,
    Code.INVALID_TRANSACTION_TIMEOUT: 50,
    Code.CONCURRENT_TRANSACTIONS: 51,
    Code.UNSTABLE_OFFSET_COMMIT: 88,
    Code.PRODUCER_FENCED: 90,
}
assert set(GROUP_ERROR_CODES) == set(Code)


def group_error(code: Code) -> int:
    return GROUP_ERROR_CODES[code]
