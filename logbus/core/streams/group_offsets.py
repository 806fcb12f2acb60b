"""Committed offsets in the state store: the ``offsets`` column family, one
``CommittedOffset`` record per (group, topic, partition), keys from
``state.group_offset_key``. The group coordinator (core/streams/groups.py) keeps them in memory
and calls these to read them at start and to write each change as ONE WriteBatch.

Committed offsets are not a ``__consumer_offsets`` topic as in Apache Kafka: they are
RocksDB records, written (synced by default) before an OffsetCommit is answered.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping

from ..state import CF_OFFSETS
from .group_model import OffsetAndMetadata, TopicPartition
from ..state import OFFSET_PREFIX, StateStore, group_offset_key, parse_group_offset_key
from ..state_pb2 import CommittedOffset as CommittedOffsetRecord

log = logging.getLogger(__name__)


def load_offsets(store: StateStore) -> Iterator[tuple[str, TopicPartition, OffsetAndMetadata]]:
    """Every stored committed offset: (group id, (topic, partition), offset)."""
    for key, value in store.scan_prefix(CF_OFFSETS, OFFSET_PREFIX):
        try:
            group_id, topic, partition = parse_group_offset_key(key)
        except ValueError:
            log.warning("ignoring malformed key %r in the offsets column family", key)
            continue
        rec = CommittedOffsetRecord.FromString(value)
        yield group_id, (topic, partition), OffsetAndMetadata(
            rec.offset, rec.metadata if rec.HasField("metadata") else None,
            rec.leader_epoch, rec.commit_timestamp_ms,
        )


def write_offsets(store: StateStore, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                  *, sync: bool) -> None:
    """Store one group's offsets in one WriteBatch (raises when the store fails)."""
    with store.batch(sync=sync) as batch:
        for (topic, partition), om in offsets.items():
            rec = CommittedOffsetRecord(
                offset=om.offset, leader_epoch=om.leader_epoch, commit_timestamp_ms=om.commit_timestamp_ms,
            )
            if om.metadata is not None:
                rec.metadata = om.metadata
            batch.put(CF_OFFSETS, group_offset_key(group_id, topic, partition), rec)


def delete_offsets(store: StateStore, offsets: Iterable[tuple[str, TopicPartition]], *, sync: bool) -> int:
    """Delete the offsets of (group id, (topic, partition)) in one WriteBatch; how many."""
    keys = [group_offset_key(group_id, topic, partition) for group_id, (topic, partition) in offsets]
    if keys:
        with store.batch(sync=sync) as b:
            for key in keys:
                b.delete(CF_OFFSETS, key)
    return len(keys)
