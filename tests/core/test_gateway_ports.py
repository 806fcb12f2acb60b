"""Every gateway holds ports, not the core (issue 46, decisions 0049-0052): built by the
server's own builders over a real broker on a temp dir, with a connection of each
stateful protocol open, logged in, consuming and publishing (Twisted's StringTransport,
no socket), every core object reachable from a gateway's factory, site or connection is
a port's implementation (a service the broker owns, ``SERVICES``) or a value the ports
hand out (``VALUES``): never the ``Broker``, a ``VHost`` or anything behind them. The walk
follows the attributes of gateway objects (classes of ``logbus.gateway``), containers,
bound methods, partials and closures; a core object it reaches is a leaf."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pamqp import body, frame, header
from pamqp import commands as C
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from logbus import server
from logbus.config import Settings
from logbus.core.broker import Broker
from logbus.core.log import TopicConfig
from logbus.core.access.auth import Access
from logbus.core.access.doors import Doors
from logbus.core.admin import AdminService
from logbus.core.connections import ConnectionRecord
from logbus.core.message import Envelope, Message
from logbus.core.metrics import Metrics, Tally
from logbus.core.halves import HalfService
from logbus.core.pop_service import PopService
from logbus.core.queue_model import QueueModel, VHostQueues
from logbus.core.queues.entry import Delivery
from logbus.core.queues.service import QueueSettings, QueueState
from logbus.core.retained import RetainedStore
from logbus.core.sessions import SessionService
from logbus.core.tick import Tick
from logbus.core.streams.service import StreamService
from logbus.core.topics import TopicService
from logbus.core.vhost import VHost
from prometheus_client.registry import CollectorRegistry
from logbus.gateway.amqp.model.forms import AMQP_FORMS
from logbus.gateway.mqtt import Connect, Properties, Publish, Subscribe, Subscription, encode
from tests.loop import LoopReactor

CONTAINERS = (dict, list, set, frozenset, tuple)
# the ports' implementations: what the server hands the gateways (core/ports.py), and the
# reactor's end-of-turn pass (core/tick.py, ``tick_of``: the reactor's, not the broker's)
SERVICES = (Doors, QueueModel, VHostQueues, SessionService, StreamService, TopicService, Access, AdminService,
            PopService, HalfService, Metrics, CollectorRegistry, Tick)
# what the ports' methods take or hand out and gateways keep (core/types.py)
VALUES = (ConnectionRecord, Delivery, Message, Envelope, QueueState, QueueSettings, RetainedStore, Tally)


def core_held(roots: dict[str, Any], broker: Broker) -> list[str]:
    """The paths from ``roots`` to a core object that is neither a port's implementation
    nor a value the ports hand out (see the module's header)."""
    bad: list[str] = []
    seen: set[int] = set()
    todo: list[tuple[str, Any]] = list(roots.items())
    while todo:
        path, obj = todo.pop()
        if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
            continue
        seen.add(id(obj))
        if isinstance(obj, (Broker, VHost)):
            bad.append(f"{path}: {type(obj).__name__}")
            continue
        if isinstance(obj, SERVICES + VALUES):
            continue
        if type(obj).__module__.startswith("logbus.core"):
            bad.append(f"{path}: {type(obj).__module__}.{type(obj).__name__}")
            continue
        if isinstance(obj, CONTAINERS):
            items = obj.items() if isinstance(obj, dict) else enumerate(obj)
            todo += [(f"{path}[{k!r}]", v) for k, v in items]
            todo += [(f"{path} key", k) for k in obj] if isinstance(obj, dict) else []
        elif isinstance(obj, functools.partial):
            todo += [(f"{path}.func", obj.func)] + [(f"{path}.args[{i}]", a) for i, a in enumerate(obj.args)]
        elif hasattr(obj, "__self__") and hasattr(obj, "__func__"):  # a bound method
            todo.append((f"{path}.__self__", obj.__self__))
        elif hasattr(obj, "__closure__") and hasattr(obj, "__code__"):  # a function: what it closes over
            todo += [(f"{path}<{name}>", cell.cell_contents)
                     for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ())]
        elif type(obj).__module__.startswith("logbus.gateway"):
            fields = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
            for cls in type(obj).__mro__:  # __mypyc_attrs__: a class compiled by mypyc
                for slot in (*getattr(cls, "__slots__", ()), *getattr(cls, "__mypyc_attrs__", ())):
                    if slot != "__dict__" and hasattr(obj, slot):
                        fields[slot] = getattr(obj, slot)
            todo += [(f"{path}.{name}", value) for name, value in fields.items()]
    return sorted(bad)


