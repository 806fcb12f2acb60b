"""core/access/auth.py without a store: permission matching with RabbitMQ's semantics, and the
in-memory registry (password hashes: test_passwords.py)."""

from __future__ import annotations


import pytest

from logbus.core.access.auth import (
    Access,
    AccessChange,
    InvalidAccess,
    Permission,
    UnknownPermission,
    UnknownUser,
    UnknownVHost,
    parse_tags,
)
from logbus.core.access.passwords import SCRYPT, SHA256
from logbus.core.routing.router import AccessRefused

RABBITMQ_EXPORTED_ALICE = "fOC0HhN9jd35fgdugCrUmtJEDBykNKlPSAkkQrMfQfuWjx2w"  # "secret", by RabbitMQ 3.10.8

# -- permissions --------------------------------------------------------------------------------


def test_permissions_search_unanchored_and_empty_matches_nothing() -> None:
    p = Permission("u", "/", "^cfg-", "", "orders")
    assert p.allows("configure", "cfg-queue") and not p.allows("configure", "my-cfg-queue")
    # "" reads as "^$": no resource has the empty name (the default exchange is amq.default)
    assert not p.allows("write", "anything") and not p.allows("write", "amq.default")
    assert p.allows("read", "orders") and p.allows("read", "eu.orders.v2")  # re:run searches
    full = Permission("u", "/", ".*", ".*", ".*")
    assert all(full.allows(perm, "amq.gen-x") for perm in ("configure", "write", "read"))
    with pytest.raises(InvalidAccess, match="write is not a valid regular expression"):
        Permission("u", "/", ".*", "(", ".*")
    with pytest.raises(InvalidAccess, match="must be a string"):
        Permission("u", "/", ".*", 1, ".*")  # type: ignore[arg-type]


def test_check_names_the_default_exchange_amq_default() -> None:
    access = Access()
    access.put_vhost("/")
    access.put_user("u", password="pw")
    with pytest.raises(AccessRefused) as no_perms:
        access.check("u", "/", "write", "exchange", "x")
    assert str(no_perms.value) == "access to exchange 'x' in vhost '/' refused for user 'u'"
    assert no_perms.value.code == "access_refused"
    access.set_permission("u", "/", "^amq\\.gen-", "^amq\\.default$", "^q$")
    access.check("u", "/", "write", "exchange", "")
    access.check("u", "/", "configure", "queue", "amq.gen-abc")
    access.check("u", "/", "read", "queue", "q")
    with pytest.raises(AccessRefused, match="access to exchange 'amq.default' in vhost '/' refused"):
        access.check("u", "/", "read", "exchange", "")
    with pytest.raises(AccessRefused, match="access to queue 'q2' in vhost '/' refused for user 'u'"):
        access.check("u", "/", "read", "queue", "q2")
    with pytest.raises(AccessRefused, match="in vhost 'other'"):
        access.check("u", "other", "read", "queue", "q")


def test_parse_tags_takes_a_string_or_a_list() -> None:
    assert parse_tags("administrator, monitoring,,") == ("administrator", "monitoring")
    assert parse_tags(["a", " b ", "a"]) == ("a", "b")
    assert parse_tags(None) == parse_tags("") == ()
    with pytest.raises(InvalidAccess):
        parse_tags([1])  # type: ignore[list-item]


# -- the registry in memory ----------------------------------------------------------------------


def test_users_authenticate_and_every_change_bumps_the_version() -> None:
    access = Access(loopback_users=["guest"])
    v0 = access.version
    assert access.put_user("alice", password="secret", tags="administrator")
    assert not access.put_user("alice", password="secret2", tags=["monitoring"])  # replaced
    assert access.version == v0 + 2
    alice = access.user("alice")
    assert alice.tags == ("monitoring",) and not alice.is_administrator
    assert access.authenticate("alice", "secret2") == alice
    assert access.authenticate("alice", "secret") is None
    assert access.authenticate("nobody", "secret2") is None
    access.put_user("bob", password_hash=RABBITMQ_EXPORTED_ALICE)  # a hash RabbitMQ exported
    assert access.user("bob").hashing_algorithm == SHA256
    assert access.authenticate("bob", "secret") is not None
    assert access.user("bob").hashing_algorithm == SCRYPT  # made stronger at the login
    access.put_user("carol")  # neither: no password login at all
    assert access.authenticate("carol", "") is None
    assert access.loopback_only("guest") and not access.loopback_only("alice")
    with pytest.raises(InvalidAccess, match="not both"):
        access.put_user("dave", password="x", password_hash=RABBITMQ_EXPORTED_ALICE)
    for bad in ("", "a\x00b"):
        with pytest.raises(InvalidAccess):
            access.put_user(bad, password="x")
    assert alice.to_json() == {"name": "alice", "password_hash": alice.password_hash,
                               "hashing_algorithm": SCRYPT, "tags": ["monitoring"], "limits": {}}


