"""Replay of a pop group's dead letters: the records of ``%DLQ%<group>`` published again
to the topic each one died in.

Theory of operation. A dead letter's envelope names where it was (``dead_letter.topic``
and ``.partition``, written by pop.py). A replay reads the DLQ topic from its cursor and
publishes each record not yet replayed to that topic, as a new message (a fresh envelope
without ``dead_letter``, delivery count 0, no deliver-at time, the append's timestamp),
to the original partition when the topic still has it. Every queue reading the topic
gets it, the group among them, as any published message; a Kafka consumer of the topic
reads it as a new record. The DLQ record itself stays where it is.

The cursor is a committed offset: consumer group ``%REPLAY%<group>`` on each partition
of ``%DLQ%<group>``, in the store every Kafka committed offset is in
(core/streams/group_offsets.py, through the group coordinator), so it survives restarts
and a Kafka admin client sees it (and its lag) as any group's. Every DLQ record below
the committed offset is done: replayed, or skipped because it names no topic that
exists. A replay restricted to one original topic (``topic``) leaves the records of
other topics behind it, so the offset can only move up to the first of those; how far
that topic's replay went is kept in the commit's metadata as JSON ``{"<topic>":
offset}``: a record of the topic below it is done too. Entries at or below the committed
offset are dropped. A Kafka client that commits offsets for ``%REPLAY%<group>`` moves
the cursor.

The messages are published first and the cursor committed once they are durable: a
crash in between replays them again (at least once, never lost). A second replay of the
same group while one waits for that is refused (``ReplayInProgress``). One replay moves
at most ``MAX_REPLAY`` messages and says whether more are left (``more``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

from twisted.internet.defer import Deferred, gatherResults, succeed

from ..errors import CorruptBatch, InvalidRequest, LogbusError, UnknownGroup
from ..log import batch as B
from ..log.manager import LogManager
from ..message import Envelope, Message
from ..streams.group_model import UNKNOWN_MEMBER, Code, OffsetAndMetadata
from ..streams.groups import GroupCoordinator
from .pop import check_group, dlq_topic

log = logging.getLogger(__name__)

REPLAY_GROUP_PREFIX = "%REPLAY%"
MAX_REPLAY = 10_000  # messages per replay
READ_BYTES = 1 << 20  # log bytes per read of the DLQ topic


class ReplayInProgress(LogbusError):
    code = "replay_in_progress"


def replay_group(group: str) -> str:
    """The consumer group whose committed offsets are ``group``'s replay cursor."""
    return REPLAY_GROUP_PREFIX + group


def check_limit(limit: Any) -> int:
    """Messages one replay may move: ``limit`` (None: any number), at most MAX_REPLAY."""
    if limit is None:
        return MAX_REPLAY
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InvalidRequest(f"a replay's max must be a positive integer, not {limit!r}")
    return min(limit, MAX_REPLAY)


