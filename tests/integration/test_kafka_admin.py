"""Kafka admin APIs against a real ``logbus serve``: kafka-python's KafkaAdminClient
(CreateTopics v7, DeleteTopics v6, CreatePartitions v3, DescribeConfigs v4) and
confluent-kafka's AdminClient (librdkafka, the library kcat uses: older versions)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka.errors as Errors
import pytest
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from tests.serverproc import LogbusServer, ServerFactory


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    factory = ServerFactory(Path(tmp_path_factory.mktemp("kafka_admin")))
    try:
        yield factory.start(args=["--default-partitions", "2"])
    finally:
        factory.cleanup()


def admin_client(server: LogbusServer) -> KafkaAdminClient:
    try:
        return KafkaAdminClient(bootstrap_servers=server.addresses["kafka"], request_timeout_ms=10_000,
                                bootstrap_timeout_ms=10_000)
    except Errors.KafkaError as e:
        raise AssertionError(f"admin client could not connect ({e!r}); server log:\n{server.log_text()}") from e


@pytest.fixture(scope="module")
def client(server: LogbusServer) -> Iterator[KafkaAdminClient]:
    c = admin_client(server)
    try:
        yield c
    finally:
        c.close()


def errors_of(result: dict[str, Any], key: str = "topics") -> dict[str, int]:
    return {t["name"]: t["error_code"] for t in result[key]}


def partitions_of(client: KafkaAdminClient, topic: str) -> int:
    (t,) = client.describe_topics([topic])
    assert t["error_code"] == 0
    return len(t["partitions"])


def produce(server: LogbusServer, topic: str, partition: int, n: int) -> list[int]:
    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks="all", enable_idempotence=False)
    try:
        futures = [p.send(topic, value=b"v%d" % i, partition=partition) for i in range(n)]
        p.flush()
        return [f.get(timeout=10).offset for f in futures]
    finally:
        p.close()


def test_create_list_and_describe(client: KafkaAdminClient) -> None:
    result = client.create_topics({
        "orders": {"num_partitions": 3, "replication_factor": 1,
                   "configs": {"retention.ms": "3600000", "flush": "interval:20", "cleanup.policy": "delete"}},
        "events": {},  # -1 partitions: the broker's default (2)
    })
    assert errors_of(result) == {"orders": 0, "events": 0}
    orders = {t["name"]: t for t in result["topics"]}["orders"]
    assert orders["num_partitions"] == 3 and orders["configs"]["retention.ms"]["value"] == "3600000"
    assert {"orders", "events"} <= set(client.list_topics())
    assert partitions_of(client, "orders") == 3 and partitions_of(client, "events") == 2

    modified = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "orders")])
    assert {k: v["value"] for k, v in modified["topic"]["orders"].items()} == {
        "retention.ms": "3600000", "flush": "interval:20"}
    everything = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "orders")],
                                         include_synonyms=True, config_filter="all")["topic"]["orders"]
    assert everything["cleanup.policy"]["value"] == "delete"
    assert everything["segment.bytes"]["value"] == str(128 * 1024 * 1024)
    assert everything["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    assert set(everything) >= {"segment.ms", "retention.bytes", "max.message.bytes", "index.interval.bytes"}
    picked = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "orders", ["retention.ms"])],
                                     config_filter="all")["topic"]["orders"]
    assert list(picked) == ["retention.ms"]

    broker = client.describe_configs([ConfigResource(ConfigResourceType.BROKER, "0")],
                                     config_filter="all")["broker"]["0"]
    assert broker["auto.create.topics.enable"]["value"] == "true"
    assert broker["num.partitions"]["value"] == "2" and broker["num.partitions"]["read_only"]


def test_create_topic_errors(client: KafkaAdminClient) -> None:
    client.create_topics(["taken"])
    with pytest.raises(Errors.TopicAlreadyExistsError):
        client.create_topics(["taken"])
    cases = {
        "taken": {},
        "bad/name": {},
        "rf3": {"num_partitions": 1, "replication_factor": 3},
        "zero": {"num_partitions": 0, "replication_factor": 1},
        "badvalue": {"configs": {"retention.ms": "forever"}},
        "compacted": {"configs": {"cleanup.policy": "compact"}},
        "unknowncfg": {"configs": {"unclean.leader.election.enable": "true"}},
    }
    result = client.create_topics(cases, raise_errors=False)
    assert errors_of(result) == {
        "taken": Errors.TopicAlreadyExistsError.errno,
        "bad/name": Errors.InvalidTopicError.errno,
        "rf3": Errors.InvalidReplicationFactorError.errno,
        "zero": Errors.InvalidPartitionsError.errno,
        "badvalue": Errors.InvalidConfigurationError.errno,
        "compacted": Errors.InvalidConfigurationError.errno,
        "unknowncfg": Errors.InvalidConfigurationError.errno,
    }
    messages = {t["name"]: t["error_message"] for t in result["topics"]}
    assert messages["badvalue"] == "retention.ms must be an integer, not 'forever'"
    with pytest.raises(Errors.InvalidReplicationFactorError):
        client.create_topics({"rf2": {"num_partitions": 1, "replication_factor": 2}})
    # validate_only: the same answer, nothing created
    result = client.create_topics({"dry": {"num_partitions": 5}}, validate_only=True)
    assert errors_of(result) == {"dry": 0}
    assert "dry" not in client.list_topics()
    described = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "dry")], config_filter="all")
    assert described["topic"]["dry"] == {}  # UNKNOWN_TOPIC_OR_PARTITION: kafka-python returns no entries


def test_create_partitions_then_produce(server: LogbusServer, client: KafkaAdminClient) -> None:
    client.create_topics({"grow": {"num_partitions": 1}})
    assert produce(server, "grow", 0, 3) == [0, 1, 2]
    client.create_partitions({"grow": 4})
    assert partitions_of(client, "grow") == 4
    assert produce(server, "grow", 3, 2) == [0, 1]  # a new producer sees the new partitions
    with pytest.raises(Errors.InvalidPartitionsError):
        client.create_partitions({"grow": 4})
    with pytest.raises(Errors.InvalidPartitionsError):
        client.create_partitions({"grow": 2})
    with pytest.raises(Errors.UnknownTopicOrPartitionError):
        client.create_partitions({"nowhere": 3})
    client.create_partitions({"grow": 9}, validate_only=True)
    assert partitions_of(client, "grow") == 4


def test_delete_topics(client: KafkaAdminClient) -> None:
    client.create_topics(["doomed", "survivor"])
    result = client.delete_topics(["doomed"])
    assert errors_of(result) == {"doomed": 0}
    names = set(client.list_topics())
    assert "doomed" not in names and "survivor" in names
    with pytest.raises(Errors.UnknownTopicOrPartitionError):
        client.delete_topics(["doomed"])
    result = client.delete_topics(["survivor", "never"], raise_errors=False)
    assert errors_of(result) == {"survivor": 0, "never": Errors.UnknownTopicOrPartitionError.errno}


def test_deleting_a_topic_forgets_its_committed_offsets(server: LogbusServer, client: KafkaAdminClient) -> None:
    """As in Kafka: a topic deleted and created again starts with no committed offsets."""
    client.create_topics(["again", "other"])
    produce(server, "again", 0, 3)
    tp, other = TopicPartition("again", 0), TopicPartition("other", 0)
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], group_id="forgetful", enable_auto_commit=False)
    try:
        c.assign([tp, other])
        c.commit({tp: OffsetAndMetadata(3, "", -1), other: OffsetAndMetadata(1, "", -1)})
        assert c.committed(tp) == 3
    finally:
        c.close()
    client.delete_topics(["again"])
    client.create_topics(["again"])
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], group_id="forgetful", enable_auto_commit=False)
    try:
        assert c.committed(tp) is None
        assert c.committed(other) == 1
    finally:
        c.close()


def test_librdkafka_admin(server: LogbusServer) -> None:
    """confluent-kafka's AdminClient: the API versions librdkafka (and kcat) use."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
    from confluent_kafka.admin import ConfigResource as CR

    a = AdminClient({"bootstrap.servers": server.addresses["kafka"]})
    for f in a.create_topics([NewTopic("rd", 2, 1, config={"retention.bytes": "1048576"})],
                             request_timeout=10).values():
        f.result(timeout=10)
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        a.create_topics([NewTopic("rd", 2, 1)], request_timeout=10)["rd"].result(timeout=10)
    a.create_partitions([NewPartitions("rd", 3)], request_timeout=10)["rd"].result(timeout=10)
    (conf,) = a.describe_configs([CR("topic", "rd")], request_timeout=10).values()
    entries = conf.result(timeout=10)
    assert entries["retention.bytes"].value == "1048576" and entries["cleanup.policy"].value == "delete"
    assert len(a.list_topics("rd", timeout=10).topics["rd"].partitions) == 3
    a.delete_topics(["rd"], request_timeout=10)["rd"].result(timeout=10)
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        a.delete_topics(["rd"], request_timeout=10)["rd"].result(timeout=10)


def test_partition_count_survives_restart(logbus_server: Any) -> None:
    server = logbus_server()
    c = admin_client(server)
    try:
        c.create_topics({"kept": {"num_partitions": 2, "configs": {"retention.ms": "86400000"}}})
        c.create_partitions({"kept": 5})
        assert produce(server, "kept", 4, 3) == [0, 1, 2]
    finally:
        c.close()
    assert server.stop() == 0
    server.restart()
    c = admin_client(server)
    try:
        assert partitions_of(c, "kept") == 5
        configs = c.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kept")])["topic"]["kept"]
        assert configs["retention.ms"]["value"] == "86400000"
    finally:
        c.close()
    consumer = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False,
                             consumer_timeout_ms=2000)
    try:
        tp = TopicPartition("kept", 4)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        assert [m.value for m in consumer] == [b"v0", b"v1", b"v2"]
    finally:
        consumer.close()
