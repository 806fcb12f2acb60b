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

``SessionService`` is what the MQTT room is given (``ports.Sessions``): these records,
the retained messages (``retained.py``) and its work at start, made with the broker
before it starts and opened with the state store.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterator

from google.protobuf.message import Message as ProtoMessage

from .errors import StorageError
from .retained import RetainedStore
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


class SessionService:
    """``ports.Sessions``: the protocol sessions' records, the retained messages, and what
    takes the stored sessions up at start (run by the broker once its vhosts are loaded,
    before the queue journal's redo routes to their queues)."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock = clock  # epoch ms
        self._records: SessionRecords | None = None
        self._retained = RetainedStore(None, clock)  # in memory until opened
        self._at_start: list[Callable[[], object]] = []

    def open(self, state: StateStore) -> None:
        """At start: the records and the retained messages of ``state``."""
        self._records = SessionRecords(state)
        self._retained = RetainedStore(state, self._clock)
        self._retained.load()

    def take_up(self) -> None:
        """At start, once the vhosts are loaded: every ``on_start`` callable, in order."""
        for take_up in self._at_start:
            take_up()

    @property
    def retained(self) -> RetainedStore:
        return self._retained

    def on_start(self, take_up: Callable[[], object]) -> None:
        self._at_start.append(take_up)

    @property
    def records(self) -> SessionRecords:
        if self._records is None:
            raise RuntimeError("broker is not started")
        return self._records

    def stored_sessions(self, protocol: str) -> Iterator[bytes]:
        """The stored records of ``protocol``'s sessions that outlive their connections."""
        return self.records.stored(protocol)

    def save_session(self, protocol: str, client_id: str, record: ProtoMessage) -> None:
        """Store (or replace) a session's record; written without a WAL sync, as queue
        entries are (a power loss may lose the last ones). StorageError: the state store
        refused it; it is written once the store takes writes again."""
        self.records.save(protocol, client_id, record)

    def forget_session(self, protocol: str, client_id: str) -> None:
        """Delete a session's record; never raises: a deletion the state store refuses
        is made once it takes writes again."""
        self.records.forget(protocol, client_id)

    def write_kept(self) -> None:
        """What the state store refused, written now (``core/faults.py``)."""
        if self._records is not None:
            self._records.write_kept()
