"""Kafka admin requests over the broker: CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs. Like handlers.py: each takes a decoded request and returns the response
object; no sockets here.

Theory of operation
-------------------
logbus is one broker: it is every partition's leader and the controller, so a replication
factor is 1 (or -1, "the default") and a manual assignment may only name this node.
Topic settings already carry Kafka's names in ``TopicConfig`` (``retention.ms``,
``segment.bytes``, ...) plus logbus's own ``flush``; ``cleanup.policy`` is accepted and
described only as ``delete`` (logbus does not compact). Every check runs before anything
changes, so ``validate_only`` is "the same answer, without the last step".

Results are per topic: one bad topic gets its own error code and message and does not
fail the others. A topic named twice in one request is INVALID_REQUEST for that name
(as Apache Kafka answers). A disk failure (OSError) is that topic's KAFKA_STORAGE_ERROR;
failures the handlers do not expect (bugs) propagate, and the connection is closed with
the traceback logged (protocol.py).

CreatePartitions goes through ``Broker.grow_topic``, which records the new count *before*
the log grows, so a crash in between reopens the topic with the new, empty partitions.

DescribeConfigs tells a topic's setting apart from the broker's default by value: the
``TopicRecord`` stores every setting, so a setting given explicitly with the default's
value is described as a default.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)

from ...core.broker import Broker
from ...core.errors import InvalidConfig, LogbusError, TopicExists, UnknownTopic
from ...core.log.topic_config import TopicConfig, validate_topic_name
from . import errors as K
from .codec import Request
from .handlers import KafkaHandlers

log = logging.getLogger(__name__)

# Kafka error codes used only here (numbers from Apache Kafka's ``Errors`` enum)
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
UNKNOWN_TOPIC_ID = 100

# DescribeConfigs resource types, config sources and config types (Kafka's enums)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_LIST = 1, 2, 3, 5, 7

MAX_PARTITIONS = 100_000  # TopicConfig's limit

# API versions registered: (request, response, min, max). kafka-python 3.0.12 uses the
# highest of each; librdkafka 2.16 (confluent-kafka, kcat) sends CreateTopics v4,
# DeleteTopics v4, CreatePartitions v2 and DescribeConfigs v1. v0 and v1, which Apache
# Kafka 4 dropped, are decoded from the same schemas (tested against aiokafka's structs).
VERSIONS = {
    "create_topics": (CreateTopicsRequest, CreateTopicsResponse, 0, 7),
    "delete_topics": (DeleteTopicsRequest, DeleteTopicsResponse, 0, 6),
    "create_partitions": (CreatePartitionsRequest, CreatePartitionsResponse, 0, 3),
    "describe_configs": (DescribeConfigsRequest, DescribeConfigsResponse, 0, 4),
}


class AdminError(Exception):
    """One topic's or resource's failure, with its Kafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


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
)
_BY_NAME = {s.name: s for s in _SETTINGS}
CLEANUP_POLICY = Setting("cleanup.policy", "log.cleanup.policy", TYPE_LIST,
                         "Only 'delete': logbus deletes old segments and does not compact.")
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
                raise AdminError(INVALID_CONFIG, f"cleanup.policy {value!r} is not supported: logbus only deletes")
            continue
        if name not in _BY_NAME:
            raise AdminError(INVALID_CONFIG, f"unknown or unsupported topic config {name!r} "
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
    out.append(ConfigEntry(p.name, "delete", True, SOURCE_DEFAULT, p.type, p.doc,
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


def _once(items: Iterable[Any], key: Callable[[Any], str | None]) -> list[tuple[Any, bool]]:
    """Each item of a request once (the first with its name), and whether its name was
    given more than once (INVALID_REQUEST, as Apache Kafka answers). Items without a
    name are all kept."""
    items = list(items)
    counts = Counter(key(t) for t in items)
    seen: set[str] = set()
    out = []
    for t in items:
        name = key(t)
        if name is None:
            out.append((t, False))
        elif name not in seen:
            seen.add(name)
            out.append((t, counts[name] > 1))
    return out


def _repeated(name: str) -> AdminError:
    return AdminError(K.INVALID_REQUEST, f"topic {name!r} appears more than once in the request")


def _error_result(e: BaseException) -> tuple[int, str]:
    """(Kafka error code, message) for one topic's or resource's failure."""
    if isinstance(e, OSError):
        log.error("kafka admin request failed on storage: %s", e)
        return K.KAFKA_STORAGE_ERROR, f"storage error: {e}"
    if isinstance(e, AdminError):
        return e.code, e.message
    if isinstance(e, TopicExists):
        return TOPIC_ALREADY_EXISTS, str(e)
    if isinstance(e, InvalidConfig):
        return INVALID_CONFIG, str(e)
    return K.code_for(e), str(e)


# -- the handlers ----------------------------------------------------------------------------


class KafkaAdmin:
    def __init__(self, handlers: KafkaHandlers) -> None:
        self.handlers = handlers

    @property
    def broker(self) -> Broker:
        return self.handlers.broker

    def _topics(self) -> dict[str, Any]:
        lm = self.broker.log
        assert lm is not None
        return lm.topics

    # -- CreateTopics -----------------------------------------------------------------

    def create_topics(self, req: Request, advertised: tuple[str, int]) -> Any:
        body = req.body
        R = CreateTopicsResponse.CreatableTopicResult
        C = R.CreatableTopicConfigs
        results = []
        for t, repeated in _once(body.topics, lambda t: t.name):
            try:
                if repeated:
                    raise _repeated(t.name)
                config = self._plan_topic(t)
                if not body.validate_only:
                    self.broker.create_topic(t.name, config.to_mapping())
            except (LogbusError, AdminError, OSError) as e:
                code, message = _error_result(e)
                results.append(R(name=t.name, topic_id=None, error_code=code, error_message=message,
                                 num_partitions=-1, replication_factor=-1, configs=None))
                continue
            entries = topic_entries(config, self.broker.topic_defaults)
            configs = [C(name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                         is_sensitive=False) for e in entries]
            results.append(R(name=t.name, topic_id=None, error_code=K.NONE, error_message=None,
                             num_partitions=config.partitions, replication_factor=1, configs=configs))
        return CreateTopicsResponse(throttle_time_ms=0, topics=results)

    def _plan_topic(self, t: Any) -> TopicConfig:
        """The config topic ``t`` would be created with; AdminError or a core error if
        it cannot be."""
        validate_topic_name(t.name)
        if t.name in self._topics():
            raise AdminError(TOPIC_ALREADY_EXISTS, f"Topic {t.name!r} already exists.")
        node = self.handlers.node_id
        partitions = t.num_partitions
        if t.assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                raise AdminError(K.INVALID_REQUEST, "with a manual assignment, num_partitions and "
                                                    "replication_factor must be -1")
            indexes = sorted(a.partition_index for a in t.assignments)
            if indexes != list(range(len(indexes))):
                raise AdminError(INVALID_REPLICA_ASSIGNMENT,
                                 f"partitions must be numbered 0..{len(indexes) - 1}, got {indexes}")
            for a in t.assignments:
                if list(a.broker_ids) != [node]:
                    raise AdminError(INVALID_REPLICA_ASSIGNMENT,
                                     f"partition {a.partition_index} assigned to {list(a.broker_ids)}: "
                                     f"logbus has one broker, node {node}")
            partitions = len(indexes)
        elif t.replication_factor == 0 or t.replication_factor < -1:
            raise AdminError(INVALID_REPLICATION_FACTOR,
                             "Replication factor must be larger than 0, or -1 to use the default value.")
        elif t.replication_factor > 1:
            raise AdminError(INVALID_REPLICATION_FACTOR,
                             f"Replication factor: {t.replication_factor} larger than available brokers: 1.")
        if partitions == -1:
            partitions = self.broker.topic_defaults.partitions
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise AdminError(INVALID_PARTITIONS, f"Number of partitions must be 1..{MAX_PARTITIONS}, not {partitions}.")
        settings = topic_settings((c.name, c.value) for c in t.configs)
        settings["partitions"] = partitions
        return TopicConfig.from_mapping(settings, base=self.broker.topic_defaults)

    # -- DeleteTopics -----------------------------------------------------------------

    def delete_topics(self, req: Request, advertised: tuple[str, int]) -> Any:
        body = req.body
        R = DeleteTopicsResponse.DeletableTopicResult
        if req.api_version >= 6:
            wanted = [(t.name, t.topic_id) for t in body.topics]
        else:
            wanted = [(name, None) for name in body.topic_names]
        results = []
        for (name, topic_id), repeated in _once(wanted, lambda w: w[0]):
            if name is None:
                results.append(R(name=None, topic_id=topic_id, error_code=UNKNOWN_TOPIC_ID,
                                 error_message="logbus has no topic ids: delete topics by name"))
                continue
            try:
                if repeated:
                    raise _repeated(name)
                if name not in self._topics():
                    raise UnknownTopic(f"This server does not host topic {name!r}.")
                self.broker.delete_topic(name)
            except (LogbusError, AdminError, OSError) as e:
                code, message = _error_result(e)
                results.append(R(name=name, topic_id=None, error_code=code, error_message=message))
                continue
            results.append(R(name=name, topic_id=None, error_code=K.NONE, error_message=None))
        return DeleteTopicsResponse(throttle_time_ms=0, responses=results)

    # -- CreatePartitions -------------------------------------------------------------

    def create_partitions(self, req: Request, advertised: tuple[str, int]) -> Any:
        body = req.body
        R = CreatePartitionsResponse.CreatePartitionsTopicResult
        results = []
        for t, repeated in _once(body.topics, lambda t: t.name):
            try:
                if repeated:
                    raise _repeated(t.name)
                config = self._plan_growth(t)
                if not body.validate_only:
                    self.broker.grow_topic(t.name, config.partitions)
            except (LogbusError, AdminError, OSError) as e:
                code, message = _error_result(e)
                results.append(R(name=t.name, error_code=code, error_message=message))
                continue
            results.append(R(name=t.name, error_code=K.NONE, error_message=None))
        return CreatePartitionsResponse(throttle_time_ms=0, results=results)

    def _plan_growth(self, t: Any) -> TopicConfig:
        topic = self._topics().get(t.name)
        if topic is None:
            raise UnknownTopic(f"The topic {t.name!r} does not exist.")
        current = len(topic.partitions)
        if t.count <= current:
            raise AdminError(INVALID_PARTITIONS, f"Topic currently has {current} partitions, "
                                                 f"which is {'equal to' if t.count == current else 'higher than'} "
                                                 f"the requested {t.count}.")
        if t.count > MAX_PARTITIONS:
            raise AdminError(INVALID_PARTITIONS, f"Number of partitions must be at most {MAX_PARTITIONS}.")
        if t.assignments:  # null or empty: no manual assignment
            node = self.handlers.node_id
            if len(t.assignments) != t.count - current:
                raise AdminError(INVALID_REPLICA_ASSIGNMENT,
                                 f"Increasing the number of partitions by {t.count - current} "
                                 f"but {len(t.assignments)} assignments provided.")
            for a in t.assignments:
                if list(a.broker_ids) != [node]:
                    raise AdminError(INVALID_REPLICA_ASSIGNMENT,
                                     f"assignment {list(a.broker_ids)}: logbus has one broker, node {node}")
        config: TopicConfig = replace(topic.config, partitions=t.count)
        return config

    # -- DescribeConfigs --------------------------------------------------------------

    def describe_configs(self, req: Request, advertised: tuple[str, int]) -> Any:
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
                entries = self._entries(r.resource_type, r.resource_name)
            except (AdminError, LogbusError) as e:
                code, message = _error_result(e)
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
        defaults = self.broker.topic_defaults
        if resource_type == RESOURCE_TOPIC:
            topic = self._topics().get(name)
            if topic is None:
                raise UnknownTopic(f"Topic {name!r} does not exist.")
            return topic_entries(topic.config, defaults)
        if resource_type == RESOURCE_BROKER:
            node = self.handlers.node_id
            if name not in ("", str(node)):
                raise AdminError(K.INVALID_REQUEST, f"Unexpected broker id, expected {node} but received {name!r}")
            return broker_entries(node, self.handlers.auto_create_topics, defaults)
        raise AdminError(K.INVALID_REQUEST, f"logbus describes only topic (2) and broker (4) resources, "
                                            f"not resource type {resource_type}")


def install(handlers: KafkaHandlers) -> None:
    """Register this module's APIs with ``handlers``."""
    admin = KafkaAdmin(handlers)
    for method, (req_cls, resp_cls, lo, hi) in VERSIONS.items():
        fn: Callable[[Request, tuple[str, int]], Any] = getattr(admin, method)
        handlers.register(req_cls, resp_cls, lo, hi, fn)
