"""kafka-python group members that do not trip over the client's own rejoin race.

kafka-python (3.0.x, the newest on PyPI) can strand a subscribed consumer whatever the
broker: its first JoinGroup goes out before the Metadata for its topics has come back
(the bootstrap Metadata asks for no topics), so the leader assigns from empty metadata
("No partition metadata for topic ..."), and when the metadata arrives the consumer
rejoins to assign again. If that rejoin's JoinGroup is still in flight when a
``poll(timeout_ms=...)`` gives up, the IO thread handles the answer, runs the assignor
(``_perform_assignment`` sets ``_assignment_snapshot`` to the new metadata) and gets the
SyncGroup answer; but ``rejoin_needed`` was never set (the rejoin came from the
snapshots), so the next poll's ``need_rejoin()`` is False and nothing collects the
finished join: the member stays REBALANCING with heartbeats off and no assignment, and
its session expires. (The Java client's ``rejoinNeededOrPending()`` also counts a pending
join; kafka-python's loop does not.) A short poll on a loaded machine is enough: it made
``test_kafka_group_lag_and_reset`` fail in two of four fresh ``make test`` runs on
2026-12-07, and polls of 5 ms strand a third of new members on a quiet one.

Loading the subscribed topics' partitions before the first poll (after ``subscribe()``,
so the coordinator's metadata snapshot has them too) makes the first assignment the
right one, and nothing triggers that rejoin.
"""

from __future__ import annotations

from kafka import KafkaConsumer


def ready_to_join(consumer: KafkaConsumer) -> KafkaConsumer:
    """Load the partitions of every topic ``consumer`` subscribes to, before it first
    polls (the module's docstring); the consumer, for chaining."""
    for topic in sorted(consumer.subscription() or ()):
        assert consumer.partitions_for_topic(topic), f"no partitions known for {topic!r}"
    return consumer
