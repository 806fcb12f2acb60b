"""Users, virtual hosts and permissions: who may connect, to which vhost, and do what.

RabbitMQ's model (https://www.rabbitmq.com/docs/access-control), kept in the state
store's ``metadata`` column family (key layout in core/state.py, values in state.proto):

- A **user** has a password hash: scrypt, as logbus makes them, or one of RabbitMQ's
  salted hashes, so a hash exported from RabbitMQ definitions works here unchanged and
  is replaced by scrypt at the user's next login (passwords.py). An empty hash means
  the user cannot log in with a password. Tags (``administrator``, ...) say what the
  HTTP management API lets the user do.
- A **vhost** is a name (plus a description and tags); its exchanges, queues and
  bindings are the definitions stored under that name (core/definitions.py).
- A **permission** is per (user, vhost): three regular expressions, configure, write
  and read, searched (not anchored, as Erlang's ``re:run``) in a resource's name. An
  empty expression matches nothing, as RabbitMQ reads ``""`` as ``"^$"``. The default
  exchange is named ``amq.default`` for these checks. A user without a permission in
  a vhost may not connect to it.

On first boot (no ``auth_seeded`` marker in the store) ``seed()`` creates vhost ``/``
and the default user with the ``administrator`` tag and full permissions on ``/``,
as RabbitMQ does, and the user that MQTT and Kafka clients without credentials act as
(``anonymous_user``, by default ``anonymous``): no password, no tags, and on ``/`` only
publish and consume (write and read ``.*``, configure nothing; decision 0039). After
that the records are the truth: deleting every user does not bring either back.

Theory of operation. Everything is held in memory (dicts) and written through to the
store, one ``WriteBatch`` per logical change. ``version`` goes up on every change, so a
gateway can cache decisions (the AMQP channel caches the write decision per exchange
for basic.publish) and drop the cache when the version it saw is not the current one.
Deleting a user or a vhost is announced to subscribers first (``subscribe``), so
gateways close the connections concerned before the records go.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, Self

from ..errors import LogbusError
from ..routing.log_topics import DEFAULT_VHOST
from ..routing.router import AccessRefused
from ..state import (
    CF_METADATA,
    AUTH_SEEDED_KEY,
    PERMISSION_PREFIX,
    TOPIC_PERMISSION_PREFIX,
    USER_PREFIX,
    VHOST_PREFIX,
    StateBatch,
    StateStore,
    permission_key,
    topic_permission_key,
    user_key,
    vhost_key,
)
from ..state_pb2 import PermissionRecord, ScramCredential as ScramRecord, TopicPermissionRecord, UserRecord, VHostRecord
from .passwords import SCRYPT, SHA256, BadHash, LoginCache, Verdict, check_password_hash, hash_password, refuse, verify
from .scram import ScramCredential, derive_all
from .topic_permissions import TopicPerm, TopicPermission

log = logging.getLogger(__name__)

ADMINISTRATOR: Final = "administrator"
DEFAULT_EXCHANGE_RESOURCE: Final = "amq.default"
DEFAULT_VHOST_DESCRIPTION: Final = "Default virtual host"
FULL_ACCESS: Final = ".*"
ANONYMOUS_USER: Final = "anonymous"  # who clients without credentials act as (anonymous_user)
NO_ACCESS: Final = ""  # RabbitMQ reads "" as "^$": matches nothing

MANAGEMENT: Final = "management"
POLICYMAKER: Final = "policymaker"
MONITORING: Final = "monitoring"

Perm = Literal["configure", "write", "read"]
Kind = Literal["exchange", "queue"]
# "access": use the vhost at all; the others are the management API's, granted by tags
Action = Literal["access", "configure", "write", "read", "manage", "policy", "monitor", "administer"]
# The tags that grant each management action, as RabbitMQ's: management may use the API
# on the vhosts it has permissions in; policymaker adds policies (here: topic settings);
# monitoring adds every vhost's and connection's figures; administrator may do everything.
TAGS_FOR: Final[dict[str, frozenset[str]]] = {
    "manage": frozenset({MANAGEMENT, POLICYMAKER, MONITORING, ADMINISTRATOR}),
    "policy": frozenset({POLICYMAKER, ADMINISTRATOR}),
    "monitor": frozenset({MONITORING, ADMINISTRATOR}),
    "administer": frozenset({ADMINISTRATOR}),
}
REFUSED_TAG: Final = {"manage": "Not management user", "policy": "Not policymaker user",
                      "monitor": "Not monitor user", "administer": "Not administrator user"}  # RabbitMQ's words


@dataclass(frozen=True, slots=True)
class Resource:
    """What ``Doors.authorize`` is asked about: a vhost (action "access"), or an
    exchange or queue in it; with ``routing_key`` (a publish to, or a binding from, a
    topic exchange) the user's topic permission on it too, ``client_id`` filling in
    its ``{client_id}`` variable."""

    vhost: str
    kind: Kind = "exchange"
    name: str = ""
    routing_key: str | None = None
    client_id: str = ""


class UnknownUser(LogbusError):
    code = "unknown_user"


class UnknownVHost(LogbusError):
    code = "unknown_vhost"


class UnknownPermission(LogbusError):
    code = "unknown_permission"


class InvalidAccess(LogbusError):
    """A user, vhost or permission that cannot be stored as given (bad name, bad hash,
    bad regular expression, ...)."""

    code = "bad_request"


# -- the records ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password_hash: str = ""
    hashing_algorithm: str = SCRYPT
    tags: tuple[str, ...] = ()
    scram: tuple[ScramCredential, ...] = ()  # Kafka's SASL/SCRAM credentials (scram.py)

    def scram_credential(self, mechanism: str) -> ScramCredential | None:
        return next((c for c in self.scram if c.mechanism == mechanism), None)

    @property
    def is_administrator(self) -> bool:
        return ADMINISTRATOR in self.tags

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "password_hash": self.password_hash,
                "hashing_algorithm": self.hashing_algorithm, "tags": list(self.tags), "limits": {}}


@dataclass(frozen=True, slots=True)
class VHostInfo:
    name: str
    description: str = ""
    tags: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "description": self.description, "tags": list(self.tags),
                "metadata": {"description": self.description, "tags": list(self.tags)}}


def compile_permission(pattern: str, perm: str) -> re.Pattern[str]:
    """A permission's regular expression, compiled once; RabbitMQ reads "" as "^$"."""
    if not isinstance(pattern, str):
        raise InvalidAccess(f"{perm} must be a string (a regular expression), not {pattern!r}")
    try:
        return re.compile(pattern or "^$")
    except re.error as exc:
        raise InvalidAccess(f"{perm} is not a valid regular expression: {pattern!r} ({exc})") from None


