"""Users, vhosts and permissions through the broker on a temp dir: RabbitMQ's first boot,
round trips across restarts, vhosts opened into the broker's own dict, and deleting a
vhost (its state goes, its log topics stay)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from logbus.core.access.auth import AccessChange, InvalidAccess, UnknownVHost
from logbus.core.access.scram import derive
from logbus.core.message import Envelope, Message
from logbus.core.state import queue_delivered_key, queue_entries_prefix
from tests.core.brokers import Brokers


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[Brokers]:
    b = Brokers(tmp_path)
    yield b
    b.stop()


def msg(body: bytes) -> Message:
    return Message(None, body, None, [], Envelope())


def test_first_boot_creates_vhost_and_default_user_once(brokers: Brokers) -> None:
    b = brokers.start(default_user="admin", default_pass="s3cret")
    access = b.access
    assert list(access.vhosts) == ["/"] and list(b.vhosts) == ["/"]
    assert access.vhosts["/"].description == "Default virtual host"
    admin = access.authenticate("admin", "s3cret")
    assert admin is not None and admin.tags == ("administrator",)
    assert access.authenticate("guest", "guest") is None  # not created: another default user
    assert access.get_permission("/", "admin").to_json() == {
        "user": "admin", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
    access.delete_user("admin")
    access.delete_user("anonymous")
    b = brokers.restart()  # default guest/guest now: the data directory was seeded before
    assert b.access.users == {} and list(b.vhosts) == ["/"]


def test_first_boot_creates_the_anonymous_user_with_publish_and_consume_only(brokers: Brokers) -> None:
    """Who MQTT and Kafka clients without credentials act as (decision 0039): no password
    (none logs in as it), no tags, and on "/" write and read but no configure."""
    access = brokers.start(anonymous_user="devices").access
    devices = access.user("devices")
    assert devices.tags == () and devices.password_hash == ""
    assert access.authenticate("devices", "") is None
    assert access.get_permission("/", "devices").to_json() == {
        "user": "devices", "vhost": "/", "configure": "", "write": ".*", "read": ".*"}
    assert set(access.users) == {"guest", "devices"}


def test_an_anonymous_user_that_is_the_default_user_stays_the_administrator(brokers: Brokers) -> None:
    access = brokers.start(anonymous_user="guest").access  # the old behaviour, an operator's choice
    assert set(access.users) == {"guest"} and access.user("guest").tags == ("administrator",)
    assert access.get_permission("/", "guest").configure == ".*"


def test_users_vhosts_and_permissions_survive_a_restart(brokers: Brokers) -> None:
    b = brokers.start()
    b.access.put_user("alice", password="pw", tags="monitoring,management")
    b.access.put_user("bob", password_hash="fOC0HhN9jd35fgdugCrUmtJEDBykNKlPSAkkQrMfQfuWjx2w")
    vhosts = b.vhosts
    assert b.admin.create_vhost("prod", "production", ["eu"])
    assert not b.admin.create_vhost("prod", "still production")  # updated, not new
    assert b.vhosts is vhosts and set(vhosts) == {"/", "prod"}  # the same dict, mutated
    b.access.set_permission("alice", "prod", "^a", "^b", "^c")
    b.access.set_permission("bob", "/", "", "", ".*")
    b = brokers.restart()
    access = b.access
    assert access.authenticate("alice", "pw") is not None
    assert access.user("alice").tags == ("monitoring", "management")
    assert access.authenticate("bob", "secret") is not None
    assert access.vhost("prod").description == "still production" and access.vhost("prod").tags == ()
    assert set(b.vhosts) == {"/", "prod"} and b.vhosts["prod"].name == "prod"
    assert sorted(access.permissions) == [("alice", "prod"), ("anonymous", "/"), ("bob", "/"), ("guest", "/")]
    assert access.get_permission("prod", "alice").read == "^c"
    access.clear_permission("bob", "/")
    access.delete_user("alice")
    b = brokers.restart()
    assert sorted(b.access.permissions) == [("anonymous", "/"), ("guest", "/")]
    assert sorted(b.access.users) == ["anonymous", "bob", "guest"]


def test_scram_credentials_are_kept_never_the_password_and_made_at_the_first_login(brokers: Brokers) -> None:
    """Kafka's SCRAM needs StoredKey and ServerKey per mechanism: made when a password is
    set (and at first boot), kept across restarts; a user imported with a RabbitMQ hash
    alone gets them at its first login with the password."""
    b = brokers.start()
    assert {c.mechanism for c in b.access.user("guest").scram} == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    b.access.put_user("alice", password="alice-pw-Zq7")
    b.access.put_user("bob", password_hash="fOC0HhN9jd35fgdugCrUmtJEDBykNKlPSAkkQrMfQfuWjx2w")  # "secret"
    assert b.doors.scram_credential("bob", "SCRAM-SHA-256") is None
    alice = b.doors.scram_credential("alice", "SCRAM-SHA-512")
    assert alice is not None and alice.iterations == 16384 and len(alice.salt) == 16
    assert alice == derive("SCRAM-SHA-512", "alice-pw-Zq7", salt=alice.salt)
    b = brokers.restart()
    assert b.doors.scram_credential("alice", "SCRAM-SHA-512") == alice
    assert b.access.authenticate("bob", "wrong") is None and b.doors.scram_credential("bob", "SCRAM-SHA-256") is None
    assert b.access.authenticate("bob", "secret") is not None
    bob = b.doors.scram_credential("bob", "SCRAM-SHA-256")
    assert bob is not None and bob == derive("SCRAM-SHA-256", "secret", salt=bob.salt)
    b = brokers.restart()
    assert b.doors.scram_credential("bob", "SCRAM-SHA-256") == bob  # stored, not made again
    b.access.put_user("alice", password="alice-new-Xk9")
    assert b.doors.scram_credential("alice", "SCRAM-SHA-512") not in (None, alice)
    assert b.state is not None
    records = b"".join(v for _, v in b.state.scan_prefix("metadata", b""))
    assert b"alice-new-Xk9" not in records and b"alice-pw-Zq7" not in records


def test_anonymous_and_certificate_logins_need_a_user_and_anonymous_needs_loopback(brokers: Brokers) -> None:
    from logbus.core.errors import LoginRefused, LoopbackOnly

    b = brokers.start()
    b.access.put_user("anon", password=None)
    b.doors.authenticate_anonymous("anon", loopback=True)
    with pytest.raises(LoginRefused, match="beyond loopback"):
        b.doors.authenticate_anonymous("anon", loopback=False)
    with pytest.raises(LoginRefused):
        b.doors.authenticate_anonymous("nobody", loopback=True)
    b.doors.authenticate_certificate("anon", loopback=False)  # a certificate is a credential from anywhere
    with pytest.raises(LoopbackOnly):
        b.doors.authenticate_certificate("guest", loopback=False)  # loopback_users still apply
    with pytest.raises(LoginRefused):
        b.doors.authenticate_certificate("nobody", loopback=True)


def test_each_vhost_has_its_own_definitions_and_topics(brokers: Brokers) -> None:
    b = brokers.start()
    b.admin.create_vhost("a/b")
    root, other = b.vhosts["/"], b.vhosts["a/b"]
    for v in (root, other):
        v.declare_exchange("orders", "fanout", durable=True)
        v.declare_queue("q", durable=True)
        v.bind("orders", "q")
    root.publish("orders", "", msg(b"root"))
    other.publish("orders", "", msg(b"other"))
    other.publish("", "q", msg(b"direct"))
    assert {"orders", "a%2Fb@orders", "a%2Fb@__amqp_default"} <= set(b._log.topics)
    assert root.queue("q").queue.message_count == 1 and other.queue("q").queue.message_count == 2
    b = brokers.restart()
    assert b.vhosts["a/b"].router.exchange("orders").log_topic == "a%2Fb@orders"
    assert b.vhosts["/"].router.exchange("orders").log_topic == "orders"
    assert b.vhosts["a/b"].queue("q").queue.message_count == 2
    assert b.vhosts["/"].queue("q").queue.message_count == 1


def test_deleting_a_vhost_removes_its_state_but_keeps_its_topics(brokers: Brokers) -> None:
    b = brokers.start()
    b.admin.create_vhost("gone")
    b.access.put_user("u", password="pw")
    b.access.set_permission("u", "gone", ".*", ".*", ".*")
    v = b.vhosts["gone"]
    v.declare_exchange("x", "fanout", durable=True)
    v.declare_queue("q", durable=True)
    v.bind("x", "q")
    v.publish("x", "", msg(b"kept in the log"))
    assert v.get("q", "me", no_ack=True) is not None  # delivered: the queue's delivered mark is written
    v.publish("x", "", msg(b"kept in the log too"))
    b.queue_store.commit()
    assert b.state is not None and b.state.get("queues", queue_delivered_key("gone", "q")) is not None
    heard: list[tuple[AccessChange, bool]] = []
    b.access.subscribe(lambda change: heard.append((change, "gone" in b.vhosts)))
    vhosts = b.vhosts
    b.admin.delete_vhost("gone")
    assert heard == [(AccessChange("vhost_deleted", "gone"), True)]  # told before it went
    assert b.vhosts is vhosts and list(vhosts) == ["/"]
    assert "gone" not in b.access.vhosts and b.access.permission("u", "gone") is None
    assert b.state is not None
    assert list(b.state.scan_prefix("queues", queue_entries_prefix("gone", "q"))) == []
    assert b.state.get("queues", queue_delivered_key("gone", "q")) is None
    for prefix in (b"exchange\x00gone\x00", b"queue\x00gone\x00", b"binding\x00gone\x00",
                   b"permission\x00gone\x00", b"vhost\x00gone\x00"):
        assert list(b.state.scan_prefix("metadata", prefix)) == [], prefix
    assert "gone@x" in b._log.topics  # the data stays
    with pytest.raises(UnknownVHost):
        b.admin.delete_vhost("gone")
    b = brokers.restart()
    assert list(b.vhosts) == ["/"] and "gone@x" in b._log.topics
    assert b.topics.describe_topic("gone@x").partitions[0].log_end_offset == 2
    b.admin.create_vhost("gone")  # again: empty, no permissions, the old topic is reused
    v = b.vhosts["gone"]
    assert "q" not in v.queues and not v.router.has_exchange("x")
    v.declare_exchange("x", "fanout")
    assert b.access.permission("u", "gone") is None


def test_a_vhost_whose_topics_cannot_be_named_is_refused(brokers: Brokers) -> None:
    b = brokers.start()
    with pytest.raises(InvalidAccess, match="cannot name its log topics"):
        b.admin.create_vhost("v" * 240)
    with pytest.raises(InvalidAccess):
        b.admin.create_vhost("")
    assert list(b.vhosts) == ["/"] and list(b.access.vhosts) == ["/"]


def test_a_topic_backs_one_exchange_across_vhosts(brokers: Brokers) -> None:
    """Vhost "/" accepts '@' in exchange names (RabbitMQ does), so its exchange "a@x"
    and exchange "x" of vhost "a" would share topic "a@x": the second is refused."""
    from logbus.core.routing.router import PreconditionFailed

    b = brokers.start()
    b.admin.create_vhost("a")
    b.vhosts["a"].declare_exchange("x", "direct")
    with pytest.raises(PreconditionFailed, match="log topic 'a@x' already backs exchange 'x' in vhost 'a'"):
        b.vhosts["/"].declare_exchange("a@x", "direct")
    b.vhosts["/"].declare_exchange("a@y", "direct")
    with pytest.raises(PreconditionFailed, match="already backs exchange 'a@y' in vhost '/'"):
        b.vhosts["a"].declare_exchange("y", "direct")
