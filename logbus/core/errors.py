"""Errors the core raises. Each carries a stable ``code`` that gateways map to their
protocol's own error (Kafka error code, AMQP reply code, HTTP status)."""

from __future__ import annotations


class LogbusError(Exception):
    code = "error"
    retriable = False


class LegacyDefinitions(LogbusError):
    """Stored definitions in a form before the neutral one that cannot be read: not
    upgraded yet (no translation given), or refused by the translation."""

    code = "legacy_definitions"


class InvalidTopicName(LogbusError):
    code = "invalid_topic_name"


class InvalidConfig(LogbusError):
    code = "invalid_config"


class TopicExists(LogbusError):
    code = "topic_exists"


class UnknownTopic(LogbusError):
    code = "unknown_topic"


class UnknownPartition(LogbusError):
    code = "unknown_partition"


class OffsetOutOfRange(LogbusError):
    code = "offset_out_of_range"


class CorruptBatch(LogbusError):
    """A record batch failed validation (bad magic, length or CRC)."""

    code = "corrupt_batch"


class RecordTooLarge(LogbusError):
    code = "record_too_large"


class DataDirLocked(LogbusError):
    """Another broker already holds the data directory."""

    code = "data_dir_locked"


class RecordGone(LogbusError):
    """The record a queue entry or timer points at is not in the log (its topic was
    deleted, retention or recovery removed it, or its write failed)."""

    code = "record_gone"


class StorageError(LogbusError):
    """The disk refused a write or a flush; the affected appends are not durable."""

    code = "storage_error"
    retriable = True


class RemoteUnavailable(StorageError):
    """A remote segment's bytes (tiered storage) cannot be fetched now: the object store
    is unreachable or refuses. Not a lost record: readers wait and try again."""


class InvalidRecord(LogbusError):
    """A produced record the broker refuses as it stands (one carrying the envelope
    header reserved for logbus)."""

    code = "invalid_record"


class OutOfOrderSequence(LogbusError):
    """An idempotent producer's batch whose first sequence does not follow its last one
    on that partition (a gap: an earlier batch was lost)."""

    code = "out_of_order_sequence"


class ProducerFenced(LogbusError):
    """An idempotent producer's batch under an older epoch than the producer's current
    one (a zombie producer)."""

    code = "producer_fenced"


class InvalidTxnState(LogbusError):
    """A transactional batch for a partition its producer's transaction has not added,
    or with no transaction open."""

    code = "invalid_txn_state"


class InvalidRequest(LogbusError):
    """A request's arguments are out of range or malformed (a bad receipt handle, a
    negative invisible time, a delay past 40 days)."""

    code = "invalid_request"


class UnknownGroup(LogbusError):
    code = "unknown_group"


class StaleReceipt(LogbusError):
    """A receipt (handle) that names no current lease: never issued, settled, lapsed, or
    the message was leased again since. It settles nothing."""

    code = "stale_receipt"


class Refused(LogbusError):
    """The broker's model refused a request: an unknown name, settings that do not match
    what exists, a resource another connection holds, a permission. ``str(e)`` is the
    explanation; each gateway maps ``code`` to its own error (AMQP reply codes in
    gateway/amqp/errors.py, HTTP statuses in gateway/http/responses.py)."""

    code = "refused"


class NotFound(Refused):
    code = "not_found"


class AccessRefused(Refused):
    code = "access_refused"


class LoginRefused(AccessRefused):
    """A bad user name or password."""

    code = "login_refused"


class LoopbackOnly(AccessRefused):
    """A user who may connect only from a loopback address, from another one."""

    code = "loopback_only"


class PreconditionFailed(Refused):
    code = "precondition_failed"


class ResourceLocked(Refused):
    code = "resource_locked"


class TopicInUse(Refused):
    """A topic that queues, sessions or pop groups read cannot be deleted unless forced."""

    code = "topic_in_use"


class Unsupported(Refused):
    """A kind of thing the broker does not have (an unknown exchange type)."""

    code = "unsupported"


class GroupActive(LogbusError):
    """An operation that needs a consumer group without members (an offset reset) asked
    of one with members."""

    code = "group_active"
