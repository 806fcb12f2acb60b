"""Queue entry records (core/queues/journal.py): the current layouts (0x81, and 0x82 of a
staged entry) round-trip, and a record written before lease deadlines were kept still
reads."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from logbus.core.queues.journal import pack_entry, unpack_entry
from logbus.core.queues.queue import Entry


@given(partition=st.integers(0, 2**31 - 1), offset=st.integers(0, 2**62), size=st.integers(0, 2**32 - 1),
       priority=st.integers(0, 255), expires=st.integers(0, 2**62), deliveries=st.integers(0, 2**32 - 1),
       deadline=st.integers(0, 2**62), visible=st.sampled_from([0, 0, 1, 2**62]) | st.integers(0, 2**62),
       topic=st.text(min_size=1, max_size=20).filter(lambda t: "\x00" not in t))
def test_round_trip(partition: int, offset: int, size: int, priority: int, expires: int, deliveries: int,
                    deadline: int, visible: int, topic: str) -> None:
    """Entries, staged (with a visible time) or not, read back as written."""
    e = Entry(7, topic, partition, offset, size, priority, expires, deliveries, visible)
    assert unpack_entry(7, pack_entry(e, deadline)) == (e, deadline)


def test_a_record_without_the_version_byte_reads_as_before() -> None:
    old = struct.pack(">IqIBqI", 3, 1234, 10, 2, 5000, 1) + "orders".encode()
    assert unpack_entry(9, old) == (Entry(9, "orders", 3, 1234, 10, 2, 5000, 1), 0)
