"""Options of the ``logbus`` source: the Kafka source's names and meanings, ``path``
(the data directory) and/or ``remote`` (the bucket a broker tiers to, ``s3://BUCKET/PREFIX``,
at ``remote.endpoint``) instead of ``kafka.bootstrap.servers``.

``Options.parse(mapping, streaming)`` checks combinations once, with the Kafka source's
rules (one of subscribe / subscribePattern / assign; no ``latest`` start or ``earliest``
end in a batch query; no ending offsets in a stream; timestamp options take precedence
over offsets), and raises ``OptionError`` with a message naming the option. Offsets
in JSON use Kafka's sentinels: ``-2`` earliest, ``-1`` latest. Partitions of a
subscribed topic that a JSON option does not name use the default (earliest start,
latest end).

``resolve_*`` turn the specs into concrete offsets against the files (``logfiles``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..filters import FilterError
from ..filters.message_filter import MessageFilter
from ..core.log.manifest import RemoteUrlError, parse_remote
from .logfiles import DataLoss, PartitionFiles
from .remotefiles import Location

EARLIEST, LATEST = -2, -1
TopicPartition = tuple[str, int]

# Kafka source options that have no meaning without a broker, or that we do not do.
_UNSUPPORTED = {
    "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
    "groupidprefix": "groupIdPrefix",
    "fetchoffset.numretries": "fetchOffset.numRetries",
    "fetchoffset.retryintervalms": "fetchOffset.retryIntervalMs",
    "kafkaconsumer.polltimeoutms": "kafkaConsumer.pollTimeoutMs",
}


READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"


class OptionError(ValueError):
    pass


@functools.lru_cache(maxsize=64)
def _compiled(tag: str | None, sql: str | None) -> MessageFilter | None:
    """Raises FilterError naming the option and the position."""
    return MessageFilter.from_arguments({"filterTag": tag, "filterSql": sql}, "filterTag", "filterSql")


@dataclass(frozen=True)
class Spec:
    """Where to start or stop: ``earliest``/``latest``, per-partition offsets, or
    timestamps (one for all, or per partition)."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = 0