# -- the cursor ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where one DLQ partition's replay stands: every record below ``offset`` is done,
    and so is every record of topic ``t`` below ``topics[t]``."""

    offset: int = 0
    topics: Mapping[str, int] = field(default_factory=dict)

    def done(self, offset: int, topic: str) -> bool:
        return offset < self.offset or offset < self.topics.get(topic, 0)

    def metadata(self) -> str | None:
        return json.dumps(dict(sorted(self.topics.items())), separators=(",", ":")) if self.topics else None

    @classmethod
    def from_commit(cls, committed: OffsetAndMetadata | None) -> Cursor:
        """The cursor a commit holds; metadata that is not ours (a Kafka client's) is ignored."""
        if committed is None:
            return cls()
        topics: dict[str, int] = {}
        try:
            raw = json.loads(committed.metadata or "{}")
        except ValueError:
            raw = {}
        if isinstance(raw, dict):
            topics = {t: o for t, o in raw.items()
                      if isinstance(o, int) and not isinstance(o, bool) and o > committed.offset}
        return cls(max(0, committed.offset), topics)


# -- planning (pure) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Replay:
    """One dead letter to publish again."""

    dlq_offset: int
    topic: str
    partition: int | None  # None: chosen by key, as a publish without one
    message: Message


@dataclass(frozen=True, slots=True)
class Plan:
    replays: list[Replay]
    skipped: list[tuple[int, str]]  # (DLQ offset, why)
    cursor: Cursor  # after the replays
    more: bool  # stopped at the limit with records left


def replayed_message(dead: Message) -> Message:
    """The message a dead letter is published again as: its key, value and headers, the
    envelope without ``dead_letter``, delivery count and deliver-at time."""
    env = Envelope()
    env.CopyFrom(dead.envelope)
    env.ClearField("dead_letter")
    env.delivery_count = 0
    env.deliver_at_ms = 0
    return Message(dead.key, dead.value, None, list(dead.headers), env)


def plan(records: Iterable[tuple[int, Message | None]], cursor: Cursor, end: int, *, topic: str | None,
         limit: int, partitions: Callable[[str], int | None]) -> Plan:
    """What a replay of one DLQ partition does with ``records`` (its (offset, message)
    pairs from ``cursor.offset`` up to ``end``, in order; None: a record that does not
    decode): which to publish (at most ``limit``; only those of ``topic`` if given), which
    to skip, and the cursor afterwards. ``partitions(t)``: how many partitions topic ``t``
    has, None if it does not exist."""
    replays: list[Replay] = []
    skipped: list[tuple[int, str]] = []
    first_left: int | None = None  # the first record this replay leaves undone
    stop = end
    for offset, dead in records:
        if offset < cursor.offset:
            continue
        if offset >= end:
            break
        original = dead.envelope.dead_letter.topic if dead is not None else ""
        if original and cursor.done(offset, original):
            continue
        if topic is not None and original != topic:
            if first_left is None:
                first_left = offset
            continue
        if len(replays) == limit:
            stop = offset
            break
        n = partitions(original) if original else None
        if dead is None or n is None:
            why = ("not a readable record" if dead is None else "no original topic" if not original
                   else f"topic {original!r} does not exist")
            skipped.append((offset, why))
            continue
        p = dead.envelope.dead_letter.partition
        replays.append(Replay(offset, original, p if p < n else None, replayed_message(dead)))
    more = stop < end
    if topic is None:
        new_offset = stop
        topics = dict(cursor.topics)
    else:
        new_offset = stop if first_left is None else first_left
        topics = {**cursor.topics, topic: max(stop, cursor.topics.get(topic, 0))}
    new_offset = max(new_offset, cursor.offset)
    return Plan(replays, skipped, Cursor(new_offset, {t: o for t, o in topics.items() if o > new_offset}), more)


# -- the replay service ------------------------------------------------------------------


class DeadLetterReplay:
    def __init__(self, log: Callable[[], LogManager], groups: GroupCoordinator,
                 publish: Callable[[str, list[Message], int | None], Deferred[list[int]]],
                 is_pop_group: Callable[[str], bool]) -> None:
        """``log()``: the broker's log (a new one after a restart).
        ``publish(topic, messages, partition)``: the broker's publish (append, feed the
        queues reading the topic; fires once durable). ``is_pop_group(group)``: whether a
        pop group of that name reads any topic."""
        self._log = log
        self._groups = groups
        self._publish = publish
        self._is_pop_group = is_pop_group
        self._running: set[str] = set()

    def run(self, group: str, topic: str | None = None, limit: Any = None,
            may_publish: Callable[[str], object] | None = None) -> Deferred[dict[str, Any]]:
        """Replay ``group``'s dead letters (only those that died in ``topic`` if given, at
        most ``limit``). Fires, once the replayed messages are durable and the cursor is
        committed, with ``{"pop_group", "replayed", "topics": {topic: n}, "skipped", "more"}``.
        ``may_publish(topic)`` is called for each topic a replay would publish to before
        anything is published, and may raise (AccessRefused): then nothing is."""
        check_group(group)
        n = check_limit(limit)
        lm = self._log()
        if topic is not None:
            lm.topic(topic)  # UnknownTopic
        dlq = lm.topics.get(dlq_topic(group))
        if dlq is None:
            if not self._is_pop_group(group):
                raise UnknownGroup(f"no pop group {group!r} and no topic {dlq_topic(group)!r}")
            return succeed(_result(group, [], 0, False))
        if group in self._running:
            raise ReplayInProgress(f"a replay of group {group!r}'s dead letters is in progress")

        cursor_group = replay_group(group)
        committed = self._groups.fetch_offsets(cursor_group, [(dlq.name, p.index) for p in dlq.partitions])
        replays: list[Replay] = []
        skipped = 0
        more = False
        commits: dict[tuple[str, int], OffsetAndMetadata] = {}
        for p in dlq.partitions:
            left = n - len(replays)
            cursor = Cursor.from_commit(committed.get((dlq.name, p.index)))
            if left == 0:
                more = more or max(cursor.offset, p.log_start_offset) < p.high_watermark
                continue
            start = max(cursor.offset, p.log_start_offset)
            end = p.high_watermark
            pl = plan(_read(p, start, end), Cursor(start, cursor.topics), end, topic=topic, limit=left,
                      partitions=self._partitions)
            for offset, why in pl.skipped:
                log.warning("dead letter %s/%d offset %d not replayed: %s", dlq.name, p.index, offset, why)
            replays += pl.replays
            skipped += len(pl.skipped)
            more = more or pl.more
            if pl.cursor != cursor:
                metadata = pl.cursor.metadata()
                if metadata is not None and len(metadata.encode()) > self._groups.max_metadata_bytes:
                    raise InvalidRequest(f"too many topics of {dlq.name!r} replayed on their own; "
                                         "replay them all (no topic) first")
                commits[(dlq.name, p.index)] = OffsetAndMetadata(pl.cursor.offset, metadata)
        if may_publish is not None:
            for target in sorted({r.topic for r in replays}):
                may_publish(target)

        self._running.add(group)
        try:
            published = self._publish_all(replays)
        except BaseException:
            self._running.discard(group)
            raise

        def committed_cursor(_: object) -> dict[str, Any]:
            if commits:
                code, codes = self._groups.commit_offsets(cursor_group, -1, UNKNOWN_MEMBER, commits)
                bad = [c for c in codes.values() if c is not Code.NONE]
                if code is not Code.NONE or bad:
                    raise LogbusError(f"the replayed dead letters of {group!r} are published, but their "
                                      f"cursor (group {cursor_group!r}) was not committed: "
                                      f"{(bad[0] if bad else code).name}")
            return _result(group, replays, skipped, more)

        def done(result: Any) -> Any:
            self._running.discard(group)
            return result

        return published.addCallback(committed_cursor).addBoth(done)

    def _partitions(self, topic: str) -> int | None:
        t = self._log().topics.get(topic)
        return None if t is None else len(t.partitions)

    def _publish_all(self, replays: list[Replay]) -> Deferred[Any]:
        """Publish in runs of consecutive replays to one (topic, partition), in DLQ order."""
        runs: list[tuple[str, int | None, list[Message]]] = []
        for r in replays:
            if r.partition is not None and runs and runs[-1][:2] == (r.topic, r.partition):
                runs[-1][2].append(r.message)
            else:
                runs.append((r.topic, r.partition, [r.message]))
        return gatherResults([self._publish(t, ms, p) for t, p, ms in runs], consumeErrors=True)


def _read(p: Any, start: int, end: int) -> Iterator[tuple[int, Message | None]]:
    """(offset, message) of partition ``p`` from ``start`` up to ``end``, read a batch run
    at a time (None for a record whose envelope does not decode)."""
    offset = start
    while offset < end:
        res = p.read(offset, READ_BYTES)
        if res.next_offset <= offset:
            return
        for r in B.decode(res.data):
            if offset <= r.offset < end:
                try:
                    yield r.offset, Message.from_record(B.Record(r.key, r.value, r.timestamp, r.headers))
                except CorruptBatch:
                    yield r.offset, None
        offset = res.next_offset


def _result(group: str, replays: list[Replay], skipped: int, more: bool) -> dict[str, Any]:
    topics: dict[str, int] = {}
    for r in replays:
        topics[r.topic] = topics.get(r.topic, 0) + 1
    return {"pop_group": group, "replayed": len(replays), "topics": topics, "skipped": skipped, "more": more}
