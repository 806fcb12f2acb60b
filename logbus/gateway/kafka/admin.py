"""Kafka admin requests: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs.
(Being built: see issue 3.)"""

from __future__ import annotations

from .handlers import KafkaHandlers


def install(handlers: KafkaHandlers) -> None:
    """Register this module's APIs with ``handlers``."""
