"""Topic settings under their Kafka names, and the config APIs: DescribeConfigs (32),
AlterConfigs (33) and IncrementalAlterConfigs (44). Like handlers.py: each takes a
decoded request and returns the response object; no sockets here.

Theory of operation
-------------------
Topic settings already carry Kafka's names in ``TopicConfig`` (``retention.ms``,
``segment.bytes``, ...) plus logbus's own ``flush``; ``cleanup.policy`` is accepted and
described only as ``delete`` (logbus does not compact).

DescribeConfigs tells a topic's setting apart from the broker's default by value: the
``TopicRecord`` stores every setting, so a setting given explicitly with the default's
value is described as a default.

Altering a topic goes through ``Topics.alter_topic``: the new settings are recorded, then
applied to the live partitions (flush policy, segment size and age, retention, largest
batch). AlterConfigs sets exactly the settings given, the others go back to the broker's
default (as Kafka's AlterConfigs); IncrementalAlterConfigs applies SET, DELETE (back to
the default), and APPEND/SUBTRACT, which only list settings take (here only
``cleanup.policy``, which must stay ``delete``). Each resource is all or nothing, checked
fully before anything changes, so ``validate_only`` is "the same answer, without the last
step". Errors are Kafka's: a bad name or value is INVALID_CONFIG, a null value, a key
named twice or an unknown operation INVALID_REQUEST, an unknown topic
UNKNOWN_TOPIC_OR_PARTITION. logbus has no dynamic broker configs: altering a broker
resource is INVALID_REQUEST, as Kafka answers for configs it cannot update dynamically.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from ...core.errors import LogbusError, UnknownTopic
from ...core.types import TopicConfig
from . import errors as K
from .operations import ALTER_CONFIGS, DESCRIBE_CONFIGS
from .caller import Caller
from .codec import Request
from .errors import AdminError
from .handlers import HandlerPart, KafkaHandlers

log = logging.getLogger(__name__)

# DescribeConfigs resource types, config sources and config types (Kafka's enums)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_LIST = 1, 2, 3, 5, 7

# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {APPEND: "append", SUBTRACT: "subtract"}

# API versions registered: (request, response, min, max). kafka-python 3.0.12 uses the
# highest of each; librdkafka 2.16 sends DescribeConfigs v1 and IncrementalAlterConfigs v1.
VERSIONS = {
    "describe_configs": (DescribeConfigsRequest, DescribeConfigsResponse, 0, 4),
    "alter_configs": (AlterConfigsRequest, AlterConfigsResponse, 0, 2),
    "incremental_alter_configs": (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 0, 1),
}


# -- topic settings with their Kafka names ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Setting:
    name: str  # the topic-level name (TopicConfig's key)
    broker_name: str  # the broker-level default's name
    type: int
    doc: str


_SETTINGS = (
    Setting("flush", "flush", TYPE_STRING,
            "logbus: when appends are made durable: 'sync', 'interval:<ms>' or 'none'"),
    Setting("segment.bytes", "log.segment.bytes", TYPE_INT, "The size at which a new log segment is started."),
    Setting("segment.ms", "log.roll.ms", TYPE_LONG, "The age at which a new log segment is started."),
    Setting("retention.ms", "log.retention.ms", TYPE_LONG,
            "How long segments are kept before deletion; -1 keeps them forever."),
    Setting("retention.bytes", "log.retention.bytes", TYPE_LONG,
            "The size a partition may grow to before old segments are deleted; -1: no limit."),
    Setting("max.message.bytes", "message.max.bytes", TYPE_INT, "The largest record batch accepted."),
    Setting("index.interval.bytes", "log.index.interval.bytes", TYPE_INT,
            "How many bytes of records lie between two offset index entries."),
    Setting("remote.storage.enable", "remote.storage.enable", TYPE_BOOLEAN,
            "Whether sealed segments are uploaded to the broker's remote storage (docs/tiering.md)."),
    Setting("local.retention.ms", "log.local.retention.ms", TYPE_LONG,
            "How long local copies of uploaded segments are kept; -2: as retention.ms."),
    Setting("local.retention.bytes", "log.local.retention.bytes", TYPE_LONG,
            "The size local copies of uploaded segments may grow to; -2: as retention.bytes."),
)
_BY_NAME = {s.name: s for s in _SETTINGS}
CLEANUP_POLICY = Setting("cleanup.policy", "log.cleanup.policy", TYPE_LIST,
                         "Only 'delete': logbus deletes old segments and does not compact "
                         "(it may be set, but only to 'delete').")
ACCEPTED_CONFIGS = sorted([*_BY_NAME, CLEANUP_POLICY.name])


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One described configuration, independent of the response version."""

    name: str
    value: str | None
    read_only: bool
    source: int
    type: int
    doc: str
    synonyms: tuple[tuple[str, str | None, int], ...] = ()


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def topic_settings(configs: Iterable[tuple[str, str | None]]) -> dict[str, Any]:
    """CreateTopics ``configs`` -> logbus topic settings (raises AdminError)."""
    settings: dict[str, Any] = {}
    for name, value in configs:
        if value is None:
            raise AdminError(K.INVALID_REQUEST, f"Null value not supported for topic config {name!r}")
        if name == CLEANUP_POLICY.name:
            if value.strip().lower() != "delete":
                raise AdminError(K.INVALID_CONFIG, f"cleanup.policy {value!r} is not supported: logbus only deletes")
            continue
        if name not in _BY_NAME:
            raise AdminError(K.INVALID_CONFIG, f"unknown or unsupported topic config {name!r} "
                                             f"(supported: {', '.join(ACCEPTED_CONFIGS)})")
        settings[name] = value
    return settings


