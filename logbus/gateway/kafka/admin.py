"""Kafka admin requests over the ``Topics`` port: CreateTopics, DeleteTopics, CreatePartitions
(topic settings and DescribeConfigs/AlterConfigs are in configs.py). Like handlers.py: each takes a decoded request and returns the response
object; no sockets here.

Theory of operation
-------------------
logbus is one broker: it is every partition's leader and the controller, so a replication
factor is 1 (or -1, "the default") and a manual assignment may only name this node.
Every check runs before anything changes, so ``validate_only`` is "the same answer, without the last step".

Results are per topic: one bad topic gets its own error code and message and does not
fail the others. A topic named twice in one request is INVALID_REQUEST for that name
(as Apache Kafka answers). A disk failure (OSError) is that topic's KAFKA_STORAGE_ERROR;
failures the handlers do not expect (bugs) propagate, and the connection is closed with
the traceback logged (protocol.py).

CreatePartitions goes through ``Topics.grow_topic``, which records the new count *before*
the log grows, so a crash in between reopens the topic with the new, empty partitions.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from ...core.errors import LogbusError, UnknownTopic
from ...core.types import TopicConfig, validate_topic_name
from . import errors as K
from .operations import ALTER
from .caller import Caller
from .codec import Request
from .configs import topic_entries, topic_settings
from .errors import INVALID_CONFIG, TOPIC_ALREADY_EXISTS, AdminError  # noqa: F401  (tests name them here)
from .handlers import HandlerPart, KafkaHandlers
from .topic_fields import Unmapped

log = logging.getLogger(__name__)

# Kafka error codes used only here (numbers from Apache Kafka's ``Errors`` enum)
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
UNKNOWN_TOPIC_ID = 100

MAX_PARTITIONS = 100_000  # TopicConfig's limit

# API versions registered: (request, response, min, max). kafka-python 3.0.12 uses the
# highest of each; librdkafka 2.16 (confluent-kafka, kcat) sends CreateTopics v4,
# DeleteTopics v4 and CreatePartitions v2. v0 and v1, which Apache
# Kafka 4 dropped, are decoded from the same schemas (tested against aiokafka's structs).
VERSIONS = {
    "create_topics": (CreateTopicsRequest, CreateTopicsResponse, 0, 7),
    "delete_topics": (DeleteTopicsRequest, DeleteTopicsResponse, 0, 6),
    "create_partitions": (CreatePartitionsRequest, CreatePartitionsResponse, 0, 3),
}


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


# -- the handlers ----------------------------------------------------------------------------


class KafkaAdmin(HandlerPart):

    # -- CreateTopics -----------------------------------------------------------------

    def create_topics(self, req: Request, caller: Caller) -> Any:
        body = req.body
        R = CreateTopicsResponse.CreatableTopicResult
        C = R.CreatableTopicConfigs
        results = []
        for t, repeated in _once(body.topics, lambda t: t.name):
            try:
                if repeated:
                    raise _repeated(t.name)
                self.handlers.check(caller.user, "configure", t.name)
                config = self._plan_topic(t)
                if not body.validate_only:
                    self.topics.create_topic(t.name, config.to_mapping())
            except (LogbusError, AdminError, OSError) as e:
                code, message = K.admin_result(e)
                results.append(R(name=t.name, topic_id=None, error_code=code, error_message=message,
                                 num_partitions=-1, replication_factor=-1, configs=None))
                continue
            entries = topic_entries(config, self.streams.topic_defaults)
            configs = [C(name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                         is_sensitive=False) for e in entries]
            results.append(R(name=t.name, topic_id=None, error_code=K.NONE, error_message=None,
                             num_partitions=config.partitions, replication_factor=1, configs=configs))
        return CreateTopicsResponse(throttle_time_ms=0, topics=results)

    def _plan_topic(self, t: Any) -> TopicConfig:
        """The config topic ``t`` would be created with; AdminError or a core error if
        it cannot be."""
        if isinstance(t.name, Unmapped):
            raise AdminError(K.INVALID_TOPIC_EXCEPTION, t.name.reason)
        validate_topic_name(t.name)
        if self.streams.partition_count(t.name) is not None:
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
            partitions = self.streams.topic_defaults.partitions
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise AdminError(INVALID_PARTITIONS, f"Number of partitions must be 1..{MAX_PARTITIONS}, not {partitions}.")
        settings = topic_settings((c.name, c.value) for c in t.configs)
        settings["partitions"] = partitions
        return TopicConfig.from_mapping(settings, base=self.streams.topic_defaults)

    # -- DeleteTopics -----------------------------------------------------------------

    def delete_topics(self, req: Request, caller: Caller) -> Any:
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
                self.handlers.check(caller.user, "configure", name)
                if self.streams.partition_count(name) is None:
                    raise UnknownTopic(f"This server does not host topic {name!r}.")
                self.topics.delete_topic(name)
            except (LogbusError, AdminError, OSError) as e:
                code, message = K.admin_result(e)
                results.append(R(name=name, topic_id=None, error_code=code, error_message=message))
                continue
            results.append(R(name=name, topic_id=None, error_code=K.NONE, error_message=None))
        return DeleteTopicsResponse(throttle_time_ms=0, responses=results)

    # -- CreatePartitions -------------------------------------------------------------

    def create_partitions(self, req: Request, caller: Caller) -> Any:
        body = req.body
        R = CreatePartitionsResponse.CreatePartitionsTopicResult
        results = []
        for t, repeated in _once(body.topics, lambda t: t.name):
            try:
                if repeated:
                    raise _repeated(t.name)
                if not self.handlers.access.topic(caller.user, ALTER, t.name):
                    raise AdminError(K.TOPIC_AUTHORIZATION_FAILED, f"not authorized to alter topic {t.name!r}")
                config = self._plan_growth(t)
                if not body.validate_only:
                    self.topics.grow_topic(t.name, config.partitions)
            except (LogbusError, AdminError, OSError) as e:
                code, message = K.admin_result(e)
                results.append(R(name=t.name, error_code=code, error_message=message))
                continue
            results.append(R(name=t.name, error_code=K.NONE, error_message=None))
        return CreatePartitionsResponse(throttle_time_ms=0, results=results)

    def _plan_growth(self, t: Any) -> TopicConfig:
        current = self.streams.partition_count(t.name)
        if current is None:
            raise UnknownTopic(f"The topic {t.name!r} does not exist.")
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
        config: TopicConfig = replace(self.streams.topic_config(t.name), partitions=t.count)
        return config

def install(handlers: KafkaHandlers) -> None:
    """Register this module's APIs with ``handlers``."""
    admin = KafkaAdmin(handlers)
    for method, (req_cls, resp_cls, lo, hi) in VERSIONS.items():
        fn: Callable[[Request, Caller], Any] = getattr(admin, method)
        handlers.register(req_cls, resp_cls, lo, hi, fn)