@dataclass(frozen=True, slots=True, eq=False)
class Permission:
    """configure / write / read expressions of one user in one vhost, compiled."""

    user: str
    vhost: str
    configure: str
    write: str
    read: str
    _compiled: dict[str, re.Pattern[str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", {p: compile_permission(getattr(self, p), p)
                                               for p in ("configure", "write", "read")})

    def allows(self, perm: Perm, name: str) -> bool:
        return self._compiled[perm].search(name) is not None

    def to_json(self) -> dict[str, str]:
        return {"user": self.user, "vhost": self.vhost, "configure": self.configure,
                "write": self.write, "read": self.read}


def refused(user: str, vhost: str, kind: Kind, name: str) -> AccessRefused:
    return AccessRefused(f"access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'")


@dataclass(frozen=True, slots=True)
class AccessChange:
    """What subscribers hear: a user or a vhost is about to be deleted."""

    kind: Literal["user_deleted", "vhost_deleted"]
    name: str


def check_name(what: str, name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidAccess(f"{what} name must be a non-empty string")
    if "\x00" in name:
        raise InvalidAccess(f"{what} name may not contain NUL")
    return name


def parse_tags(tags: str | Iterable[str] | None) -> tuple[str, ...]:
    """Tags as RabbitMQ takes them: a comma-separated string or a list; blanks dropped."""
    if tags is None:
        return ()
    items = tags.split(",") if isinstance(tags, str) else list(tags)
    if not all(isinstance(t, str) for t in items):
        raise InvalidAccess(f"tags must be a string or a list of strings, not {tags!r}")
    return tuple(dict.fromkeys(t.strip() for t in items if t.strip()))


# -- the registry -----------------------------------------------------------------------------


class Access:
    """Users, vhosts and permissions of one broker. ``store`` None: memory only."""

    def __init__(self, store: StateStore | None = None, *, loopback_users: Sequence[str] = ("guest",)) -> None:
        self.store = store
        self.loopback_users = frozenset(loopback_users)
        self.users: dict[str, User] = {}
        self.vhosts: dict[str, VHostInfo] = {}
        self.permissions: dict[tuple[str, str], Permission] = {}  # (user, vhost)
        # (user, vhost) -> exchange -> topic permission (topic_permissions.py)
        self.topic_permissions: dict[tuple[str, str], dict[str, TopicPermission]] = {}
        self.version = 0
        self.logins = LoginCache()  # successful logins, so the next costs no KDF (passwords.py)
        self._listeners: list[Callable[[AccessChange], None]] = []

    def subscribe(self, listener: Callable[[AccessChange], None]) -> None:
        self._listeners.append(listener)

    def announce(self, change: AccessChange) -> None:
        for listener in list(self._listeners):
            listener(change)

    # -- loading --------------------------------------------------------------------------

    def open(self, store: StateStore) -> None:
        """Read every record from ``store`` (the broker calls this at start)."""
        self.store = store
        self.users = {r.name: User(r.name, r.password_hash, r.hashing_algorithm or SHA256, tuple(r.tags),
                                   tuple(ScramCredential(c.mechanism, c.salt, c.iterations, c.stored_key,
                                                         c.server_key) for c in r.scram))
                      for r in self._scan(USER_PREFIX, UserRecord)}
        self.vhosts = {r.name: VHostInfo(r.name, r.description, tuple(r.tags))
                       for r in self._scan(VHOST_PREFIX, VHostRecord)}
        self.permissions = {}
        for r in self._scan(PERMISSION_PREFIX, PermissionRecord):
            try:
                self.permissions[(r.user, r.vhost)] = Permission(r.user, r.vhost, r.configure, r.write, r.read)
            except InvalidAccess as exc:  # stored by a Python with another re syntax, say
                log.error("permission of user %r in vhost %r ignored: %s", r.user, r.vhost, exc)
        self.topic_permissions = {}
        for t in self._scan(TOPIC_PERMISSION_PREFIX, TopicPermissionRecord):
            try:
                tp = TopicPermission(t.user, t.vhost, t.exchange, t.write, t.read)
            except ValueError as exc:
                log.error("topic permission of user %r in vhost %r ignored: %s", t.user, t.vhost, exc)
                continue
            self.topic_permissions.setdefault((t.user, t.vhost), {})[t.exchange] = tp
        self.version += 1

    def _scan(self, prefix: bytes, kind: Any) -> list[Any]:
        assert self.store is not None
        return [kind.FromString(v) for _, v in self.store.scan_prefix(CF_METADATA, prefix)]

    def seed(self, user: str, password: str, anonymous: str | None = ANONYMOUS_USER) -> bool:
        """First boot: vhost "/", ``user`` (administrator) with full permissions on it,
        and ``anonymous`` (None: none), unless it is ``user``: no password, no tags,
        publish and consume on "/". Returns False when the store was seeded before
        (nothing is changed then)."""
        if self.store is not None and self.store.get(CF_METADATA, AUTH_SEEDED_KEY) is not None:
            return False
        check_name("user", user)
        vhost = VHostInfo(DEFAULT_VHOST, DEFAULT_VHOST_DESCRIPTION)
        users = [User(user, hash_password(password), SCRYPT, (ADMINISTRATOR,), derive_all(password))]
        perms = [Permission(user, DEFAULT_VHOST, FULL_ACCESS, FULL_ACCESS, FULL_ACCESS)]
        if anonymous is not None and anonymous != user:
            users.append(User(check_name("user", anonymous)))
            perms.append(Permission(anonymous, DEFAULT_VHOST, NO_ACCESS, FULL_ACCESS, FULL_ACCESS))
        with self._write() as b:
            _put_vhost(b, vhost)
            for u in users:
                _put_user(b, u)
            for p in perms:
                _put_permission(b, p)
            b.put(CF_METADATA, AUTH_SEEDED_KEY, b"")
        self.vhosts[vhost.name] = vhost
        self.users.update((u.name, u) for u in users)
        self.permissions.update(((p.user, p.vhost), p) for p in perms)
        self.version += 1
        log.info("first boot: created vhost %r and user %r (administrator)", DEFAULT_VHOST, user)
        if len(users) > 1:
            log.info("first boot: created user %r for clients without credentials: no tags, publish and"
                     " consume on vhost %r (anonymous_user; docs/security.md)", anonymous, DEFAULT_VHOST)
        return True

    # -- questions ---------------------------------------------------------------------------

    def authenticate(self, name: str, password: str) -> User | None:
        """The user ``name`` if ``password`` is its password, else None; on this thread
        (slow: a KDF). The broker does the same in three steps, the KDF on a thread of its
        own: ``login_cached``, then ``login_job`` run there, then ``settle_login``."""
        user = self.login_cached(name, password)
        if user is not None:
            return user
        job, seen = self.login_job(name, password)
        return self.settle_login(name, password, seen, job())

    def login_cached(self, name: str, password: str) -> User | None:
        """The user, when this password logged it in before and its hash has not changed
        since (LoginCache: an HMAC, no KDF); None means ask ``login_job``."""
        user = self.users.get(name)
        if user is None or not self.logins.knows(self.logins.token(name, password), user.password_hash):
            return None
        return user

    def login_job(self, name: str, password: str) -> tuple[Callable[[], Verdict], str]:
        """The check of ``password`` for ``name`` as a job for a worker thread (it reads
        nothing shared), and the stored hash it checks against, for ``settle_login``. An
        unknown name is checked against a dummy hash: as slow as a known one."""
        user = self.users.get(name)
        if user is None:
            return (lambda: refuse(password)), ""
        stored, algorithm, make_scram = user.password_hash, user.hashing_algorithm, not user.scram
        return (lambda: verify(password, stored, algorithm, make_scram=make_scram)), stored

    def settle_login(self, name: str, password: str, seen: str, verdict: Verdict) -> User | None:
        """Back on the reactor with ``verdict`` on the hash ``seen``: the user, if it
        matched and the user still has that hash (its password may have changed
        meanwhile), now with a stronger hash and SCRAM credentials if the verdict made
        them; the login remembered (LoginCache). None: refused."""
        user = self.users.get(name)
        if not verdict.ok or user is None or not seen or user.password_hash != seen:
            return None
        changed = user
        if verdict.upgraded is not None:
            changed = replace(changed, password_hash=verdict.upgraded, hashing_algorithm=SCRYPT)
        if verdict.scram is not None and not changed.scram:
            changed = replace(changed, scram=verdict.scram)
        if changed is not user:
            with self._write() as b:
                _put_user(b, changed)
            self.users[name] = user = changed
            if verdict.upgraded is not None:
                log.info("user %r: password hash upgraded to scrypt at its login", name)
            if verdict.scram is not None:
                log.info("user %r: SCRAM credentials made at its login (Kafka SASL/SCRAM can use them now)", name)
        self.logins.remember(self.logins.token(name, password), user.password_hash)
        return user

    def loopback_only(self, name: str) -> bool:
        """May ``name`` connect only from a loopback address (``loopback_users``)?"""
        return name in self.loopback_users

    def permission(self, user: str, vhost: str) -> Permission | None:
        return self.permissions.get((user, vhost))

    def check(self, user: str, vhost: str, perm: Perm, kind: Kind, name: str) -> None:
        """AccessRefused (403) unless ``user`` may ``perm`` the resource in ``vhost``."""
        if kind == "exchange" and name == "":
            name = DEFAULT_EXCHANGE_RESOURCE
        p = self.permissions.get((user, vhost))
        if p is None or not p.allows(perm, name):
            raise refused(user, vhost, kind, name)

    def user(self, name: str) -> User:
        u = self.users.get(name)
        if u is None:
            raise UnknownUser(f"no user '{name}'")
        return u

    def vhost(self, name: str) -> VHostInfo:
        v = self.vhosts.get(name)
        if v is None:
            raise UnknownVHost(f"no vhost '{name}'")
        return v

    def get_permission(self, vhost: str, user: str) -> Permission:
        p = self.permissions.get((user, vhost))
        if p is None:
            raise UnknownPermission(f"no permissions for user '{user}' in vhost '{vhost}'")
        return p

    # -- changes ---------------------------------------------------------------------------------

    def put_user(self, name: str, *, password: str | None = None, password_hash: str | None = None,
                 hashing_algorithm: str = SHA256, tags: str | Iterable[str] | None = None,
                 scram: tuple[ScramCredential, ...] = ()) -> bool:
        """Create or replace a user (RabbitMQ's PUT /api/users/{name}): with ``password``
        hashed here (slow: the broker hashes on its worker thread and passes the hash,
        Broker.hash_new_password), or a ready ``password_hash`` (with the ``scram``
        credentials of the same password, if known); with neither the user has no
        password. Returns True when the user is new."""
        check_name("user", name)
        if password is not None and password_hash is not None:
            raise InvalidAccess("give password or password_hash, not both")
        if password is not None:
            if not isinstance(password, str):
                raise InvalidAccess("password must be a string")
            stored, algorithm, scram = hash_password(password), SCRYPT, derive_all(password)
        else:
            stored, algorithm = password_hash or "", hashing_algorithm
            if not isinstance(stored, str) or not isinstance(algorithm, str):
                raise InvalidAccess("password_hash and hashing_algorithm must be strings")
            try:
                check_password_hash(stored, algorithm)
            except BadHash as exc:
                raise InvalidAccess(str(exc)) from None
        user = User(name, stored, algorithm, parse_tags(tags), scram)
        new = name not in self.users
        with self._write() as b:
            _put_user(b, user)
        self.users[name] = user
        self.version += 1
        return new

    def delete_user(self, name: str) -> None:
        """Delete a user and its permissions; subscribers hear of it first."""
        self.user(name)
        self.announce(AccessChange("user_deleted", name))
        gone = [key for key in self.permissions if key[0] == name]
        topics = [tp for key, by in self.topic_permissions.items() if key[0] == name for tp in by.values()]
        with self._write() as b:
            b.delete(CF_METADATA, user_key(name))
            for user, vhost in gone:
                b.delete(CF_METADATA, permission_key(vhost, user))
            for tp in topics:
                b.delete(CF_METADATA, topic_permission_key(tp.vhost, tp.user, tp.exchange))
        del self.users[name]
        for key in gone:
            del self.permissions[key]
        for key in [k for k in self.topic_permissions if k[0] == name]:
            del self.topic_permissions[key]
        self.version += 1

    def put_vhost(self, name: str, description: str = "", tags: str | Iterable[str] | None = None) -> bool:
        """Create or update a vhost's record; True when it is new. The broker opens it."""
        check_name("vhost", name)
        if not isinstance(description, str):
            raise InvalidAccess("description must be a string")
        vhost = VHostInfo(name, description, parse_tags(tags))
        new = name not in self.vhosts
        with self._write() as b:
            _put_vhost(b, vhost)
        self.vhosts[name] = vhost
        self.version += 1
        return new

    def forget_vhost(self, name: str, batch: StateBatch | None) -> None:
        """Delete a vhost's record (in ``batch``, with whatever else the broker deletes
        for it: its permissions are under its prefixes) and forget it and its permissions.
        The broker announces the deletion first."""
        if batch is not None:
            batch.delete(CF_METADATA, vhost_key(name))
        self.vhosts.pop(name, None)
        for key in [k for k in self.permissions if k[1] == name]:
            del self.permissions[key]
        for key in [k for k in self.topic_permissions if k[1] == name]:  # their records: the vhost's prefixes
            del self.topic_permissions[key]
        self.version += 1

    def set_permission(self, user: str, vhost: str, configure: str, write: str, read: str) -> bool:
        """Set (or replace) what ``user`` may do in ``vhost``; True when it is new."""
        self.user(user)
        self.vhost(vhost)
        perm = Permission(user, vhost, configure, write, read)  # InvalidAccess for a bad regex
        new = (user, vhost) not in self.permissions
        with self._write() as b:
            _put_permission(b, perm)
        self.permissions[(user, vhost)] = perm
        self.version += 1
        return new

    def clear_permission(self, user: str, vhost: str) -> None:
        self.get_permission(vhost, user)
        with self._write() as b:
            b.delete(CF_METADATA, permission_key(vhost, user))
        del self.permissions[(user, vhost)]
        self.version += 1

    # -- topic permissions (topic_permissions.py) -------------------------------------------------

    def topic_allowed(self, user: str, vhost: str, exchange: str, perm: TopicPerm, key: str,
                      client_id: str = "") -> bool:
        """Whether ``user`` may publish with (``write``) or bind with (``read``) routing
        key ``key`` on topic exchange ``exchange``: yes unless a topic permission for it
        says otherwise."""
        by = self.topic_permissions.get((user, vhost))
        if not by:
            return True
        tp = by.get(exchange)
        return tp is None or tp.allows(perm, key, client_id)

    def check_topic(self, user: str, vhost: str, exchange: str, perm: TopicPerm, key: str,
                    client_id: str = "") -> None:
        """AccessRefused (403) unless ``topic_allowed``, in RabbitMQ's words."""
        if not self.topic_allowed(user, vhost, exchange, perm, key, client_id):
            raise AccessRefused(f"{perm} access to topic '{key}' in exchange '{exchange}' in vhost '{vhost}' "
                                f"refused for user '{user}'")

    def restricts_topics(self, user: str, vhost: str, exchange: str) -> bool:
        """Whether ``user`` has a topic permission on ``exchange`` in ``vhost``."""
        by = self.topic_permissions.get((user, vhost))
        return by is not None and exchange in by

    def set_topic_permission(self, user: str, vhost: str, exchange: str, write: str, read: str) -> bool:
        """Set (or replace) ``user``'s topic permission on ``exchange`` in ``vhost``; True
        when it is new. InvalidAccess for an expression that does not compile."""
        self.user(user)
        self.vhost(vhost)
        try:
            tp = TopicPermission(user, vhost, exchange, write, read)
        except ValueError as exc:
            raise InvalidAccess(str(exc)) from None
        by = self.topic_permissions.setdefault((user, vhost), {})
        new = exchange not in by
        with self._write() as b:
            b.put(CF_METADATA, topic_permission_key(vhost, user, exchange),
                  TopicPermissionRecord(user=user, vhost=vhost, exchange=exchange, write=write, read=read))
        by[exchange] = tp
        self.version += 1
        return new

    def clear_topic_permissions(self, user: str, vhost: str, exchange: str | None = None) -> None:
        """Remove ``user``'s topic permissions in ``vhost`` (only on ``exchange`` if given);
        UnknownPermission if there is none."""
        by = self.topic_permissions.get((user, vhost), {})
        gone = [x for x in by if exchange is None or x == exchange]
        if not gone:
            raise UnknownPermission(f"no topic permissions for user '{user}' in vhost '{vhost}'"
                                    + (f" on exchange '{exchange}'" if exchange is not None else ""))
        with self._write() as b:
            for x in gone:
                b.delete(CF_METADATA, topic_permission_key(vhost, user, x))
        for x in gone:
            del by[x]
        if not by:
            self.topic_permissions.pop((user, vhost), None)
        self.version += 1

    def list_topic_permissions(self) -> list[TopicPermission]:
        return [tp for key in sorted(self.topic_permissions) for _, tp in sorted(self.topic_permissions[key].items())]

    def _write(self) -> StateBatch | _NoStore:
        """One synced WriteBatch; memory is changed after it committed."""
        return _NoStore() if self.store is None else self.store.batch(sync=True)


class _NoStore:
    """The batch of an Access without a store: writes nothing."""

    def put(self, cf: str, key: bytes, value: object) -> None:
        pass

    def delete(self, cf: str, key: bytes) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _put_user(b: StateBatch | _NoStore, u: User) -> None:
    scram = [ScramRecord(mechanism=c.mechanism, salt=c.salt, iterations=c.iterations, stored_key=c.stored_key,
                         server_key=c.server_key) for c in u.scram]
    b.put(CF_METADATA, user_key(u.name), UserRecord(name=u.name, password_hash=u.password_hash,
                                                    hashing_algorithm=u.hashing_algorithm, tags=list(u.tags),
                                                    scram=scram))


def _put_vhost(b: StateBatch | _NoStore, v: VHostInfo) -> None:
    b.put(CF_METADATA, vhost_key(v.name), VHostRecord(name=v.name, description=v.description, tags=list(v.tags)))


def _put_permission(b: StateBatch | _NoStore, p: Permission) -> None:
    b.put(CF_METADATA, permission_key(p.vhost, p.user),
          PermissionRecord(user=p.user, vhost=p.vhost, configure=p.configure, write=p.write, read=p.read))


