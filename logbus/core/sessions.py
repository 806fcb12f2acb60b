"""The records of protocol sessions that outlive their connections (MQTT's), in the
state store's ``sessions`` column family.

Theory of operation. A record is written when its session changes, without a sync, as
queue entries are. A write the state store refuses (a full disk) is kept here, the newest
per session, and written again, all in one batch, once the store is reopened
(``core/faults.py`` calls ``write_kept``), as the queue journal keeps its changes: the
session lives on in memory meanwhile, and what the store holds catches up. A later
write of the same session that succeeds replaces the kept one. ``save`` still raises
StorageError, for the connection that must not say what the record does not hold yet
(its answer is the protocol's: a refused CONNECT, a DISCONNECT); ``forget`` does not:
the session is over whatever the store says, and its record goes once it can.
"""

from __future__ import annotations

import logging
from typing import Iterator

from google.protobuf.message import Message as ProtoMessage

from .errors import StorageError
from .state import CF_SESSIONS, StateStore, session_key, session_prefix

log = logging.getLogger(__name__)


class SessionRecords:
    def __init__(self, state: StateStore) -> None:
        self._state = state
        self.kept: dict[bytes, bytes | None] = {}  # key -> the record to write (None: delete it)

    def stored(self, protocol: str) -> Iterator[bytes]:
        """The stored records of ``protocol``'s sessions."""
        for _, raw in self._state.scan_prefix(CF_SESSIONS, session_prefix(protocol)):
            yield raw

    def save(self, protocol: str, client_id: str, record: ProtoMessage) -> None:
        """Store (or replace) a session's record. StorageError: refused, kept for later."""
        key = session_key(protocol, client_id)
        value = record.SerializeToString(deterministic=True)
        try:
            self._state.put(CF_SESSIONS, key, value)
        except StorageError:
            self.kept[key] = value
            raise
        self.kept.pop(key, None)

    def forget(self, protocol: str, client_id: str) -> None:
        """Delete a session's record (now, or once the state store takes writes again)."""
        key = session_key(protocol, client_id)
        try:
            self._state.delete(CF_SESSIONS, key)
        except StorageError as e:
            if key not in self.kept:
                log.warning("the record of %s session %r stays until the state store takes writes again: %s",
                            protocol, client_id, e)
            self.kept[key] = None
            return
        self.kept.pop(key, None)

    def write_kept(self) -> None:
        """Write what the store refused before, as one batch (StorageError: still kept)."""
        if not self.kept:
            return
        kept = self.kept
        with self._state.batch() as b:
            for key, value in kept.items():
                if value is None:
                    b.delete(CF_SESSIONS, key)
                else:
                    b.put(CF_SESSIONS, key, value)
        log.info("%d session records the state store refused before are written", len(kept))
        self.kept = {}
