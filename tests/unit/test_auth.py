"""core/access/auth.py without a store: RabbitMQ's password hashes (known vectors), permission
matching with RabbitMQ's semantics, and the in-memory registry."""

from __future__ import annotations

import base64
import hashlib

import pytest

from logbus.core.access.auth import (
    MD5,
    SHA256,
    SHA512,
    Access,
    AccessChange,
    InvalidAccess,
    Permission,
    UnknownPermission,
    UnknownUser,
    UnknownVHost,
    check_password,
    check_password_hash,
    hash_password,
    parse_tags,
)
from logbus.core.routing.router import AccessRefused

# RabbitMQ's passwords guide computes this one step by step: salt 908D C60A, password
# "test12", SHA-256. We compute it with the documented algorithm and get its answer.
DOC_SALT = bytes.fromhex("908DC60A")
DOC_HASH = "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"
# Exported by RabbitMQ 3.10.8 (rabbitmqctl add_user, then export_definitions).
RABBITMQ_EXPORTED = [("alice", "secret", "fOC0HhN9jd35fgdugCrUmtJEDBykNKlPSAkkQrMfQfuWjx2w"),
                     ("guest", "guest", "muzXjl3WLTEGoPuMjupiTcu9thvDfHuAuf5Pkv1fQ3N1Xeb8")]


# -- password hashes ---------------------------------------------------------------------------


def test_the_documented_rabbitmq_vector() -> None:
    expected = base64.b64encode(DOC_SALT + hashlib.sha256(DOC_SALT + b"test12").digest()).decode()
    assert expected == DOC_HASH
    assert hash_password("test12", salt=DOC_SALT) == DOC_HASH
    raw = base64.b64decode(DOC_HASH)
    assert len(raw) == 36 and raw[:4] == DOC_SALT  # 4 bytes of salt, then the SHA-256 digest
    assert check_password("test12", DOC_HASH)
    assert not check_password("test13", DOC_HASH)


@pytest.mark.parametrize(("user", "password", "stored"), RABBITMQ_EXPORTED)
def test_hashes_exported_from_rabbitmq_verify(user: str, password: str, stored: str) -> None:
    assert check_password(password, stored, SHA256)
    assert not check_password(password + "x", stored, SHA256)
    check_password_hash(stored, SHA256)  # accepted as a password_hash on PUT


def test_hashes_are_salted_and_other_algorithms_verify() -> None:
    a, b = hash_password("pw"), hash_password("pw")
    assert a != b and check_password("pw", a) and check_password("pw", b)
    for algorithm, size in ((SHA512, 4 + 64), (MD5, 4 + 16)):
        h = hash_password("pässwörd", algorithm)  # UTF-8, as RabbitMQ hashes it
        assert len(base64.b64decode(h)) == size
        assert check_password("pässwörd", h, algorithm)
        assert not check_password("pässwörd", h, SHA256)


def test_malformed_hashes_match_nothing() -> None:
    for stored in ("", "not base64!", "AAAA", base64.b64encode(b"abc").decode()):
        assert not check_password("", stored)
    assert not check_password("test12", DOC_HASH, "rabbit_password_hashing_rot13")
    with pytest.raises(InvalidAccess, match="decodes to 3 bytes"):
        check_password_hash(base64.b64encode(b"abc").decode(), SHA256)
    with pytest.raises(InvalidAccess, match="not base64"):
        check_password_hash("***", SHA256)
    with pytest.raises(InvalidAccess, match="unknown hashing_algorithm"):
        check_password_hash(DOC_HASH, "sha3")
    check_password_hash("", SHA256)  # no password: allowed


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
    access.put_user("bob", password_hash=RABBITMQ_EXPORTED[0][2])  # alice's RabbitMQ hash
    assert access.authenticate("bob", "secret") is not None
    access.put_user("carol")  # neither: no password login at all
    assert access.authenticate("carol", "") is None
    assert access.loopback_only("guest") and not access.loopback_only("alice")
    with pytest.raises(InvalidAccess, match="not both"):
        access.put_user("dave", password="x", password_hash=DOC_HASH)
    for bad in ("", "a\x00b"):
        with pytest.raises(InvalidAccess):
            access.put_user(bad, password="x")
    assert alice.to_json() == {"name": "alice", "password_hash": alice.password_hash,
                               "hashing_algorithm": SHA256, "tags": ["monitoring"], "limits": {}}


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
