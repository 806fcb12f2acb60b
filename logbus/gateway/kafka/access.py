"""What a Kafka user may do, in Kafka's terms (ACL operations on topics, groups and the
cluster), decided by logbus's one access check (``Doors.authorize``):

==========  ==============================================  ==============================
resource    Kafka operation                                 logbus permission
==========  ==============================================  ==============================
topic t     READ                                            read on the exchange t stands for
            WRITE                                           write on it
            CREATE, DELETE, ALTER, ALTER_CONFIGS            configure on it
            DESCRIBE, DESCRIBE_CONFIGS                      any of the three (as Kafka, where
                                                            each implies DESCRIBE)
group g     READ (join, commit, fetch offsets), DESCRIBE    read on queue g of vhost ``/``
            DELETE                                          configure on queue g
txn id x    WRITE, DESCRIBE (a transactional producer)      write on queue x of vhost ``/``
cluster     DESCRIBE, DESCRIBE_CONFIGS, IDEMPOTENT_WRITE    any user (each produce is
                                                            checked on its topic)
            CREATE, ALTER, ALTER_CONFIGS, CLUSTER_ACTION    the ``administrator`` tag
==========  ==============================================  ==============================

The vhost of a topic is in its name (``Doors.authorize_topic``). ``operations`` answers
KIP-430's authorized operations with the truth for the user asking. Answers are kept per
(user, resource, operation) until a permission, user or vhost changes (``Acls.version``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ...core.errors import Refused
from ...core.types import Resource
from .operations import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER_OPERATIONS,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP_OPERATIONS,
    IDEMPOTENT_WRITE,
    READ,
    TOPIC_OPERATIONS,
    WRITE,
)

if TYPE_CHECKING:
    from ...core.ports import Acls, Doors
    from ...core.types import Perm

GROUP_VHOST = "/"  # Kafka groups have no vhost: they are queues of "/" for these checks
_TOPIC_PERM: dict[int, Perm] = {READ: "read", WRITE: "write", CREATE: "configure", DELETE: "configure",
                                 ALTER: "configure", ALTER_CONFIGS: "configure"}
_ANY: tuple[Perm, ...] = ("read", "write", "configure")


class KafkaAccess:
    def __init__(self, doors: Doors, acls: Acls) -> None:
        self.doors = doors
        self.acls = acls
        self._seen: dict[tuple[str, str, int, str], bool] = {}
        self._version = -1

    def _cached(self, user: str, kind: str, op: int, name: str) -> bool | None:
        version = self.acls.version
        if version != self._version or len(self._seen) > 100_000:
            self._seen.clear()
            self._version = version
        return self._seen.get((user, kind, op, name))

    def _perm(self, check: Callable[[], None]) -> bool:
        try:
            check()
        except Refused:
            return False
        return True

    def topic(self, user: str | None, op: int, topic: str) -> bool:
        """May ``user`` do Kafka operation ``op`` on ``topic``?"""
        if user is None:
            return False
        hit = self._cached(user, "topic", op, topic)
        if hit is None:
            perms = (_TOPIC_PERM[op],) if op in _TOPIC_PERM else _ANY
            hit = any(self._topic_perm(user, p, topic) for p in perms)
            self._seen[(user, "topic", op, topic)] = hit
        return hit

    def _topic_perm(self, user: str, perm: Perm, topic: str) -> bool:
        return self._perm(lambda: self.doors.authorize_topic(user, perm, topic))

    def group(self, user: str | None, op: int, group: str) -> bool:
        """May ``user`` do ``op`` (READ, DESCRIBE, DELETE) on consumer group ``group``?"""
        if user is None:
            return False
        hit = self._cached(user, "group", op, group)
        if hit is None:
            perm: Perm = "configure" if op == DELETE else "read"
            hit = self._perm(lambda: self.doors.authorize(user, perm, Resource(GROUP_VHOST, "queue", group)))
            self._seen[(user, "group", op, group)] = hit
        return hit

    def transactional_id(self, user: str | None, txn_id: str) -> bool:
        """May ``user`` produce transactionally as ``txn_id`` (WRITE, and so DESCRIBE)?"""
        if user is None:
            return False
        hit = self._cached(user, "txn", WRITE, txn_id)
        if hit is None:
            hit = self._perm(lambda: self.doors.authorize(user, "write", Resource(GROUP_VHOST, "queue", txn_id)))
            self._seen[(user, "txn", WRITE, txn_id)] = hit
        return hit

    def cluster(self, user: str | None, op: int) -> bool:
        if user is None:
            return False
        if op in (DESCRIBE, DESCRIBE_CONFIGS, IDEMPOTENT_WRITE):
            return True
        hit = self._cached(user, "cluster", op, "")
        if hit is None:
            hit = self._perm(lambda: self.doors.authorize(user, "administer", Resource("")))
            self._seen[(user, "cluster", op, "")] = hit
        return hit

    def topic_operations(self, user: str | None, topic: str) -> frozenset[int]:
        return frozenset(op for op in TOPIC_OPERATIONS if self.topic(user, op, topic))

    def group_operations(self, user: str | None, group: str) -> frozenset[int]:
        return frozenset(op for op in GROUP_OPERATIONS if self.group(user, op, group))

    def cluster_operations(self, user: str | None) -> frozenset[int]:
        return frozenset(op for op in CLUSTER_OPERATIONS if self.cluster(user, op))

