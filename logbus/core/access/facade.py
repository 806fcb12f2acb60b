"""The access half of the Broker facade: who may log in, and the one access check every
gateway asks (``authorize``). ``Broker`` inherits it; everything here reads the broker's
``Access`` (users, vhosts, permissions: auth.py).

    broker.authenticate(user, password, loopback=...)        # Deferred; LoginRefused, LoopbackOnly
    broker.hash_new_password(password)                       # Deferred[NewPassword], for put_user
    broker.authenticate_certificate(user, loopback=...)      # a verified TLS client certificate
    broker.authenticate_anonymous(user, loopback=...)        # no credentials: loopback only
    broker.authorize(user, "write", Resource("/", "exchange", "orders", routing_key="k"))
    broker.authorize_topic(user, "read", "prod@orders")      # the vhost is in the topic's name
    broker.authorize(user, "monitor", Resource(""))          # a tag's action (the HTTP API's)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from twisted.internet.defer import Deferred, fail, succeed
from twisted.python.failure import Failure

from ..errors import AccessRefused, LoginRefused, LoopbackOnly
from ..routing.log_topics import topic_exchange
from .auth import REFUSED_TAG, TAGS_FOR, Access, AccessChange, Action, Perm, Resource, User
from .passwords import SCRYPT, PasswordWorker, hash_password
from .scram import ScramCredential, derive_all


@dataclass(frozen=True, slots=True)
class NewPassword:
    """A password as ``Access.put_user`` stores it, hashed off the reactor."""

    password_hash: str
    scram: tuple[ScramCredential, ...]
    hashing_algorithm: str = SCRYPT


class AccessFacade:
    access: Access
    password_worker: PasswordWorker[Any]  # the KDF's thread (passwords.py)
    _logins: dict[bytes, list[Deferred[User | None]]]  # checks under way: token -> who waits

    def authenticate(self, user: str, password: str, *, loopback: bool) -> Deferred[None]:
        """Fires when ``user`` may log in with ``password``, at once if it did before with
        it (LoginCache), else once the KDF has run on the password thread; fails with
        LoginRefused (bad user name or password) or LoopbackOnly (``user`` may connect
        from loopback only, and ``loopback`` is False). Logins with the same user and
        password asked while one is checked wait for that one check."""
        a = self.access
        known = a.login_cached(user, password)
        if known is not None:
            try:
                self._check_loopback(user, loopback)
            except LoopbackOnly as exc:
                return fail(exc)
            return succeed(None)
        token = a.logins.token(user, password)
        d: Deferred[User | None] = Deferred()
        waiting = self._logins.get(token)
        if waiting is not None:
            waiting.append(d)
        else:
            self._logins[token] = [d]
            job, seen = a.login_job(user, password)
            check = self.password_worker.run(job)
            check.addCallback(lambda verdict: a.settle_login(user, password, seen, verdict))
            check.addBoth(self._login_checked, token)
        return d.addCallback(self._logged_in, user, loopback)

    def _login_checked(self, result: Any, token: bytes) -> None:
        for d in self._logins.pop(token, []):
            if isinstance(result, Failure):
                d.errback(result)
            else:
                d.callback(result)

    def _logged_in(self, found: User | None, user: str, loopback: bool) -> None:
        if found is None:
            raise LoginRefused(f"bad user name or password for user '{user}'")
        self._check_loopback(user, loopback)

    def _check_loopback(self, user: str, loopback: bool) -> None:
        if self.access.loopback_only(user) and not loopback:
            raise LoopbackOnly(f"user '{user}' can only connect via localhost")

    def hash_new_password(self, password: str) -> Deferred[NewPassword]:
        """``password`` hashed (scrypt) with its SCRAM credentials made, on the password
        thread: what ``access.put_user(password_hash=..., scram=...)`` stores."""
        return self.password_worker.run(lambda: NewPassword(hash_password(password), derive_all(password)))

    def authenticate_certificate(self, user: str, *, loopback: bool) -> None:
        """A client certificate verified by a TLS listener names ``user`` (RabbitMQ's
        EXTERNAL): LoginRefused when there is no such user, LoopbackOnly as
        ``authenticate``. No password is asked: the certificate is the credential."""
        self._passwordless(user, loopback, "the client certificate")

    def authenticate_anonymous(self, user: str, *, loopback: bool) -> None:
        """A connection without credentials acts as ``user`` (``anonymous_user``), from a
        loopback address only: LoginRefused otherwise, or when there is no such user."""
        if not loopback:
            raise LoginRefused("anonymous access is refused beyond loopback: log in as a user")
        self._passwordless(user, loopback, "anonymous connections (anonymous_user)")

    def _passwordless(self, user: str, loopback: bool, what: str) -> None:
        if user not in self.access.users:
            raise LoginRefused(f"no user '{user}' for {what}")
        if self.access.loopback_only(user) and not loopback:
            raise LoopbackOnly(f"user '{user}' can only connect via localhost")

    def loopback_only(self, user: str) -> bool:
        """Whether ``user`` may log in from a loopback address only (``loopback_users``)."""
        return self.access.loopback_only(user)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """``user``'s SCRAM credential for ``mechanism`` (SCRAM-SHA-256, SCRAM-SHA-512), or
        None: no such user, or none made yet (a hash imported alone gets them at its next
        login with the password; core/access/scram.py)."""
        u = self.access.users.get(user)
        return None if u is None else u.scram_credential(mechanism)

    def authorize(self, user: str, action: Action, resource: Resource) -> None:
        """THE access check of every gateway: raises AccessRefused unless ``user`` may do
        ``action`` to ``resource`` (RabbitMQ's model: permissions per vhost with
        configure / write / read expressions, topic permissions by routing key)."""
        a = self.access
        if action == "configure" or action == "write" or action == "read":
            a.check(user, resource.vhost, action, resource.kind, resource.name)
            key = resource.routing_key
            if key is not None and action != "configure" and a.restricts_topics(user, resource.vhost, resource.name):
                a.check_topic(user, resource.vhost, resource.name, action, key, resource.client_id)
            return
        if action == "access":
            if a.permission(user, resource.vhost) is None:
                raise AccessRefused(f"access to vhost '{resource.vhost}' refused for user '{user}'")
            return
        tags = TAGS_FOR[action]  # the management API's actions
        u = a.users.get(user)
        if u is None or tags.isdisjoint(u.tags):
            raise AccessRefused(REFUSED_TAG[action])

    def authorize_topic(self, user: str, action: Perm, topic: str, key: str | None = None) -> None:
        """``authorize`` on the exchange a log topic stands for (``topic_exchange``: the
        vhost is in the topic's name), the way every protocol that names topics checks:
        write to produce or publish (with ``key``, the record key, as the routing key of
        a topic permission), read to fetch or pop, configure to create, alter or delete."""
        vhost, exchange = topic_exchange(topic)
        self.authorize(user, action, Resource(vhost, "exchange", exchange, routing_key=key))

    def sees_vhost(self, user: str, vhost: str) -> bool:
        """Whether the management API shows ``user`` what is in ``vhost``: a monitoring
        user (or an administrator) sees every vhost, any other only those it has a
        permission in (as RabbitMQ's management plugin)."""
        u = self.access.users.get(user)
        if u is None:
            return False
        return not TAGS_FOR["monitor"].isdisjoint(u.tags) or self.access.permission(user, vhost) is not None

    def topic_restricted(self, user: str, vhost: str, exchange: str) -> bool:
        """Whether ``user`` has a topic permission on ``exchange``: then whether it may
        publish or bind depends on each routing key (``authorize`` with one)."""
        return self.access.restricts_topics(user, vhost, exchange)

    def on_access_change(self, listener: Callable[[AccessChange], None]) -> None:
        """``listener(change)`` before a user or vhost is deleted (a gateway closes their
        connections first)."""
        self.access.subscribe(listener)

    @property
    def access_version(self) -> int:
        """Bumped by every change of users and permissions: a gateway that caches what
        ``authorize`` said checks again when it moves."""
        return self.access.version
