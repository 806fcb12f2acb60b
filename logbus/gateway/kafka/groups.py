"""Kafka the group coordinator: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups.
(Being built: see issue 3.)"""

from __future__ import annotations

from .handlers import KafkaHandlers


def install(handlers: KafkaHandlers) -> None:
    """Register this module's APIs with ``handlers``."""