def topic_entries(config: TopicConfig, defaults: TopicConfig) -> list[ConfigEntry]:
    """Every topic setting of ``config``, with its source: the topic's own value
    (differs from the broker's), the broker's configured default, or the built-in one."""
    mine, broker, builtin = config.to_mapping(), defaults.to_mapping(), TopicConfig().to_mapping()
    out = []
    for s in _SETTINGS:
        value, dflt, base = mine[s.name], broker[s.name], builtin[s.name]
        chain: list[tuple[str, str | None, int]] = []
        if value != dflt:
            chain.append((s.name, _text(value), SOURCE_DYNAMIC_TOPIC))
        if dflt != base:
            chain.append((s.broker_name, _text(dflt), SOURCE_STATIC_BROKER))
        chain.append((s.broker_name, _text(base), SOURCE_DEFAULT))
        out.append(ConfigEntry(s.name, _text(value), False, chain[0][2], s.type, s.doc, tuple(chain)))
    p = CLEANUP_POLICY
    out.append(ConfigEntry(p.name, "delete", False, SOURCE_DEFAULT, p.type, p.doc,
                           ((p.broker_name, "delete", SOURCE_DEFAULT),)))
    return out


def broker_entries(node_id: int, auto_create: bool, defaults: TopicConfig) -> list[ConfigEntry]:
    """The broker's (read-only) settings: those a Kafka client or tool looks for."""
    broker, builtin = defaults.to_mapping(), TopicConfig().to_mapping()
    rows: list[tuple[str, Any, Any, int, str]] = [
        ("broker.id", node_id, 0, TYPE_INT, "This broker's node id."),
        ("auto.create.topics.enable", auto_create, True, TYPE_BOOLEAN,
         "Whether Metadata and Produce create unknown topics."),
        ("num.partitions", defaults.partitions, 1, TYPE_INT, "The number of partitions of a new topic."),
        ("default.replication.factor", 1, 1, TYPE_INT, "logbus is one broker: always 1."),
        ("min.insync.replicas", 1, 1, TYPE_INT, "logbus is one broker: always 1."),
        ("log.cleanup.policy", "delete", "delete", TYPE_LIST, CLEANUP_POLICY.doc),
    ]
    rows += [(s.broker_name, broker[s.name], builtin[s.name], s.type, s.doc) for s in _SETTINGS]
    out = []
    for name, value, base, ctype, doc in rows:
        source = SOURCE_DEFAULT if value == base else SOURCE_STATIC_BROKER
        out.append(ConfigEntry(name, _text(value), True, source, ctype, doc, ((name, _text(value), source),)))
    return out