@contextmanager
def _broker(path: Path) -> Iterator[tuple[LoopReactor, Broker]]:
    loop = LoopReactor()
    broker = Broker(path, reactor=loop, forms=AMQP_FORMS, topic_defaults=TopicConfig(flush="none"))
    broker.start()
    try:
        yield loop, broker
    finally:
        loop.wait(broker.stop())


def _amqp_connection(factory: Any, loop: LoopReactor, broker: Broker) -> Any:
    """A connection logged in to "/", consuming queue "q" on channel 1 and publishing to it
    in confirm mode, with a delivery unacked."""
    protocol = factory.buildProtocol(None)
    transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 50000))
    protocol.makeConnection(transport)
    props = C.Basic.Properties(delivery_mode=2)
    for data in (b"AMQP\x00\x00\x09\x01", frame.marshal(C.Connection.StartOk({}, "PLAIN", "\0guest\0guest"), 0),
                 frame.marshal(C.Connection.TuneOk(2047, 131072, 0), 0), frame.marshal(C.Connection.Open("/"), 0),
                 frame.marshal(C.Channel.Open(), 1), frame.marshal(C.Confirm.Select(), 1),
                 frame.marshal(C.Queue.Declare(queue="q", exclusive=True), 1),
                 frame.marshal(C.Basic.Consume(queue="q", consumer_tag="c"), 1),
                 frame.marshal(C.Basic.Publish(exchange="", routing_key="q"), 1)
                 + frame.marshal(header.ContentHeader(0, 2, props), 1) + frame.marshal(body.ContentBody(b"hi"), 1)):
        protocol.dataReceived(data)
        loop.run_until(lambda: broker.password_worker.pending == 0)
        while loop.run_once():
            pass
    assert protocol.conn.channels[1].unacked, transport.value()  # delivered, not acked: a lease held
    return protocol


def _mqtt_connection(factory: Any, loop: LoopReactor, client_id: str) -> Any:
    """A kept MQTT 5 session subscribed to "t/#" with a QoS 1 message to it in flight."""
    protocol = factory.buildProtocol(None)
    transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 50001))
    protocol.makeConnection(transport)
    for packet in (Connect(client_id, 5, clean_start=False, properties=Properties(session_expiry_interval=600)),
                   Subscribe(1, (Subscription("t/#", 1),)), Publish("t/x", b"hi", 1, packet_id=2)):
        protocol.dataReceived(encode(packet, 5))
        while loop.run_once():
            pass
    assert protocol.session.outbound.in_flight, transport.value()  # delivered, not acked
    return protocol


def test_every_gateway_holds_ports_only(tmp_path: Path) -> None:
    with _broker(tmp_path) as (loop, broker):
        broker.admin.create_vhost("other")  # a second open vhost to find, if anything held them
        settings = Settings(data_dir=tmp_path)
        kafka = server._kafka(broker, settings, loop)
        http = server._http(broker, settings, loop)
        amqp = server._amqp(broker, settings, loop)
        mqtt = server._mqtt(broker, settings, loop)
        mqtt_ws = server._mqtt_ws(broker, settings, loop)
        mqtt.startFactory()
        roots = {"amqp": amqp, "mqtt": mqtt, "mqtt_ws": mqtt_ws, "kafka": kafka, "http": http,
                 "amqp connection": _amqp_connection(amqp, loop, broker),
                 "mqtt connection": _mqtt_connection(mqtt, loop, "walked"),
                 "client sessions": broker.admin.client_sessions}
        assert core_held(roots, broker) == []
        mqtt.stopFactory()


def test_the_walk_finds_a_broker_or_a_vhost_held(tmp_path: Path) -> None:
    """The check itself: a gateway object that keeps the broker, or a vhost (as a gateway
    given a VHost for its Queues port would), a bound method of either, or another core
    object behind the ports, is found."""
    with _broker(tmp_path) as (loop, broker):
        amqp = server._amqp(broker, Settings(), loop)
        vhost = broker.vhost("/")
        amqp.kept = broker
        assert core_held({"amqp": amqp}, broker) == ["amqp.kept: Broker"]
        amqp.kept = [vhost.dispatch]
        assert core_held({"amqp": amqp}, broker) == ["amqp.kept[0].__self__: VHost"]
        amqp.kept = functools.partial(print, vhost)
        assert core_held({"amqp": amqp}, broker) == ["amqp.kept.args[0]: VHost"]
        amqp.kept = (lambda: vhost)
        assert core_held({"amqp": amqp}, broker) == ["amqp.kept<vhost>: VHost"]
        amqp.kept = broker.queue_store
        assert core_held({"amqp": amqp}, broker) == ["amqp.kept: logbus.core.queues.journal.QueueStore"]
        amqp.kept = None
        amqp.vhosts = broker.vhosts  # a gateway given the VHosts, not their ports
        assert core_held({"amqp": amqp}, broker) == ["amqp.vhosts['/']: VHost"]
