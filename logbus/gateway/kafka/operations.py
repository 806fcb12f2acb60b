"""Authorized operations (KIP-430): what DescribeGroups v3+ and Metadata v8+ answer
when the client sets ``include_*_authorized_operations``.

logbus has no Kafka ACLs, so every client may do everything, which is what Apache Kafka
answers when no authorizer is configured: the set of every operation the resource type
supports (``AuthHelper.authorizedOperations`` over ``AclEntry.supportedOperations``), as a
32-bit field with bit ``n`` set for ACL operation code ``n``. When the client does not ask,
the field is INT32_MIN ("omitted"); kafka-python's codec takes and gives a set of bit
numbers, and None for INT32_MIN.
"""

from __future__ import annotations

# Kafka's AclOperation codes
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12

TOPIC_OPERATIONS = frozenset({READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS})
GROUP_OPERATIONS = frozenset({READ, DESCRIBE, DELETE})
CLUSTER_OPERATIONS = frozenset({CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE,
                                ALTER, DESCRIBE})


def authorized(operations: frozenset[int], asked: bool) -> set[int] | None:
    """The field's value for kafka-python's codec: the operations, or None (INT32_MIN)
    when the client did not ask for them."""
    return set(operations) if asked else None


def bitfield(operations: frozenset[int]) -> int:
    """The operations as the signed 32-bit integer on the wire."""
    value = 0
    for op in operations:
        value |= 1 << op
    return value
