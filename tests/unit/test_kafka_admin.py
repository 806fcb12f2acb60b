"""Kafka admin handlers (CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs)
driven directly: requests encoded by a client library, parsed by the codec, answered by
the handlers over a Broker on a temporary directory, and the encoded responses decoded
again (with kafka-python, and for old versions with aiokafka's hand-written structs, an
independent implementation of the same wire format)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.protocol import admin as aio
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
)

from logbus.core.broker import Broker
from logbus.core.state import CF_METADATA
from logbus.core.log import Record, TopicConfig
from logbus.core.state import topic_key
from logbus.core.state_pb2 import TopicRecord
from logbus.gateway.kafka import admin
from logbus.gateway.kafka.caller import Caller
from logbus.gateway.kafka import configs as kconfigs
from logbus.gateway.kafka import errors as K
from logbus.gateway.kafka.codec import encode_response, parse_request
from logbus.gateway.kafka.handlers import KafkaHandlers
from tests.loop import LoopReactor

ADDR = ("127.0.0.1", 9092)
CT = CreateTopicsRequest.CreatableTopic
CP = CreatePartitionsRequest.CreatePartitionsTopic
DR = DescribeConfigsRequest.DescribeConfigsResource


class Env:
    def __init__(self, data: Path, loop: LoopReactor, defaults: TopicConfig) -> None:
        self.data, self.loop, self.defaults = data, loop, defaults
        self.broker: Broker | None = None
        self.handlers: KafkaHandlers | None = None
        self.start()

    def start(self) -> None:
        self.broker = Broker(self.data, reactor=self.loop, topic_defaults=self.defaults)
        self.broker.start()
        self.handlers = KafkaHandlers(self.broker.doors, self.broker.streams, self.broker.topics, self.broker.access, self.loop)
        admin.install(self.handlers)
        kconfigs.install(self.handlers)

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.stop()
            self.broker = None

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def lm(self) -> Any:
        assert self.broker is not None and self.broker.log is not None
        return self.broker.log

    def frame(self, request: Any, version: int) -> bytes:
        request.API_VERSION = version
        request.with_header(correlation_id=5, client_id="t")
        return bytes(request.encode(header=True))

    def answer_frame(self, frame: bytes) -> tuple[Any, bytes]:
        """Parse with the codec, answer, encode: (response object, response bytes without
        the size prefix)."""
        assert self.handlers is not None
        req = parse_request(frame, self.handlers.supported)
        resp = self.handlers.handle(req, Caller(ADDR, "guest"))
        out = encode_response(req, resp)
        assert struct.unpack(">i", out[:4])[0] == len(out) - 4
        return resp, out[4:]

    def call(self, request: Any, version: int) -> Any:
        """The decoded response, as a kafka-python client would see it."""
        assert self.handlers is not None
        _, data = self.answer_frame(self.frame(request, version))
        resp_cls = self.handlers.supported[request.API_KEY][1]
        return resp_cls.decode(data, version=version, header=True)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path / "data", LoopReactor(), TopicConfig(flush="none", partitions=2))
    yield e
    e.stop()


def create(name: str, partitions: int = -1, rf: int = -1, configs: dict[str, str | None] | None = None,
           assignments: list[Any] | None = None) -> Any:
    C = CT.CreatableTopicConfig
    return CT(name=name, num_partitions=partitions, replication_factor=rf, assignments=assignments or [],
              configs=[C(name=k, value=v) for k, v in (configs or {}).items()])


def create_topics(*topics: Any, validate_only: bool = False) -> Any:
    return CreateTopicsRequest(topics=list(topics), timeout_ms=1000, validate_only=validate_only)


def by_name(results: list[Any]) -> dict[str, Any]:
    return {r.name: r for r in results}


# -- registration -------------------------------------------------------------------------


def test_versions_advertised(env: Env) -> None:
    assert env.handlers is not None
    sup = env.handlers.supported
    assert sup[19][2:] == (0, 7) and sup[20][2:] == (0, 6)
    assert sup[37][2:] == (0, 3) and sup[32][2:] == (0, 4)


# -- CreateTopics -------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(8))
def test_create_topics_every_version(env: Env, version: int) -> None:
    resp = env.call(create_topics(create("a", 3, 1, {"retention.ms": "60000", "flush": "interval:20"}),
                                  create("b")), version)
    got = by_name(resp.topics)
    assert got["a"].error_code == got["b"].error_code == K.NONE
    assert [len(env.lm.topics[n].partitions) for n in "ab"] == [3, 2]  # -1: the broker default
    cfg = env.lm.topics["a"].config
    assert (cfg.retention_ms, cfg.flush, cfg.segment_bytes) == (60000, "interval:20", TopicConfig().segment_bytes)
    if version >= 5:
        assert (got["a"].num_partitions, got["a"].replication_factor) == (3, 1)
        configs = {c.name: c for c in got["a"].configs}
        assert configs["retention.ms"].value == "60000"
        assert configs["retention.ms"].config_source == kconfigs.SOURCE_DYNAMIC_TOPIC
        assert configs["cleanup.policy"].value == "delete"


def test_create_topics_errors(env: Env) -> None:
    env.call(create_topics(create("exists")), 4)
    resp = env.call(create_topics(
        create("exists"),
        create("bad/name"),
        create("rf3", 1, 3),
        create("rf0", 1, 0),
        create("zero", 0),
        create("huge", 100_001),
        create("cfg", configs={"retention.ms": "soon"}),
        create("unknowncfg", configs={"min.compaction.lag.ms": "5"}),
        create("compact", configs={"cleanup.policy": "compact"}),
        create("nullcfg", configs={"segment.ms": None}),
        create("fine", 1, 1, {"cleanup.policy": "delete", "segment.bytes": "4096"}),
        create("dup"), create("dup"),
        create("badassign", assignments=[CT.CreatableReplicaAssignment(partition_index=0, broker_ids=[7])]),
    ), 7)
    got = {r.name: (r.error_code, r.error_message) for r in resp.topics}
    assert got["exists"] == (admin.TOPIC_ALREADY_EXISTS, "Topic 'exists' already exists.")
    assert got["bad/name"][0] == K.INVALID_TOPIC_EXCEPTION and "illegal" in got["bad/name"][1]
    assert got["rf3"] == (admin.INVALID_REPLICATION_FACTOR, "Replication factor: 3 larger than available brokers: 1.")
    assert got["rf0"] == (admin.INVALID_REPLICATION_FACTOR,
                          "Replication factor must be larger than 0, or -1 to use the default value.")
    assert got["zero"][0] == got["huge"][0] == admin.INVALID_PARTITIONS
    assert got["cfg"] == (admin.INVALID_CONFIG, "retention.ms must be an integer, not 'soon'")
    assert got["unknowncfg"][0] == admin.INVALID_CONFIG and "min.compaction.lag.ms" in got["unknowncfg"][1]
    assert got["compact"][0] == admin.INVALID_CONFIG and "compact" in got["compact"][1]
    assert got["nullcfg"][0] == K.INVALID_REQUEST
    assert got["fine"] == (K.NONE, None)
    assert got["dup"][0] == K.INVALID_REQUEST and len([r for r in resp.topics if r.name == "dup"]) == 1
    assert got["badassign"][0] == admin.INVALID_REPLICA_ASSIGNMENT
    assert sorted(env.lm.topics) == ["exists", "fine"]
    assert env.lm.topics["fine"].config.segment_bytes == 4096


def test_create_topics_logbus_limits_are_invalid_config(env: Env) -> None:
    resp = env.call(create_topics(create("small", configs={"segment.bytes": "100"}),
                                  create("flushy", configs={"flush": "sometimes"})), 7)
    got = {r.name: (r.error_code, r.error_message) for r in resp.topics}
    assert got["small"] == (admin.INVALID_CONFIG, "segment.bytes must be at least 1024")
    assert got["flushy"][0] == admin.INVALID_CONFIG and "flush must be" in got["flushy"][1]
    assert env.lm.topics == {}


def test_create_topics_validate_only(env: Env) -> None:
    resp = env.call(create_topics(create("v", 4, configs={"retention.bytes": "99999"}), create("x", 1, 2),
                                  validate_only=True), 7)
    got = by_name(resp.topics)
    assert got["v"].error_code == K.NONE and got["v"].num_partitions == 4
    assert {c.name: c.value for c in got["v"].configs}["retention.bytes"] == "99999"
    assert got["x"].error_code == admin.INVALID_REPLICATION_FACTOR
    assert env.lm.topics == {}
    assert env.broker is not None and env.broker.state is not None
    assert env.broker.state.get(CF_METADATA, topic_key("v")) is None


def test_create_topics_manual_assignment(env: Env) -> None:
    A = CT.CreatableReplicaAssignment
    ok = create("m", assignments=[A(partition_index=i, broker_ids=[0]) for i in (1, 0, 2)])
    gap = create("g", assignments=[A(partition_index=i, broker_ids=[0]) for i in (0, 2)])
    both = create("b", 3, assignments=[A(partition_index=0, broker_ids=[0])])
    got = by_name(env.call(create_topics(ok, gap, both), 7).topics)
    assert got["m"].error_code == K.NONE and len(env.lm.topics["m"].partitions) == 3
    assert got["g"].error_code == admin.INVALID_REPLICA_ASSIGNMENT
    assert got["b"].error_code == K.INVALID_REQUEST


# -- DeleteTopics -------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(7))
def test_delete_topics_every_version(env: Env, version: int) -> None:
    env.call(create_topics(create("gone"), create("kept")), 7)
    if version >= 6:
        S = DeleteTopicsRequest.DeleteTopicState
        req = DeleteTopicsRequest(topics=[S(name="gone"), S(name="never")], timeout_ms=1000)
    else:
        req = DeleteTopicsRequest(topic_names=["gone", "never"], timeout_ms=1000)
    got = by_name(env.call(req, version).responses)
    assert got["gone"].error_code == K.NONE
    assert got["never"].error_code == K.UNKNOWN_TOPIC_OR_PARTITION
    if version >= 5:
        assert "never" in got["never"].error_message
    assert sorted(env.lm.topics) == ["kept"]
    env.restart()
    assert sorted(env.lm.topics) == ["kept"]


def test_delete_topics_by_id_and_duplicates(env: Env) -> None:
    import uuid

    env.call(create_topics(create("d")), 7)
    S = DeleteTopicsRequest.DeleteTopicState
    tid = uuid.UUID(int=42)
    resp = env.call(DeleteTopicsRequest(topics=[S(name=None, topic_id=tid), S(name="d"), S(name="d")],
                                        timeout_ms=1), 6)
    assert [(r.name, r.topic_id, r.error_code) for r in resp.responses] == [
        (None, tid, admin.UNKNOWN_TOPIC_ID), ("d", None, K.INVALID_REQUEST)]
    assert "d" in env.lm.topics


# -- CreatePartitions ---------------------------------------------------------------------


@pytest.mark.parametrize("version", range(4))
def test_create_partitions_grows_and_persists(env: Env, version: int) -> None:
    env.call(create_topics(create("g", 2, configs={"retention.ms": "5000"})), 7)
    resp = env.call(CreatePartitionsRequest(topics=[CP(name="g", count=5, assignments=None)], timeout_ms=1000,
                                            validate_only=False), version)
    assert [(r.name, r.error_code, r.error_message) for r in resp.results] == [("g", K.NONE, None)]
    topic = env.lm.topics["g"]
    assert len(topic.partitions) == 5 and topic.config.partitions == 5 and topic.config.retention_ms == 5000
    assert env.broker is not None
    result = env.loop.wait(env.broker.append("g", 4, [Record(b"k", b"v")]))
    assert result.base_offset == 0
    assert env.broker.state is not None
    rec = env.broker.state.get_msg(CF_METADATA, topic_key("g"), TopicRecord)
    assert rec is not None and rec.partitions == 5 and rec.config["retention.ms"] == "5000"
    env.restart()
    topic = env.lm.topics["g"]
    assert len(topic.partitions) == 5 and topic.config.retention_ms == 5000
    assert topic.partitions[4].high_watermark == 1


def test_create_partitions_errors_and_validate_only(env: Env) -> None:
    env.call(create_topics(create("t", 3)), 7)
    A = CP.CreatePartitionsAssignment
    resp = env.call(CreatePartitionsRequest(topics=[
        CP(name="t", count=3, assignments=None),
        CP(name="missing", count=4, assignments=None),
        CP(name="dup", count=4, assignments=None), CP(name="dup", count=5, assignments=None),
    ], timeout_ms=1000, validate_only=False), 3)
    got = {r.name: (r.error_code, r.error_message) for r in resp.results}
    assert got["t"] == (admin.INVALID_PARTITIONS,
                        "Topic currently has 3 partitions, which is equal to the requested 3.")
    assert got["missing"][0] == K.UNKNOWN_TOPIC_OR_PARTITION
    assert got["dup"][0] == K.INVALID_REQUEST
    resp = env.call(CreatePartitionsRequest(topics=[CP(name="t", count=2, assignments=None)], timeout_ms=1,
                                            validate_only=False), 3)
    assert resp.results[0].error_code == admin.INVALID_PARTITIONS and "higher than" in resp.results[0].error_message
    resp = env.call(CreatePartitionsRequest(topics=[CP(name="t", count=5, assignments=[A(broker_ids=[0])])],
                                            timeout_ms=1, validate_only=False), 3)
    assert resp.results[0].error_code == admin.INVALID_REPLICA_ASSIGNMENT
    resp = env.call(CreatePartitionsRequest(topics=[CP(name="t", count=9, assignments=None)], timeout_ms=1,
                                            validate_only=True), 3)
    assert resp.results[0].error_code == K.NONE
    assert len(env.lm.topics["t"].partitions) == 3
    resp = env.call(CreatePartitionsRequest(topics=[CP(name="t", count=5, assignments=[A(broker_ids=[0])] * 2)],
                                            timeout_ms=1, validate_only=False), 3)
    assert resp.results[0].error_code == K.NONE and len(env.lm.topics["t"].partitions) == 5


@pytest.mark.pure_only
def test_create_partitions_failure_restores_the_record(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    env.call(create_topics(create("f", 2)), 7)

    def disk_full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(env.lm, "open_topic", disk_full)
    resp = env.call(CreatePartitionsRequest(topics=[CP(name="f", count=4, assignments=None)], timeout_ms=1,
                                            validate_only=False), 3)
    assert resp.results[0].error_code == K.KAFKA_STORAGE_ERROR
    assert "No space left" in resp.results[0].error_message
    assert env.broker is not None and env.broker.state is not None
    rec = env.broker.state.get_msg(CF_METADATA, topic_key("f"), TopicRecord)
    assert rec is not None and rec.partitions == 2
    monkeypatch.undo()
    env.restart()
    assert len(env.lm.topics["f"].partitions) == 2


# -- DescribeConfigs ----------------------------------------------------------------------


def describe(*resources: tuple[int, str, list[str] | None], synonyms: bool = False, docs: bool = False) -> Any:
    return DescribeConfigsRequest(
        resources=[DR(resource_type=t, resource_name=n, configuration_keys=k) for t, n, k in resources],
        include_synonyms=synonyms, include_documentation=docs)


@pytest.mark.parametrize("version", range(5))
def test_describe_configs_every_version(env: Env, version: int) -> None:
    env.call(create_topics(create("c", 1, configs={"retention.ms": "1234", "flush": "sync"})), 7)
    resp = env.call(describe((2, "c", None), (2, "nope", None), (4, "0", ["num.partitions", "broker.id"]),
                             (4, "3", None), (8, "0", None), synonyms=True, docs=True), version)
    topic, missing, broker, other_broker, logger = resp.results
    assert (topic.error_code, topic.resource_type, topic.resource_name) == (K.NONE, 2, "c")
    entries = {c.name: c for c in topic.configs}
    assert set(entries) == {"flush", "segment.bytes", "segment.ms", "retention.ms", "retention.bytes",
                            "max.message.bytes", "index.interval.bytes", "cleanup.policy",
                            "remote.storage.enable", "local.retention.ms", "local.retention.bytes"}
    assert entries["retention.ms"].value == "1234"
    assert (entries["remote.storage.enable"].value, entries["local.retention.ms"].value) == ("false", "-2")
    assert entries["flush"].value == "sync"  # differs from the broker's default ("none")
    assert entries["segment.bytes"].value == str(TopicConfig().segment_bytes)
    assert entries["cleanup.policy"].value == "delete" and not entries["cleanup.policy"].read_only  # may be set to delete
    if version == 0:
        assert not entries["retention.ms"].is_default and entries["segment.bytes"].is_default
    else:
        assert entries["retention.ms"].config_source == kconfigs.SOURCE_DYNAMIC_TOPIC
        assert entries["segment.bytes"].config_source == kconfigs.SOURCE_DEFAULT
        assert [(s.name, s.value, s.source) for s in entries["flush"].synonyms] == [
            ("flush", "sync", kconfigs.SOURCE_DYNAMIC_TOPIC), ("flush", "none", kconfigs.SOURCE_STATIC_BROKER),
            ("flush", "sync", kconfigs.SOURCE_DEFAULT)]
    if version >= 3:
        assert entries["retention.ms"].config_type == kconfigs.TYPE_LONG
        assert entries["retention.ms"].documentation
    assert missing.error_code == K.UNKNOWN_TOPIC_OR_PARTITION and "nope" in missing.error_message
    assert broker.error_code == K.NONE
    assert {c.name: (c.value, c.read_only) for c in broker.configs} == {"num.partitions": ("2", True),
                                                                         "broker.id": ("0", True)}
    assert other_broker.error_code == K.INVALID_REQUEST
    assert logger.error_code == K.INVALID_REQUEST


def test_describe_configs_broker_defaults(env: Env) -> None:
    resp = env.call(describe((4, "0", None), synonyms=False), 4)
    entries = {c.name: c for c in resp.results[0].configs}
    assert entries["auto.create.topics.enable"].value == "true"
    assert entries["auto.create.topics.enable"].config_type == kconfigs.TYPE_BOOLEAN
    assert entries["num.partitions"].config_source == kconfigs.SOURCE_STATIC_BROKER  # 2, not Kafka's 1
    assert entries["log.retention.ms"].config_source == kconfigs.SOURCE_DEFAULT
    assert all(c.read_only and c.synonyms == [] and c.documentation is None for c in entries.values())


# -- old versions, decoded by an independent implementation (aiokafka's structs) ---------


def aio_frame(struct_obj: Any) -> bytes:
    client = b"t"
    head = struct.pack(">hhih", struct_obj.API_KEY, struct_obj.API_VERSION, 9, len(client)) + client
    return head + struct_obj.encode()


def aio_answer(env: Env, request: Any) -> Any:
    _, data = env.answer_frame(aio_frame(request))
    assert struct.unpack(">i", data[:4])[0] == 9  # correlation id (response header v0)
    return request.RESPONSE_TYPE.decode(data[4:])


def test_old_versions_against_aiokafka_structs(env: Env) -> None:
    resp = aio_answer(env, aio.CreateTopicsRequest_v0([("o", 3, 1, [], [("retention.ms", "777")]),
                                                       ("o2", 1, 2, [], [])], 1000))
    assert resp.topic_errors == [("o", 0), ("o2", admin.INVALID_REPLICATION_FACTOR)]
    resp = aio_answer(env, aio.CreateTopicsRequest_v1([("o", 1, 1, [], [])], 1000, False))
    assert resp.topic_errors == [("o", admin.TOPIC_ALREADY_EXISTS, "Topic 'o' already exists.")]
    assert env.lm.topics["o"].config.retention_ms == 777

    resp = aio_answer(env, aio.CreatePartitionsRequest_v0([("o", (4, [])), ("zz", (2, []))], 1000, False))
    assert resp.throttle_time_ms == 0
    assert resp.topic_errors[0] == ("o", 0, None) and resp.topic_errors[1][:2] == ("zz", 3)
    assert len(env.lm.topics["o"].partitions) == 4

    resp = aio_answer(env, aio.DescribeConfigsRequest_v0([(2, "o", ["retention.ms", "segment.ms"])]))
    (err, msg, rtype, rname, entries), = resp.resources
    assert (err, msg, rtype, rname) == (0, None, 2, "o")
    assert entries == [("segment.ms", str(TopicConfig().segment_ms), False, True, False),
                       ("retention.ms", "777", False, False, False)]
    resp = aio_answer(env, aio.DescribeConfigsRequest_v1([(2, "o", None)], True))
    (err, msg, rtype, rname, entries), = resp.resources
    assert err == 0 and {e[0]: e[1] for e in entries}["retention.ms"] == "777"

    resp = aio_answer(env, aio.DeleteTopicsRequest_v0(["o", "zz"], 1000))
    assert resp.topic_error_codes == [("o", 0), ("zz", K.UNKNOWN_TOPIC_OR_PARTITION)]
    resp = aio_answer(env, aio.DeleteTopicsRequest_v1(["o"], 1000))
    assert resp.throttle_time_ms == 0 and resp.topic_error_codes == [("o", K.UNKNOWN_TOPIC_OR_PARTITION)]


# -- topic names Kafka clients cannot use (gateway/kafka/names.py) ----------------------


@pytest.mark.parametrize("version", [4, 7])
def test_admin_requests_name_topics_by_their_kafka_names(env: Env, version: int) -> None:
    resp = env.call(create_topics(create("logbus-dlq-g"), create("logbus-x-a_20b"), create("logbus-x-ab"),
                                  create("%DLQ%g"), create("logbus-x-_2F")), version)
    got = {r.name: (r.error_code, r.error_message) for r in resp.topics}
    assert got["logbus-dlq-g"][0] == got["logbus-x-a_20b"][0] == K.NONE
    assert sorted(env.lm.topics) == ["%DLQ%g", "a b"]
    assert got["logbus-x-ab"][0] == K.INVALID_TOPIC_EXCEPTION and "names no logbus topic" in got["logbus-x-ab"][1]
    assert got["%DLQ%g"][0] == K.INVALID_TOPIC_EXCEPTION and "illegal" in got["%DLQ%g"][1]
    assert got["logbus-x-_2F"][0] == K.INVALID_TOPIC_EXCEPTION  # "/": no logbus topic may be named so
    again = env.call(create_topics(create("logbus-dlq-g")), version).topics[0]
    assert (again.name, again.error_code) == ("logbus-dlq-g", admin.TOPIC_ALREADY_EXISTS)
    [described] = env.call(describe((2, "logbus-x-a_20b", ["retention.ms"])), 4).results
    assert (described.error_code, described.resource_name) == (K.NONE, "logbus-x-a_20b")
    resp = env.call(CreatePartitionsRequest(topics=[CP(name="logbus-dlq-g", count=3, assignments=None)],
                                            timeout_ms=1, validate_only=False), 3)
    assert [(r.name, r.error_code) for r in resp.results] == [("logbus-dlq-g", K.NONE)]
    assert len(env.lm.topics["%DLQ%g"].partitions) == 3
    deleted = env.call(DeleteTopicsRequest(topic_names=["logbus-x-a_20b", "a b"], timeout_ms=1), 4)
    assert [(r.name, r.error_code) for r in deleted.responses] == [
        ("logbus-x-a_20b", K.NONE), ("a b", K.UNKNOWN_TOPIC_OR_PARTITION)]
    assert sorted(env.lm.topics) == ["%DLQ%g"]
