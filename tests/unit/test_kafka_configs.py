"""AlterConfigs and IncrementalAlterConfigs: the pure translation of the requests'
operations into topic settings (with Hypothesis), and the handlers in memory over a
Broker on a temporary directory, every registered version, decoded by kafka-python."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.admin import (
    AlterConfigsRequest,
    DeleteRecordsRequest,
    IncrementalAlterConfigsRequest,
)

from logbus.core.log import TopicConfig
from logbus.gateway.kafka import errors as K
from logbus.gateway.kafka import operations, records_admin
from logbus.gateway.kafka.configs import (
    ACCEPTED_CONFIGS,
    APPEND,
    DELETE,
    SET,
    SUBTRACT,
    incremental_settings,
    replacement_settings,
)
from logbus.gateway.kafka.errors import AdminError
from tests.loop import LoopReactor
from tests.unit.test_kafka_admin import Env, create, create_topics

SETTINGS = [n for n in ACCEPTED_CONFIGS if n != "cleanup.policy"]
NAMES = st.sampled_from([*ACCEPTED_CONFIGS, "unclean.leader.election.enable", "compression.type"])
VALUES = st.one_of(st.none(), st.sampled_from(["delete", "compact", "delete,compact", "1000", "-1", "none", ""]),
                   st.text(max_size=5))
OPS = st.lists(st.tuples(NAMES, st.integers(-1, 4), VALUES), max_size=6)


@given(OPS)
def test_incremental_operations_give_known_settings_or_a_kafka_error(ops: list[tuple[str, int, str | None]]) -> None:
    try:
        changes = incremental_settings(ops)
    except AdminError as e:
        assert e.code in (K.INVALID_REQUEST, K.INVALID_CONFIG) and e.message
        names = [n for n, _, _ in ops]
        if len(set(names)) < len(names):
            assert e.code == K.INVALID_REQUEST  # a key named twice
        return
    assert set(changes) <= set(SETTINGS)
    for name, op, value in ops:
        assert op in (SET, DELETE, APPEND, SUBTRACT)
        if name in changes:
            assert op in (SET, DELETE) and changes[name] == (value if op == SET else None)
        else:
            assert name == "cleanup.policy"


def test_incremental_operations_in_kafka_terms() -> None:
    assert incremental_settings([("retention.ms", SET, "5"), ("flush", DELETE, None)]) == {
        "retention.ms": "5", "flush": None}
    assert incremental_settings([("cleanup.policy", APPEND, "delete")]) == {}

    def code(ops: list[tuple[str, int, str | None]]) -> int:
        with pytest.raises(AdminError) as e:
            incremental_settings(ops)
        return e.value.code

    assert code([("retention.ms", APPEND, "5")]) == K.INVALID_CONFIG  # not a list setting
    assert code([("cleanup.policy", APPEND, "compact")]) == K.INVALID_CONFIG
    assert code([("cleanup.policy", SUBTRACT, "delete")]) == K.INVALID_CONFIG  # nothing left
    assert code([("retention.ms", SET, None)]) == K.INVALID_REQUEST
    assert code([("retention.ms", 7, "1")]) == K.INVALID_REQUEST
    assert code([("a.b", SET, "1")]) == K.INVALID_CONFIG


def test_replacement_puts_every_other_setting_back() -> None:
    changes = replacement_settings([("retention.ms", "5"), ("cleanup.policy", "delete")])
    assert changes == {**dict.fromkeys(SETTINGS), "retention.ms": "5"}
    with pytest.raises(AdminError):
        replacement_settings([("retention.ms", "5"), ("retention.ms", "6")])


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path / "data", LoopReactor(), TopicConfig(flush="none", partitions=1))
    assert e.handlers is not None
    records_admin.install(e.handlers)
    yield e
    e.stop()


def alter(*resources: tuple[int, str, dict[str, str | None]], validate: bool = False) -> Any:
    R = AlterConfigsRequest.AlterConfigsResource
    return AlterConfigsRequest(validate_only=validate, resources=[
        R(resource_type=t, resource_name=n, configs=[R.AlterableConfig(name=k, value=v) for k, v in c.items()])
        for t, n, c in resources])


def incremental(*resources: tuple[int, str, list[tuple[str, int, str | None]]], validate: bool = False) -> Any:
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    return IncrementalAlterConfigsRequest(validate_only=validate, resources=[
        R(resource_type=t, resource_name=n,
          configs=[R.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])
        for t, n, ops in resources])


def codes(resp: Any) -> list[tuple[int, str, int]]:
    return [(r.resource_type, r.resource_name, r.error_code) for r in resp.responses]


@pytest.mark.parametrize("version", range(3))
def test_alter_configs_every_version(env: Env, version: int) -> None:
    env.call(create_topics(create("t", configs={"retention.ms": "1234", "flush": "sync"})), 7)
    resp = env.call(alter((2, "t", {"segment.ms": "60000"}), (2, "nope", {}), (4, "0", {"x": "1"}),
                          (4, "0", {}), (32, "g", {})), version)
    assert codes(resp) == [(2, "t", 0), (2, "nope", K.UNKNOWN_TOPIC_OR_PARTITION), (4, "0", K.INVALID_REQUEST),
                           (4, "0", 0), (32, "g", K.INVALID_REQUEST)]
    config = env.lm.topic("t").config
    assert config.segment_ms == 60000 and config.retention_ms == TopicConfig().retention_ms
    assert config.flush == "none"  # back to the broker's default
    assert env.lm.partition("t", 0).config == config


@pytest.mark.parametrize("version", range(2))
def test_incremental_alter_configs_every_version_and_restart(env: Env, version: int) -> None:
    env.call(create_topics(create("t")), 7)
    resp = env.call(incremental((2, "t", [("retention.bytes", SET, "4096"), ("flush", SET, "interval:10")]),
                                (2, "t", [("segment.bytes", SET, "10")])), version)
    assert codes(resp) == [(2, "t", 0), (2, "t", K.INVALID_CONFIG)]
    assert "segment.bytes must be at least 1024" in resp.responses[1].error_message
    dry = env.call(incremental((2, "t", [("retention.bytes", DELETE, None)]), validate=True), version)
    assert codes(dry) == [(2, "t", 0)] and env.lm.topic("t").config.retention_bytes == 4096
    env.restart()
    config = env.lm.topic("t").config
    assert (config.retention_bytes, config.flush) == (4096, "interval:10")


def test_authorized_operations_bitfields() -> None:
    """The 32-bit values Kafka answers without an authorizer."""
    assert operations.bitfield(operations.GROUP_OPERATIONS) == 328
    assert operations.bitfield(operations.TOPIC_OPERATIONS) == 3576
    assert operations.bitfield(operations.CLUSTER_OPERATIONS) == 8096


@pytest.mark.parametrize("version", range(3))
def test_delete_records_every_version(env: Env, version: int) -> None:
    from logbus.core.log import Record

    env.call(create_topics(create("t")), 7)
    p = env.lm.partition("t", 0)
    for i in range(5):
        p.append([Record(None, b"%d" % i)])
    while env.loop.run_once():
        pass
    T = DeleteRecordsRequest.DeleteRecordsTopic
    req = DeleteRecordsRequest(timeout_ms=1000, topics=[
        T(name="t", partitions=[T.DeleteRecordsPartition(partition_index=0, offset=3),
                                T.DeleteRecordsPartition(partition_index=1, offset=3)]),
        T(name="nope", partitions=[T.DeleteRecordsPartition(partition_index=0, offset=1)])])
    resp = env.call(req, version)
    got = [(t.name, p.partition_index, p.low_watermark, p.error_code) for t in resp.topics for p in t.partitions]
    assert got == [("t", 0, 3, 0), ("t", 1, -1, K.UNKNOWN_TOPIC_OR_PARTITION),
                   ("nope", 0, -1, K.UNKNOWN_TOPIC_OR_PARTITION)]
