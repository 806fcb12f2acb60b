"""Kafka error codes (the subset logbus answers with), and the core's errors mapped
onto them. Numbers from Apache Kafka's ``Errors`` enum."""

from __future__ import annotations

from ...core import errors as E

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
TRANSACTIONAL_ID_NOT_SUPPORTED = 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED: transactions are not offered
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
    "invalid_record": INVALID_RECORD,
}


def code_for(error: BaseException) -> int:
    """The Kafka error code for a failure raised by the core."""
    if isinstance(error, E.LogbusError):
        return _BY_CODE.get(error.code, UNKNOWN_SERVER_ERROR)
    return UNKNOWN_SERVER_ERROR
