"""Definitions stored with AMQP field tables (tests/fixtures/definitions_v1.tar.gz, written
by the code of 8979a9f: tests/fixtures/make_definitions_v1.py) are rewritten in the neutral
form by the AMQP gateway's upgrade, and the broker then has every exchange, queue, binding
and queued message as before; the neutral form round-trips every value type."""

from __future__ import annotations

import datetime
import decimal
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from logbus.core.broker import Broker
from logbus.core.errors import LegacyDefinitions
from logbus.core.definitions import decode_values, encode_values, settings_of, settings_record
from logbus.core.message import Envelope, Message
from logbus.core.queues.queue import QueueLimits
from logbus.core.queues.service import DeadLetterTarget, QueueSettings
from logbus.core.state import BINDING_PREFIX, CF_METADATA, QUEUE_PREFIX, StateStore, queue_key
from logbus.core.state_pb2 import BindingRecord, QueueRecord, QueueSettingsRecord, Table
from logbus.core.definitions import upgrade
from logbus.gateway.amqp.model.upgrade import AMQP_LEGACY
from logbus.retry.policy import RetryPolicy
from tests.core.amqp_terms import AmqpTerms
from tests.core.brokers import Brokers

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "definitions_v1.tar.gz"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE) as tar:
        # the extraction filters came in 3.11.4; Debian's 3.11.2 (the interpreter `make`
        # chooses: decision 0043) has none, and this archive is our own fixture
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(tmp_path, **safe)
    return tmp_path / "data"


def start(brokers: Brokers, upgrading: bool = True) -> Broker:
    return brokers.start(legacy=AMQP_LEGACY if upgrading else None)


@pytest.fixture
def brokers(data: Path) -> Iterator[Brokers]:
    b = Brokers(data)
    yield b
    b.stop()


def test_without_the_upgrade_the_old_form_is_refused_and_left_alone(brokers: Brokers) -> None:
    with pytest.raises(LegacyDefinitions, match="AMQP field tables"):
        start(brokers, upgrading=False)
    brokers.stop()
    brokers.current = None
    b = start(brokers)  # the refused start changed nothing: the upgrade still finds every record
    assert set(b.vhosts["/"].queues) == {"work", "plain", "kept"}


def test_every_definition_comes_back_in_both_vhosts(brokers: Brokers) -> None:
    b = start(brokers)
    for name in ("/", "other"):
        v = b.vhosts[name]
        later = v.router.exchange("later")
        assert (later.kind, later.delayed, later.durable) == ("direct", True, True)
        assert v.router.exchange("with-ae").alternate == "events"
        assert v.router.exchange("hdrs").kind == "headers"
        work = v.queues["work"]
        assert work.settings == QueueSettings(
            QueueLimits(max_length=1000, overflow="reject-publish", max_priority=5, message_ttl_ms=60000),
            RetryPolicy(levels_ms=(1000, 5000), max_deliveries=4), DeadLetterTarget("events", "dead"),
            3_600_000, True)
        assert work.declared["x-custom"] == 1.5 and work.declared["x-delivery-limit"] == 3
        bindings = {(bd.source, bd.destination, bd.routing_key): bd for bd in v.router.bindings()}
        assert set(bindings) == {("events", "work", "a.*"), ("events", "plain", "#"), ("hdrs", "plain", ""),
                                 ("later", "work", "k"), ("events", "with-ae", "x.#"), ("events", "kept", "a.#")}
        f = bindings[("events", "plain", "#")].filter
        assert f is not None and (f.tag, f.sql) == ("A || B", "n > 1")
        assert dict(bindings[("hdrs", "plain", "")].arguments) == {"x-match": "any", "kind": "x", "level": 3}
    # the three messages published before are still queued, in order
    v = b.vhosts["/"]
    got = v.service.take("kept", "me", 10)
    assert [d.message.value for d in got] == [b"m0", b"m1", b"m2"]


def test_routing_and_redeclaring_after_the_upgrade(brokers: Brokers) -> None:
    b = start(brokers)
    v = AmqpTerms(b.vhosts["/"])
    # a re-declare with the arguments of the first declare is equivalent; another is not
    v.declare_queue("work", durable=True, arguments=dict(b.vhosts["/"].queues["work"].declared))
    v.declare_exchange("later", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
    # headers, filtered and exchange-to-exchange bindings route as declared
    assert v.publish("hdrs", "", Message(None, b"h", None, [], Envelope()), headers={"level": 3}).routed
    assert v.vhost.queues["plain"].queue.message_count == 1
    hot = Message(None, b"hot", None, [("n", b"2")], Envelope(tag="A"))
    cold = Message(None, b"cold", None, [("n", b"0")], Envelope(tag="A"))
    assert v.publish("events", "z", hot).routed and not v.publish("events", "z", cold).routed
    assert v.vhost.queues["plain"].queue.message_count == 2


def test_the_upgrade_runs_once_and_survives_a_restart(brokers: Brokers, data: Path) -> None:
    start(brokers)
    brokers.stop()
    store = StateStore(data / "state")
    try:
        assert upgrade(store, AMQP_LEGACY) == 0
        records = [BindingRecord.FromString(v) for _, v in store.scan_prefix(CF_METADATA, BINDING_PREFIX)]
        assert len(records) == 12 and all(r.neutral and not r.legacy_arguments for r in records)
    finally:
        store.close()
    b = start(brokers, upgrading=False)  # nothing left in the old form
    assert b.vhosts["other"].queues["work"].durable


def test_values_round_trip() -> None:
    when = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.timezone.utc)
    values = {"none": None, "t": True, "f": False, "i": -(1 << 40), "r": 2.5, "s": "text", "b": b"\x00\xff",
              "d": decimal.Decimal("1.25"), "when": when, "list": [1, "a", [2]], "table": {"x": {"y": None}},
              "empty-list": [], "empty-table": {}}
    assert decode_values(encode_values(values, Table())) == values
    assert decode_values(Table.FromString(encode_values(values, Table()).SerializeToString())) == values


@pytest.mark.parametrize("settings", [
    QueueSettings(),
    QueueSettings(QueueLimits(0, 0, "reject-publish-dlx", 255, 0), RetryPolicy(initial_ms=10, multiplier=3.0,
                  max_delay_ms=1000, max_deliveries=1), DeadLetterTarget(None, None, "t"), 1, True),
    QueueSettings(dead_letter=DeadLetterTarget("", "")),
])  # fmt: skip
def test_settings_round_trip(settings: QueueSettings) -> None:
    rec = QueueSettingsRecord.FromString(settings_record(settings, QueueSettingsRecord()).SerializeToString())
    assert settings_of(rec) == settings


def test_a_record_that_does_not_decode_stops_the_start_and_changes_nothing(brokers: Brokers, data: Path) -> None:
    store = StateStore(data / "state")
    try:
        key = queue_key("/", "work")
        rec = QueueRecord.FromString(store.get(CF_METADATA, key))
        rec.legacy_arguments = b"\x00\x00\x00\x09\x05x-bad\xff\xff\xff"  # a table that ends mid-value
        store.put(CF_METADATA, key, rec)
    finally:
        store.close()
    with pytest.raises(LegacyDefinitions, match="queue 'work' in vhost '/' cannot be upgraded"):
        start(brokers)
    brokers.stop()
    store = StateStore(data / "state")
    try:  # the batch was not written: every record is still in the old form
        old = [QueueRecord.FromString(v) for _, v in store.scan_prefix(CF_METADATA, QUEUE_PREFIX)]
        assert old and not any(r.neutral for r in old)
    finally:
        store.close()