def replacement_settings(configs: Iterable[tuple[str, str | None]]) -> dict[str, Any]:
    """AlterConfigs entries -> settings for ``Topics.alter_topic``: those given, and every
    other one back to the broker's default (None). Raises AdminError."""
    changes: dict[str, Any] = dict.fromkeys(_BY_NAME)
    changes.update(topic_settings(_no_repeats(configs, lambda c: c[0])))
    return changes


def incremental_settings(ops: Iterable[tuple[str, int, str | None]]) -> dict[str, str | None]:
    """IncrementalAlterConfigs operations (name, op, value) -> settings for
    ``Topics.alter_topic`` (None: back to the broker's default). Raises AdminError."""
    changes: dict[str, str | None] = {}
    for name, op, value in _no_repeats(ops, lambda o: o[0]):
        if op not in (SET, DELETE, APPEND, SUBTRACT):
            raise AdminError(K.INVALID_REQUEST, f"Unknown alter configs op type {op} for {name!r}")
        if op != DELETE and value is None:
            raise AdminError(K.INVALID_REQUEST, f"Null value not supported for : {name}")
        if name == CLEANUP_POLICY.name:
            _cleanup_policy(op, value)
        elif name not in _BY_NAME:
            raise AdminError(K.INVALID_CONFIG, f"unknown or unsupported topic config {name!r} "
                                               f"(supported: {', '.join(ACCEPTED_CONFIGS)})")
        elif op in _OP_NAMES:
            raise AdminError(K.INVALID_CONFIG, f"Config value {_OP_NAMES[op]} is not allowed for config key: {name}")
        else:
            changes[name] = value if op == SET else None
    return changes


def _cleanup_policy(op: int, value: str | None) -> None:
    """cleanup.policy is a list setting that must stay exactly ``delete``."""
    items = {v.strip().lower() for v in (value or "").split(",") if v.strip()}
    after = {SET: items, DELETE: {"delete"}, APPEND: {"delete"} | items, SUBTRACT: {"delete"} - items}[op]
    if after != {"delete"}:
        raise AdminError(K.INVALID_CONFIG, f"cleanup.policy {','.join(sorted(after)) or '(empty)'!r} is not "
                                           "supported: logbus only deletes")


def _no_repeats(items: Iterable[Any], key: Callable[[Any], str]) -> list[Any]:
    items = list(items)
    repeated = sorted(k for k, n in Counter(key(i) for i in items).items() if n > 1)
    if repeated:
        raise AdminError(K.INVALID_REQUEST, f"Error due to duplicate config keys: {', '.join(repeated)}")
    return items


# -- the handlers ----------------------------------------------------------------------------