def test_deleting_a_user_is_announced_first_and_takes_its_permissions() -> None:
    access = Access()
    access.put_vhost("/")
    access.put_vhost("v")
    access.put_user("u", password="pw")
    access.put_user("w", password="pw")
    for vhost in ("/", "v"):
        access.set_permission("u", vhost, ".*", ".*", ".*")
    access.set_permission("w", "v", ".*", ".*", ".*")
    heard: list[tuple[AccessChange, bool]] = []
    access.subscribe(lambda change: heard.append((change, "u" in access.users)))
    version = access.version
    access.delete_user("u")
    assert heard == [(AccessChange("user_deleted", "u"), True)]  # before it was gone
    assert access.version > version
    assert list(access.permissions) == [("w", "v")]
    with pytest.raises(UnknownUser):
        access.delete_user("u")


def test_permissions_need_a_user_and_a_vhost() -> None:
    access = Access()
    access.put_user("u", password="pw")
    with pytest.raises(UnknownVHost):
        access.set_permission("u", "v", ".*", ".*", ".*")
    access.put_vhost("v", "the v", "prod,eu")
    assert access.vhost("v").to_json() == {"name": "v", "description": "the v", "tags": ["prod", "eu"],
                                           "metadata": {"description": "the v", "tags": ["prod", "eu"]}}
    with pytest.raises(UnknownUser):
        access.set_permission("nobody", "v", ".*", ".*", ".*")
    assert access.set_permission("u", "v", ".*", "", "^q")
    assert not access.set_permission("u", "v", ".*", ".*", "^q")
    assert access.get_permission("v", "u").to_json() == {"user": "u", "vhost": "v", "configure": ".*",
                                                        "write": ".*", "read": "^q"}
    access.clear_permission("u", "v")
    with pytest.raises(UnknownPermission):
        access.clear_permission("u", "v")
    assert access.permission("u", "v") is None


def test_topic_permissions_restrict_only_the_exchange_they_name() -> None:
    access = Access()
    access.put_vhost("/")
    access.put_user("dev", password="pw")
    assert access.topic_allowed("dev", "/", "amq.topic", "write", "anything")  # none set: allowed
    assert access.set_topic_permission("dev", "/", "amq.topic", r"^sensors\.", "^cmd\\.{client_id}$")
    assert not access.set_topic_permission("dev", "/", "amq.topic", r"^sensors\.", "^cmd\\.{client_id}$")
    assert access.topic_allowed("dev", "/", "amq.topic", "write", "sensors.t1")
    assert not access.topic_allowed("dev", "/", "amq.topic", "write", "cmd.t1")
    assert access.topic_allowed("dev", "/", "other", "write", "cmd.t1")  # another exchange
    assert access.topic_allowed("other-user", "/", "amq.topic", "write", "cmd.t1")
    # variables are expanded, regex-escaped, at check time
    assert access.topic_allowed("dev", "/", "amq.topic", "read", "cmd.d.1", client_id="d.1")
    assert not access.topic_allowed("dev", "/", "amq.topic", "read", "cmd.dx1", client_id="d.1")
    assert access.list_topic_permissions()[0].to_json() == {
        "user": "dev", "vhost": "/", "exchange": "amq.topic", "write": r"^sensors\.", "read": "^cmd\\.{client_id}$"}
    with pytest.raises(InvalidAccess):
        access.set_topic_permission("dev", "/", "amq.topic", "(", ".*")
    with pytest.raises(UnknownUser):
        access.set_topic_permission("nobody", "/", "amq.topic", ".*", ".*")
    access.clear_topic_permissions("dev", "/", "amq.topic")
    assert access.topic_allowed("dev", "/", "amq.topic", "write", "cmd.t1")
    with pytest.raises(UnknownPermission):
        access.clear_topic_permissions("dev", "/")


def test_topic_permissions_go_with_their_user() -> None:
    access = Access()
    access.put_vhost("/")
    access.put_user("dev", password="pw")
    access.set_topic_permission("dev", "/", "amq.topic", "^$", "^$")
    access.delete_user("dev")
    assert access.list_topic_permissions() == []
