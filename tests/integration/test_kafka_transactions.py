"""Kafka transactions against a real ``logbus serve`` with real clients: kafka-python's and
aiokafka's transactional producers and read_committed consumers, consume-transform-produce
with the offsets committed in the transaction, a committed transaction reaching an AMQP
queue (pika) and an aborted one never, and kill -9 with a transaction open."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import confluent_kafka
import pika
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTP
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, TransactionalIdAuthorizationFailedError

from tests.integration.mgmt import Mgmt
from tests.serverproc import LogbusServer

WAIT = 20


@pytest.fixture
def server(logbus_server: Callable[..., LogbusServer]) -> LogbusServer:
    return logbus_server()


def read(server: LogbusServer, topic: str, isolation: str, *, expect: int | None = None) -> list[bytes]:
    """Every value of partition 0 of ``topic`` a consumer with ``isolation`` gets: until
    ``expect`` values (or, without, until the end offset it sees at the start)."""
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False,
                      isolation_level=isolation, consumer_timeout_ms=3000)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]
        out: list[bytes] = []
        while (expect is None and c.position(tp) < end) or (expect is not None and len(out) < expect):
            batch = c.poll(timeout_ms=3000)
            if not batch:
                break
            out += [m.value for ms in batch.values() for m in ms]
        return out
    finally:
        c.close()


def test_kafka_python_commit_and_abort(server: LogbusServer) -> None:
    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], transactional_id="kp-1")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(5):
            p.send("kp", b"c%d" % i)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(3):
            p.send("kp", b"a%d" % i)
        p.flush()  # appended: the abort has records to cover
        p.abort_transaction()
        p.begin_transaction()
        p.send("kp", b"last")
        p.commit_transaction()
    finally:
        p.close()
    committed = [b"c0", b"c1", b"c2", b"c3", b"c4", b"last"]
    assert read(server, "kp", "read_committed") == committed
    assert read(server, "kp", "read_uncommitted") == committed[:5] + [b"a0", b"a1", b"a2", b"last"]


def test_read_committed_waits_for_the_open_transaction(server: LogbusServer) -> None:
    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], transactional_id="kp-open")
    plain = KafkaProducer(bootstrap_servers=server.addresses["kafka"])
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("open", b"in-txn")
        p.flush()
        plain.send("open", b"plain").get(timeout=10)
        c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], isolation_level="read_committed")
        try:
            tp = TopicPartition("open", 0)
            assert c.end_offsets([tp])[tp] == 0  # the last stable offset: where the transaction began
        finally:
            c.close()
        assert read(server, "open", "read_uncommitted") == [b"in-txn", b"plain"]
        p.commit_transaction()
    finally:
        p.close()
        plain.close()
    assert read(server, "open", "read_committed") == [b"in-txn", b"plain"]


def test_aiokafka_consume_transform_produce(server: LogbusServer) -> None:
    addr = server.addresses["kafka"]

    async def run() -> tuple[int | None, list[bytes]]:
        p = AIOKafkaProducer(bootstrap_servers=addr, transactional_id="aio-ctp")
        await p.start()
        try:
            async with p.transaction():
                for i in range(10):
                    await p.send("ctp-in", b"x%d" % i)
            c = AIOKafkaConsumer("ctp-in", bootstrap_servers=addr, group_id="ctp", enable_auto_commit=False,
                                 auto_offset_reset="earliest", isolation_level="read_committed")
            await c.start()
            try:
                seen = 0
                while seen < 10:
                    got = await c.getmany(timeout_ms=3000)
                    assert got, "the committed input was not delivered"
                    async with p.transaction():
                        offsets = {}
                        for tp, msgs in got.items():
                            for m in msgs:
                                await p.send("ctp-out", m.value.upper())
                            offsets[tp] = msgs[-1].offset + 1
                            seen += len(msgs)
                        await p.send_offsets_to_transaction(offsets, "ctp")
                committed = await c.committed(AioTP("ctp-in", 0))
            finally:
                await c.stop()
            with pytest.raises(RuntimeError):
                async with p.transaction():
                    await p.send("ctp-out", b"never")
                    raise RuntimeError("the transform failed: abort")
        finally:
            await p.stop()
        return committed, []

    committed, _ = asyncio.run(run())
    assert committed == 10
    assert read(server, "ctp-out", "read_committed") == [b"X%d" % i for i in range(10)]


def test_a_committed_transaction_reaches_an_amqp_queue_and_an_aborted_one_never(server: LogbusServer) -> None:
    host, port = server.host_port("amqp")
    params = pika.ConnectionParameters(host=host, port=port, credentials=pika.PlainCredentials("guest", "guest"),
                                       connection_attempts=1)
    connection = pika.BlockingConnection(params)
    try:
        ch = connection.channel()
        ch.exchange_declare("txn-orders", "topic", durable=True)
        ch.queue_declare("txn-all", durable=True)
        ch.queue_bind("txn-all", "txn-orders", "#")
        p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], transactional_id="kp-amqp")
        try:
            p.init_transactions()
            p.begin_transaction()
            p.send("txn-orders", key=b"eu.1", value=b"kept")
            p.flush()
            assert ch.basic_get("txn-all", auto_ack=True)[0] is None  # not before the commit
            p.commit_transaction()
            p.begin_transaction()
            p.send("txn-orders", key=b"eu.2", value=b"dropped")
            p.flush()
            p.abort_transaction()
        finally:
            p.close()
        method, _, body = ch.basic_get("txn-all", auto_ack=True)
        assert method is not None and (method.routing_key, body) == ("eu.1", b"kept")
        assert ch.basic_get("txn-all", auto_ack=True)[0] is None
    finally:
        connection.close()


def test_kill_9_with_a_transaction_open_loses_no_commit_and_shows_no_abort(server: LogbusServer) -> None:
    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], transactional_id="kp-kill")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("kill", b"committed")
        p.commit_transaction()
        p.begin_transaction()
        p.send("kill", b"open")
        p.flush()
    finally:
        p.close(timeout=1)
    server.kill()
    server.restart(same_ports=True)
    assert read(server, "kill", "read_committed", expect=1) == [b"committed"]
    # the same transactional id again: its open transaction is aborted first
    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], transactional_id="kp-kill")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("kill", b"after")
        p.commit_transaction()
    finally:
        p.close()
    assert read(server, "kill", "read_committed") == [b"committed", b"after"]
    assert read(server, "kill", "read_uncommitted") == [b"committed", b"open", b"after"]


def test_a_fenced_producer_cannot_commit(server: LogbusServer) -> None:
    old = KafkaProducer(bootstrap_servers=server.addresses["kafka"], transactional_id="kp-fence")
    new = KafkaProducer(bootstrap_servers=server.addresses["kafka"], transactional_id="kp-fence")
    try:
        old.init_transactions()
        old.begin_transaction()
        old.send("fence", b"zombie")
        old.flush()
        new.init_transactions()  # aborts the old one's transaction and fences it
        with pytest.raises(KafkaError):
            old.commit_transaction()
        new.begin_transaction()
        new.send("fence", b"live")
        new.commit_transaction()
    finally:
        old.close(timeout=1)
        new.close()
    assert read(server, "fence", "read_committed") == [b"live"]


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(server: LogbusServer) -> None:
    addr = server.addresses["kafka"]
    p = KafkaProducer(bootstrap_servers=addr, transactional_id="kp-slow", transaction_timeout_ms=1000)
    c = KafkaConsumer(bootstrap_servers=addr, isolation_level="read_committed")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("slow", b"too late")
        p.flush()
        tp = TopicPartition("slow", 0)
        assert c.end_offsets([tp])[tp] == 0  # held by the open transaction
        deadline = time.monotonic() + 30
        while c.end_offsets([tp])[tp] == 0:  # the broker aborts it (a marker at 1): stable again
            assert time.monotonic() < deadline, "the transaction was not aborted after its timeout"
            time.sleep(0.1)
        with pytest.raises(KafkaError):
            p.commit_transaction()
    finally:
        p.close(timeout=1)
        c.close()
    assert read(server, "slow", "read_committed") == []
    assert read(server, "slow", "read_uncommitted") == [b"too late"]


def test_a_transactional_id_needs_write_on_it(server: LogbusServer) -> None:
    mgmt = Mgmt(server)
    mgmt.grant("/", "guest", configure=".*", write="^(locked|allowed-tx)$", read=".*")
    try:
        p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], transactional_id="other-tx")
        try:
            with pytest.raises(TransactionalIdAuthorizationFailedError):
                p.init_transactions()
        finally:
            p.close(timeout=1)
        p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], transactional_id="allowed-tx")
        try:
            p.init_transactions()
            p.begin_transaction()
            p.send("locked", b"ok")
            p.commit_transaction()
        finally:
            p.close()
    finally:
        mgmt.grant("/", "guest")
    assert read(server, "locked", "read_committed") == [b"ok"]


def test_confluent_kafka_commit_and_abort(server: LogbusServer) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": server.addresses["kafka"], "transactional.id": "ck-1"})
    p.init_transactions(WAIT)
    p.begin_transaction()
    for i in range(3):
        p.produce("ck", b"c%d" % i)
    p.commit_transaction(WAIT)
    p.begin_transaction()
    p.produce("ck", b"aborted")
    p.flush(WAIT)
    p.abort_transaction(WAIT)
    p.begin_transaction()
    p.produce("ck", b"last")
    p.commit_transaction(WAIT)
    assert read(server, "ck", "read_committed") == [b"c0", b"c1", b"c2", b"last"]
    assert read(server, "ck", "read_uncommitted") == [b"c0", b"c1", b"c2", b"aborted", b"last"]
