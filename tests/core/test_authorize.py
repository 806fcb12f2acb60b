"""The one access check every gateway calls (``Broker.authenticate``, ``Broker.authorize``)
on a broker with a temp dir: logins, loopback-only users, vhost access, configure / write /
read by resource name, topic permissions by routing key (with ``{client_id}``), the
administrator's management, and the version a gateway's cache follows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from logbus.core.broker import Broker
from logbus.core.errors import AccessRefused, LoginRefused, LoopbackOnly
from logbus.core.log import TopicConfig
from logbus.core.types import Resource
from tests.loop import LoopReactor


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop, topic_defaults=TopicConfig(flush="none"))
    b.start()
    a = b.access
    a.put_user("alice", password="pw", tags="")
    a.set_permission("alice", "/", configure="^alice\\.", write="^(amq\\.topic|alice\\..*)$", read=".*")
    a.set_topic_permission("alice", "/", "amq.topic", write="^sensors\\.{client_id}\\.", read="^sensors\\.")
    yield b
    b.stop()
    while loop.run_once():
        pass


def test_authenticate(broker: Broker) -> None:
    broker.authenticate("alice", "pw", loopback=False)
    with pytest.raises(LoginRefused):
        broker.authenticate("alice", "wrong", loopback=True)
    with pytest.raises(LoginRefused):
        broker.authenticate("nobody", "pw", loopback=True)
    broker.authenticate("guest", "guest", loopback=True)
    with pytest.raises(LoopbackOnly):
        broker.authenticate("guest", "guest", loopback=False)


def test_vhost_access_and_resource_permissions(broker: Broker) -> None:
    broker.authorize("alice", "access", Resource("/"))
    with pytest.raises(AccessRefused):
        broker.authorize("alice", "access", Resource("other"))
    broker.authorize("alice", "configure", Resource("/", "queue", "alice.jobs"))
    with pytest.raises(AccessRefused):
        broker.authorize("alice", "configure", Resource("/", "queue", "bob.jobs"))
    broker.authorize("alice", "write", Resource("/", "exchange", "alice.x"))
    with pytest.raises(AccessRefused):
        broker.authorize("alice", "write", Resource("/", "exchange", ""))  # the default exchange: amq.default


def test_topic_permissions_by_routing_key(broker: Broker) -> None:
    on_topic = Resource("/", "exchange", "amq.topic", "sensors.dev1.t", client_id="dev1")
    assert broker.topic_restricted("alice", "/", "amq.topic") and not broker.topic_restricted("guest", "/", "amq.topic")
    broker.authorize("alice", "write", on_topic)
    with pytest.raises(AccessRefused, match="write access to topic 'sensors.dev1.t'"):
        broker.authorize("alice", "write", Resource("/", "exchange", "amq.topic", "sensors.dev1.t", client_id="dev2"))
    broker.authorize("alice", "read", Resource("/", "exchange", "amq.topic", "sensors.#"))
    with pytest.raises(AccessRefused):
        broker.authorize("alice", "read", Resource("/", "exchange", "amq.topic", "other.#"))
    broker.authorize("alice", "write", Resource("/", "exchange", "amq.topic"))  # no key: the exchange alone
    broker.authorize("guest", "write", Resource("/", "exchange", "amq.topic", "anything"))  # none set: allowed


def test_administer_and_the_version(broker: Broker) -> None:
    broker.authorize("guest", "administer", Resource(""))
    for user in ("alice", "nobody"):
        with pytest.raises(AccessRefused):
            broker.authorize(user, "administer", Resource(""))
    before = broker.access_version
    broker.access.clear_permission("alice", "/")
    assert broker.access_version != before
    with pytest.raises(AccessRefused):
        broker.authorize("alice", "access", Resource("/"))
