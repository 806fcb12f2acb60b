"""The one access check every gateway calls (``Doors.authenticate``, ``Doors.authorize``)
on a broker with a temp dir: logins, loopback-only users, vhost access, configure / write /
read by resource name, topic permissions by routing key (with ``{client_id}``), the
administrator's management, and the version a gateway's cache follows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from logbus.core.access.passwords import SCRYPT, SHA256
from logbus.core.broker import Broker
from logbus.core.errors import AccessRefused, LoginRefused, LoopbackOnly
from logbus.core.log import TopicConfig
from logbus.core.types import Resource
from tests.loop import LoopReactor


@pytest.fixture
def loop() -> LoopReactor:
    return LoopReactor()


@pytest.fixture
def broker(tmp_path: Path, loop: LoopReactor) -> Iterator[Broker]:
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


def test_authenticate(broker: Broker, loop: LoopReactor) -> None:
    loop.wait(broker.doors.authenticate("alice", "pw", loopback=False))
    with pytest.raises(LoginRefused):
        loop.wait(broker.doors.authenticate("alice", "wrong", loopback=True))
    with pytest.raises(LoginRefused):
        loop.wait(broker.doors.authenticate("nobody", "pw", loopback=True))
    loop.wait(broker.doors.authenticate("guest", "guest", loopback=True))
    with pytest.raises(LoopbackOnly):
        loop.wait(broker.doors.authenticate("guest", "guest", loopback=False))


def test_a_password_is_checked_off_the_reactor_once_then_known(broker: Broker, loop: LoopReactor) -> None:
    worker = broker.password_worker
    first = [broker.doors.authenticate("alice", "pw", loopback=True) for _ in range(3)]
    assert not any(d.called for d in first)  # the KDF runs on the password thread
    assert worker.pending == 1  # three logins with the same password: one check
    for d in first:
        loop.wait(d)
    again = broker.doors.authenticate("alice", "pw", loopback=True)
    assert again.called and worker.pending == 0  # known: no KDF, answered in the same turn
    loop.wait(again)
    wrong = broker.doors.authenticate("alice", "pw2", loopback=True)
    assert not wrong.called  # a password not seen before: checked again
    with pytest.raises(LoginRefused):
        loop.wait(wrong)
    broker.access.put_user("alice", password="new")  # a new hash: what was known is not any more
    stale = broker.doors.authenticate("alice", "pw", loopback=True)
    assert not stale.called
    with pytest.raises(LoginRefused):
        loop.wait(stale)
    loop.wait(broker.doors.authenticate("alice", "new", loopback=True))


def test_a_password_changed_while_it_was_checked_refuses_the_login(broker: Broker, loop: LoopReactor) -> None:
    d = broker.doors.authenticate("alice", "pw", loopback=True)
    broker.access.put_user("alice", password="other")  # before the check's answer comes back
    with pytest.raises(LoginRefused):
        loop.wait(d)
    assert broker.access.login_cached("alice", "pw") is None


def test_a_rabbitmq_hash_becomes_scrypt_at_the_login_and_stays(tmp_path: Path, loop: LoopReactor) -> None:
    rabbitmq = "fOC0HhN9jd35fgdugCrUmtJEDBykNKlPSAkkQrMfQfuWjx2w"  # "secret", exported by RabbitMQ 3.10.8
    b = Broker(tmp_path, reactor=loop, topic_defaults=TopicConfig(flush="none"))
    b.start()
    b.access.put_user("carol", password_hash=rabbitmq, hashing_algorithm=SHA256)
    assert b.doors.scram_credential("carol", "SCRAM-SHA-512") is None
    loop.wait(b.doors.authenticate("carol", "secret", loopback=True))
    upgraded = b.access.user("carol")
    assert upgraded.hashing_algorithm == SCRYPT and upgraded.password_hash.startswith("$scrypt$ln=14,r=8,p=5$")
    assert b.doors.scram_credential("carol", "SCRAM-SHA-512") is not None  # made at the same login
    b.stop()
    b = Broker(tmp_path, reactor=loop, topic_defaults=TopicConfig(flush="none"))
    b.start()
    try:
        assert b.access.user("carol").password_hash == upgraded.password_hash  # stored
        loop.wait(b.doors.authenticate("carol", "secret", loopback=True))
        with pytest.raises(LoginRefused):
            loop.wait(b.doors.authenticate("carol", "Secret", loopback=True))
    finally:
        b.stop()


def test_vhost_access_and_resource_permissions(broker: Broker) -> None:
    broker.doors.authorize("alice", "access", Resource("/"))
    with pytest.raises(AccessRefused):
        broker.doors.authorize("alice", "access", Resource("other"))
    broker.doors.authorize("alice", "configure", Resource("/", "queue", "alice.jobs"))
    with pytest.raises(AccessRefused):
        broker.doors.authorize("alice", "configure", Resource("/", "queue", "bob.jobs"))
    broker.doors.authorize("alice", "write", Resource("/", "exchange", "alice.x"))
    with pytest.raises(AccessRefused):
        broker.doors.authorize("alice", "write", Resource("/", "exchange", ""))  # the default exchange: amq.default


def test_topic_permissions_by_routing_key(broker: Broker) -> None:
    on_topic = Resource("/", "exchange", "amq.topic", "sensors.dev1.t", client_id="dev1")
    assert broker.doors.topic_restricted("alice", "/", "amq.topic") and not broker.doors.topic_restricted("guest", "/", "amq.topic")
    broker.doors.authorize("alice", "write", on_topic)
    with pytest.raises(AccessRefused, match="write access to topic 'sensors.dev1.t'"):
        broker.doors.authorize("alice", "write", Resource("/", "exchange", "amq.topic", "sensors.dev1.t", client_id="dev2"))
    broker.doors.authorize("alice", "read", Resource("/", "exchange", "amq.topic", "sensors.#"))
    with pytest.raises(AccessRefused):
        broker.doors.authorize("alice", "read", Resource("/", "exchange", "amq.topic", "other.#"))
    broker.doors.authorize("alice", "write", Resource("/", "exchange", "amq.topic"))  # no key: the exchange alone
    broker.doors.authorize("guest", "write", Resource("/", "exchange", "amq.topic", "anything"))  # none set: allowed


def test_administer_and_the_version(broker: Broker) -> None:
    broker.doors.authorize("guest", "administer", Resource(""))
    for user in ("alice", "nobody"):
        with pytest.raises(AccessRefused):
            broker.doors.authorize(user, "administer", Resource(""))
    before = broker.doors.access_version
    broker.access.clear_permission("alice", "/")
    assert broker.doors.access_version != before
    with pytest.raises(AccessRefused):
        broker.doors.authorize("alice", "access", Resource("/"))