class KafkaConfigs(HandlerPart):

    # -- DescribeConfigs --------------------------------------------------------------

    def describe_configs(self, req: Request, caller: Caller) -> Any:
        body = req.body
        version = req.api_version
        synonyms = version >= 1 and body.include_synonyms
        docs = version >= 3 and body.include_documentation
        R = DescribeConfigsResponse.DescribeConfigsResult
        E = R.DescribeConfigsResourceResult
        S = E.DescribeConfigsSynonym
        results = []
        for r in body.resources:
            try:
                if r.resource_type == RESOURCE_TOPIC and not self.handlers.access.topic(
                        caller.user, DESCRIBE_CONFIGS, r.resource_name):
                    raise AdminError(K.TOPIC_AUTHORIZATION_FAILED, f"not authorized to describe {r.resource_name!r}")
                entries = self._entries(r.resource_type, r.resource_name)
            except (AdminError, LogbusError) as e:
                code, message = K.admin_result(e)
                results.append(R(error_code=code, error_message=message, resource_type=r.resource_type,
                                 resource_name=r.resource_name, configs=[]))
                continue
            if r.configuration_keys is not None:  # null: all; empty: none (as Kafka)
                wanted = set(r.configuration_keys)
                entries = [e for e in entries if e.name in wanted]
            configs = [
                E(name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                  is_default=e.source == SOURCE_DEFAULT, is_sensitive=False,
                  synonyms=[S(name=n, value=v, source=s) for n, v, s in e.synonyms] if synonyms else [],
                  config_type=e.type, documentation=e.doc if docs else None)
                for e in entries
            ]
            results.append(R(error_code=K.NONE, error_message=None, resource_type=r.resource_type,
                             resource_name=r.resource_name, configs=configs))
        return DescribeConfigsResponse(throttle_time_ms=0, results=results)

    def _entries(self, resource_type: int, name: str) -> list[ConfigEntry]:
        defaults = self.streams.topic_defaults
        if resource_type == RESOURCE_TOPIC:
            if self.streams.partition_count(name) is None:
                raise UnknownTopic(f"Topic {name!r} does not exist.")
            return topic_entries(self.streams.topic_config(name), defaults)
        if resource_type == RESOURCE_BROKER:
            node = self.handlers.node_id
            if name not in ("", str(node)):
                raise AdminError(K.INVALID_REQUEST, f"Unexpected broker id, expected {node} but received {name!r}")
            return broker_entries(node, self.handlers.auto_create_topics, defaults)
        raise AdminError(K.INVALID_REQUEST, f"logbus describes only topic (2) and broker (4) resources, "
                                            f"not resource type {resource_type}")

    # -- AlterConfigs / IncrementalAlterConfigs ---------------------------------------

    def alter_configs(self, req: Request, caller: Caller) -> Any:
        R = AlterConfigsResponse.AlterConfigsResourceResponse
        results = []
        for r in req.body.resources:
            entries = [(c.name, c.value) for c in r.configs]
            results.append(R(**self._alter(caller, r.resource_type, r.resource_name, req.body.validate_only,
                                           partial(replacement_settings, entries), [n for n, _ in entries])))
        return AlterConfigsResponse(throttle_time_ms=0, responses=results)

    def incremental_alter_configs(self, req: Request, caller: Caller) -> Any:
        R = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
        results = []
        for r in req.body.resources:
            ops = [(c.name, c.config_operation, c.value) for c in r.configs]
            results.append(R(**self._alter(caller, r.resource_type, r.resource_name, req.body.validate_only,
                                           partial(incremental_settings, ops), [n for n, _, _ in ops])))
        return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)

    def _alter(self, caller: Caller, resource_type: int, name: str, validate_only: bool,
               settings: Callable[[], dict[str, Any]], keys: list[str]) -> dict[str, Any]:
        """One resource's result fields."""
        access = self.handlers.access
        try:
            if resource_type == RESOURCE_TOPIC:
                if not access.topic(caller.user, ALTER_CONFIGS, name):
                    raise AdminError(K.TOPIC_AUTHORIZATION_FAILED, f"not authorized to alter topic {name!r}")
                if self.streams.partition_count(name) is None:
                    raise UnknownTopic(f"Topic {name!r} does not exist.")
                self.topics.alter_topic(name, settings(), validate_only=validate_only)
            elif resource_type == RESOURCE_BROKER:
                if not access.cluster(caller.user, ALTER_CONFIGS):
                    raise AdminError(K.CLUSTER_AUTHORIZATION_FAILED, "not authorized to alter the broker's configs")
                node = self.handlers.node_id
                if name not in ("", str(node)):
                    raise AdminError(K.INVALID_REQUEST, f"Unexpected broker id, expected {node} but received {name!r}")
                if keys:
                    raise AdminError(K.INVALID_REQUEST, f"Cannot update these configs dynamically: {sorted(keys)} "
                                                        "(logbus broker settings are set at start)")
            else:
                raise AdminError(K.INVALID_REQUEST, f"AlterConfigs is only supported for topics and brokers, "
                                                    f"but resource type is {resource_type}")
        except (LogbusError, AdminError, OSError) as e:
            code, message = K.admin_result(e)
            return dict(error_code=code, error_message=message, resource_type=resource_type, resource_name=name)
        return dict(error_code=K.NONE, error_message=None, resource_type=resource_type, resource_name=name)


def install(handlers: KafkaHandlers) -> None:
    """Register this module's APIs with ``handlers``."""
    configs = KafkaConfigs(handlers)
    for method, (req_cls, resp_cls, lo, hi) in VERSIONS.items():
        fn: Callable[[Request, Caller], Any] = getattr(configs, method)
        handlers.register(req_cls, resp_cls, lo, hi, fn)