@dataclass(frozen=True)
class Options:
    path: str
    subscribe: tuple[str, ...] | None
    pattern: str | None
    assign: tuple[TopicPartition, ...] | None
    start: Spec
    end: Spec
    timestamp_strategy: str  # startingOffsetsByTimestampStrategy: "error" | "latest"
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    max_records_per_partition: int | None
    include_headers: bool
    fail_on_data_loss: bool
    pushdown: bool
    filter_tag: str | None = None  # filterTag: a tag expression (docs/filters.md)
    filter_sql: str | None = None  # filterSql: a SQL92 selector over the properties column
    # isolationLevel read_committed (Spark's Kafka source: kafka.isolation.level): up to the
    # last stable offset, aborted transactions' records left out (docs/format.md 4.5)
    committed: bool = False
    remote: str = ""  # s3://BUCKET/PREFIX: tiered topics' remote segments (remotefiles.py)
    remote_endpoint: str = ""

    @property
    def location(self) -> Location:
        return Location(self.path, self.remote, self.remote_endpoint)

    def message_filter(self) -> MessageFilter | None:
        """The filter of filterTag and filterSql, compiled once per process."""
        return _compiled(self.filter_tag, self.filter_sql)

    @classmethod
    def parse(cls, raw: Mapping[str, str], streaming: bool) -> Options:
        o = {str(k).lower(): str(v) for k, v in raw.items()}
        isolation = o.pop("isolationlevel", None) or o.pop("kafka.isolation.level", None) or READ_UNCOMMITTED
        if isolation.lower() not in (READ_UNCOMMITTED, READ_COMMITTED):
            raise OptionError(f"option 'isolationLevel' must be {READ_UNCOMMITTED!r} or {READ_COMMITTED!r}")
        for key in o:
            if key.startswith("kafka."):
                raise OptionError(
                    f"option {key!r}: the logbus source reads the log files directly; give the"
                    " data directory as 'path' instead of Kafka client settings"
                )
            if key in _UNSUPPORTED:
                raise OptionError(f"option {_UNSUPPORTED[key]!r} is not supported by the logbus source")
        path = o.get("path", "")
        remote = o.get("remote", "")
        if not path and not remote:
            raise OptionError("option 'path' (the logbus data directory) or 'remote' (s3://BUCKET/PREFIX, where "
                              "a broker tiers its segments) is required")
        if remote:
            try:
                parse_remote(remote)
            except RemoteUrlError as e:
                raise OptionError(f"option 'remote': {e}") from None
            if streaming:
                raise OptionError("option 'remote' applies to batch queries (spark.read); a stream reads 'path'")
        chosen = [k for k in ("subscribe", "subscribepattern", "assign") if o.get(k)]
        if len(chosen) != 1:
            raise OptionError(
                "exactly one of 'subscribe', 'subscribePattern' or 'assign' must be given"
                + (f" (got {', '.join(chosen)})" if chosen else "")
            )
        subscribe = pattern = assign = None
        if "subscribe" in chosen:
            subscribe = tuple(t.strip() for t in o["subscribe"].split(",") if t.strip())
            if not subscribe:
                raise OptionError("option 'subscribe' names no topic")
        elif "subscribepattern" in chosen:
            pattern = o["subscribepattern"]
            try:
                re.compile(pattern)
            except re.error as e:
                raise OptionError(f"option 'subscribePattern' is not a valid regular expression: {e}") from None
        else:
            assign = tuple(
                (t, p) for t, parts in _json_object(o["assign"], "assign").items() for p in _int_list(parts, "assign")
            )
        start = _spec(o, "starting", streaming)
        end = _spec(o, "ending", streaming)
        if streaming and end.kind != "latest":
            raise OptionError("ending offsets/timestamps (endingOffsets, endingTimestamp, ...) apply only to batch queries")
        if not streaming:
            if start.kind == "latest":
                raise OptionError("startingOffsets 'latest' is not valid in a batch query")
            if any(v == LATEST for v in start.offsets.values()):
                raise OptionError("startingOffsets may not use -1 (latest) in a batch query")
            if end.kind == "earliest" or any(v == EARLIEST for v in end.offsets.values()):
                raise OptionError("endingOffsets may not be 'earliest' (-2)")
        strategy = o.get("startingoffsetsbytimestampstrategy", "error").lower()
        if strategy not in ("error", "latest"):
            raise OptionError("startingOffsetsByTimestampStrategy must be 'error' or 'latest'")
        return cls(
            path=path,
            subscribe=subscribe,
            pattern=pattern,
            assign=assign,
            start=start,
            end=end,
            timestamp_strategy=strategy,
            max_offsets_per_trigger=_positive(o, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
            min_partitions=_positive(o, "minpartitions", "minPartitions"),
            max_records_per_partition=_positive(o, "maxrecordsperpartition", "maxRecordsPerPartition"),
            include_headers=_bool(o, "includeheaders", "includeHeaders", False),
            fail_on_data_loss=_bool(o, "failondataloss", "failOnDataLoss", True),
            pushdown=_bool(o, "pushdown", "pushdown", False),
            filter_tag=o.get("filtertag"),
            filter_sql=o.get("filtersql"),
            committed=isolation.lower() == READ_COMMITTED,
            remote=remote,
            remote_endpoint=o.get("remote.endpoint", ""),
        )._checked()

    def _checked(self) -> Options:
        try:
            _compiled(self.filter_tag, self.filter_sql)
        except FilterError as e:
            raise OptionError(f"option {e.reason}") from None
        return self

    # -- against the files ----------------------------------------------------------------

    def topic_partitions(self, data: Any) -> list[TopicPartition]:
        """The partitions the query reads now (subscriptions are listed again each time)."""
        if self.assign is not None:
            return sorted(set(self.assign))
        if self.subscribe is not None:
            topics = [t for t in self.subscribe]
        else:
            rx = re.compile(self.pattern or "")
            topics = [t for t in data.topics() if rx.fullmatch(t)]
        return [(t, p) for t in sorted(set(topics)) for p in data.partitions(t)]


def resolve_start(spec: Spec, tp: TopicPartition, pf: PartitionFiles, end: int, opts: Options, default: str) -> int:
    """A starting spec -> an offset of ``tp`` (clamped by the data-loss rules)."""
    start = pf.start()
    kind = spec.kind
    if kind == "timestamp" or (kind == "timestamps" and tp in spec.offsets):
        ts = spec.timestamp if kind == "timestamp" else spec.offsets[tp]
        found = pf.offset_for_time(ts, end)
        if found is None:
            if opts.timestamp_strategy == "latest":
                return end
            raise OptionError(
                f"no record of {tp[0]}/{tp[1]} has a timestamp >= {ts} (set"
                " startingOffsetsByTimestampStrategy=latest to start at the end instead)"
            )
        return found
    value = spec.offsets.get(tp, EARLIEST if default == "earliest" else LATEST) if kind == "offsets" else (
        EARLIEST if kind == "earliest" or (kind == "timestamps" and default == "earliest") else LATEST
    )
    if value == EARLIEST:
        return start
    if value == LATEST:
        return end
    return check_range(value, start, end, tp, opts)


def resolve_end(spec: Spec, tp: TopicPartition, pf: PartitionFiles, end: int) -> int:
    kind = spec.kind
    if kind == "timestamp" or (kind == "timestamps" and tp in spec.offsets):
        ts = spec.timestamp if kind == "timestamp" else spec.offsets[tp]
        found = pf.offset_for_time(ts, end)
        return end if found is None else found
    if kind == "offsets" and spec.offsets.get(tp, LATEST) != LATEST:
        value = spec.offsets[tp]
        if value > end:
            raise OptionError(f"endingOffsets {value} for {tp[0]}/{tp[1]} is past the end of the log ({end})")
        return value
    return end


def check_range(offset: int, start: int, end: int, tp: TopicPartition, opts: Options) -> int:
    """``offset`` if it is in ``[start, end]``; else the data-loss rule: an error, or
    (failOnDataLoss=false) the nearest offset that exists."""
    if start <= offset <= end:
        return offset
    what = "before the log start" if offset < start else "past the log end"
    if opts.fail_on_data_loss:
        raise DataLoss(
            f"offset {offset} of {tp[0]}/{tp[1]} is {what} ({start}..{end}): records were deleted"
            " by retention, or the topic was recreated. Set failOnDataLoss=false to skip them."
        )
    return start if offset < start else end


def _spec(o: Mapping[str, str], prefix: str, streaming: bool) -> Spec:
    single = o.get(f"{prefix}timestamp")
    per = o.get(f"{prefix}offsetsbytimestamp")
    offsets = o.get(f"{prefix}offsets")
    name = "startingOffsets" if prefix == "starting" else "endingOffsets"
    if single is not None:
        try:
            return Spec("timestamp", timestamp=int(single))
        except ValueError:
            raise OptionError(f"{prefix}Timestamp must be milliseconds since the epoch, not {single!r}") from None
    if per is not None:
        table = _offset_table(per, f"{prefix}OffsetsByTimestamp")
        return Spec("timestamps", offsets=table)
    if offsets is None:
        return Spec("latest" if (prefix == "ending" or streaming) else "earliest")
    text = offsets.strip()
    if text.lower() in ("earliest", "latest"):
        return Spec(text.lower())
    table = _offset_table(text, name)
    for tp, v in table.items():
        if v < EARLIEST:
            raise OptionError(f"{name}: offset {v} for {tp[0]}/{tp[1]} is not valid (use >= 0, -2 or -1)")
    return Spec("offsets", offsets=table)


def _offset_table(text: str, name: str) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    for topic, parts in _json_object(text, name).items():
        if not isinstance(parts, dict):
            raise OptionError(f"{name}: expected {{\"topic\": {{\"partition\": value}}}}, got {text!r}")
        for p, v in parts.items():
            try:
                out[(topic, int(p))] = int(v)
            except (TypeError, ValueError):
                raise OptionError(f"{name}: partition {p!r} and value {v!r} must be integers") from None
    return out


def _json_object(text: str, name: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise OptionError(f"option {name!r} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise OptionError(f"option {name!r} must be a JSON object")
    return value


def _int_list(value: Any, name: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and v >= 0 for v in value):
        raise OptionError(f"option {name!r}: expected {{\"topic\": [partition, ...]}}")
    return value


def _positive(o: Mapping[str, str], key: str, name: str) -> int | None:
    if key not in o:
        return None
    try:
        value = int(o[key])
    except ValueError:
        value = 0
    if value <= 0:
        raise OptionError(f"option {name!r} must be a positive integer, not {o[key]!r}")
    return value


def _bool(o: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    if key not in o:
        return default
    value = o[key].strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {name!r} must be 'true' or 'false', not {o[key]!r}")
    return value == "true"
