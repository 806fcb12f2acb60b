"""AlterConfigs (33) and IncrementalAlterConfigs (44) against a real ``logbus serve``:
topic settings change on the live partitions and survive a restart; with kafka-python,
aiokafka and confluent-kafka."""

from __future__ import annotations

import asyncio
from typing import Any

import kafka.errors as Errors
import pytest
from kafka import KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.admin._configs import AlterConfigOp
from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

from tests.integration.test_kafka_admin import admin_client
from tests.kafka_wire import Wire
from tests.serverproc import LogbusServer

TOPIC = ConfigResourceType.TOPIC
INVALID_CONFIG = Errors.InvalidConfigurationError.errno
INVALID_REQUEST = Errors.InvalidRequestError.errno


def modified(admin: Any, topic: str) -> dict[str, str]:
    described = admin.describe_configs([ConfigResource(TOPIC, topic)])["topic"][topic]
    return {k: v["value"] for k, v in described.items()}


def send_value(server: LogbusServer, topic: str, size: int) -> None:
    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks="all", max_request_size=1 << 20,
                      retries=0)
    try:
        p.send(topic, value=b"x" * size).get(timeout=10)
    finally:
        p.close()


def test_incremental_alter_configs(logbus_server: Any) -> None:
    server = logbus_server()
    admin = admin_client(server)
    try:
        admin.create_topics({"tuned": {"configs": {"flush": "none", "retention.ms": "3600000"}}})
        result = admin.alter_configs([ConfigResource(TOPIC, "tuned", {
            "retention.bytes": "1048576",
            "max.message.bytes": "2000",
            "flush": (AlterConfigOp.DELETE, None),
            "cleanup.policy": (AlterConfigOp.APPEND, "delete"),
        })])
        assert result == {"topic": {"tuned": "OK"}}
        assert modified(admin, "tuned") == {"retention.ms": "3600000", "retention.bytes": "1048576",
                                            "max.message.bytes": "2000"}  # flush: back to the default
        # the live partition follows: a batch over max.message.bytes is refused now
        with pytest.raises(Errors.MessageSizeTooLargeError):
            send_value(server, "tuned", 5000)
        send_value(server, "tuned", 100)

        # validate_only: the same answer, nothing changed
        dry = admin.alter_configs([ConfigResource(TOPIC, "tuned", {"retention.ms": "60000"})], validate_only=True)
        assert dry == {"topic": {"tuned": "OK"}}
        assert modified(admin, "tuned")["retention.ms"] == "3600000"
    finally:
        admin.close()

    assert server.stop() == 0
    server.restart()
    admin = admin_client(server)
    try:
        assert modified(admin, "tuned") == {"retention.ms": "3600000", "retention.bytes": "1048576",
                                            "max.message.bytes": "2000"}
        with pytest.raises(Errors.MessageSizeTooLargeError):
            send_value(server, "tuned", 5000)
    finally:
        admin.close()


def test_incremental_alter_configs_errors(logbus_server: Any) -> None:
    """Each resource gets its own error, in Kafka's terms; nothing changes on an error."""
    server = logbus_server()
    admin = admin_client(server)
    admin.create_topics(["strict"])
    admin.close()
    E = IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig

    def alter(resources: list[tuple[int, str, list[tuple[str, int, str | None]]]], validate: bool = False) -> Any:
        R = IncrementalAlterConfigsRequest.AlterConfigsResource
        req = IncrementalAlterConfigsRequest(validate_only=validate, resources=[
            R(resource_type=t, resource_name=n, configs=[E(name=k, config_operation=op, value=v) for k, op, v in cs])
            for t, n, cs in resources])
        with Wire(server) as wire:
            responses = wire.call(req, IncrementalAlterConfigsResponse, 1).responses
        return [(r.resource_name, r.error_code) for r in responses]

    SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
    assert alter([
        (2, "strict", [("retention.ms", SET, "soon")]),
        (2, "nowhere", [("retention.ms", SET, "1000")]),
    ]) == [("strict", INVALID_CONFIG), ("nowhere", Errors.UnknownTopicOrPartitionError.errno)]
    assert alter([(2, "strict", [("unclean.leader.election.enable", SET, "true")])]) == [("strict", INVALID_CONFIG)]
    assert alter([(2, "strict", [("retention.ms", APPEND, "5")])]) == [("strict", INVALID_CONFIG)]
    assert alter([(2, "strict", [("cleanup.policy", APPEND, "compact")])]) == [("strict", INVALID_CONFIG)]
    assert alter([(2, "strict", [("cleanup.policy", SUBTRACT, "delete")])]) == [("strict", INVALID_CONFIG)]
    assert alter([(2, "strict", [("retention.ms", SET, None)])]) == [("strict", INVALID_REQUEST)]
    assert alter([(2, "strict", [("retention.ms", SET, "1000"), ("retention.ms", DELETE, None)])]) == [
        ("strict", INVALID_REQUEST)]
    assert alter([(2, "strict", [("retention.ms", 9, "1")])]) == [("strict", INVALID_REQUEST)]
    # a broker resource: logbus has no dynamic broker configs (an error, not a crash)
    assert alter([(4, "0", [("log.retention.ms", SET, "1000")])]) == [("0", INVALID_REQUEST)]
    assert alter([(2, "strict", [("retention.ms", SET, "1000"), ("segment.bytes", SET, "10")])]) == [
        ("strict", INVALID_CONFIG)]  # all or nothing
    admin = admin_client(server)
    try:
        assert modified(admin, "strict") == {}
    finally:
        admin.close()


def test_alter_configs_replaces_the_set(logbus_server: Any) -> None:
    """Non-incremental AlterConfigs sets exactly the given settings: the others go back to
    their defaults (as in Kafka)."""
    server = logbus_server()
    admin = admin_client(server)
    try:
        admin.create_topics({"whole": {"configs": {"retention.ms": "3600000", "flush": "none"}}})
        result = admin.alter_configs([ConfigResource(TOPIC, "whole", {"segment.ms": "60000"})],
                                     incremental=False)
        assert result == {"topic": {"whole": "OK"}}
        # kafka-python fills in the other modified keys itself before a non-incremental alter
        assert modified(admin, "whole") == {"retention.ms": "3600000", "flush": "none", "segment.ms": "60000"}
    finally:
        admin.close()

    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource as AioCR
    from aiokafka.admin.config_resource import ConfigResourceType as AioType

    async def alter() -> Any:
        a = AIOKafkaAdminClient(bootstrap_servers=server.addresses["kafka"])
        await a.start()
        try:
            return await a.alter_configs([AioCR(AioType.TOPIC, "whole", {"retention.bytes": "2097152"})])
        finally:
            await a.close()

    (response,) = asyncio.run(alter())
    assert [(r[0], r[3]) for r in response.resources] == [(0, "whole")]
    admin = admin_client(server)
    try:
        assert modified(admin, "whole") == {"retention.bytes": "2097152"}
    finally:
        admin.close()


def test_librdkafka_incremental_alter_configs(logbus_server: Any) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry
    from confluent_kafka.admin import ConfigResource as CR

    server = logbus_server()
    a = AdminClient({"bootstrap.servers": server.addresses["kafka"]})
    admin = admin_client(server)
    try:
        admin.create_topics(["rd-tuned"])
        res = CR("topic", "rd-tuned", incremental_configs=[
            ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET)])
        (future,) = a.incremental_alter_configs([res], request_timeout=10).values()
        future.result(timeout=10)
        assert modified(admin, "rd-tuned") == {"retention.ms": "120000"}
    finally:
        admin.close()
