"""The ``Doors`` service (``ports.Doors``): every gateway's way in. It owns the client
connections (core/connections.py) and answers who may log in and the one access check
every gateway asks (``authorize``), from the users, vhosts and permissions of ``Access``
(auth.py); and it tells gateways about the memory and disk alarms. The broker makes it
(``broker.doors``) and hands it to each gateway.

    doors.authenticate(user, password, loopback=...)        # Deferred; LoginRefused, LoopbackOnly
    doors.hash_new_password(password)                       # Deferred[NewPassword], for put_user
    doors.authenticate_certificate(user, loopback=...)      # a verified TLS client certificate
    doors.authenticate_anonymous(user, loopback=...)        # no credentials: loopback only
    doors.authorize(user, "write", Resource("/", "exchange", "orders", routing_key="k"))
    doors.authorize_topic(user, "read", "prod@orders")      # the vhost is in the topic's name
    doors.authorize(user, "monitor", Resource(""))          # a tag's action (the HTTP API's)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from twisted.internet.defer import Deferred, fail, succeed
from twisted.python.failure import Failure

from ..errors import AccessRefused, LoginRefused, LoopbackOnly
from ..routing.log_topics import topic_exchange
from .auth import REFUSED_TAG, TAGS_FOR, Access, AccessChange, Action, Perm, Resource, User
from .passwords import SCRYPT, PasswordWorker, hash_password
from .scram import ScramCredential, derive_all

if TYPE_CHECKING:
    from ..connections import ConnectionRecord, Connections
    from ..pressure import ResourceMonitor


@dataclass(frozen=True, slots=True)
class NewPassword:
    """A password as ``Access.put_user`` stores it, hashed off the reactor."""

    password_hash: str
    scram: tuple[ScramCredential, ...]
    hashing_algorithm: str = SCRYPT


class Doors:
    def __init__(self, access: Access, connections: Connections, pressure: ResourceMonitor,
                 password_worker: PasswordWorker[Any], *, anonymous_user: str) -> None:
        self.access = access
        self.connections = connections
        self.pressure = pressure
        self.password_worker = password_worker  # the KDF's thread (passwords.py)
        self.anonymous_user = anonymous_user  # made on first boot beside the default user (auth.py)
        self._logins: dict[bytes, list[Deferred[User | None]]] = {}  # checks under way: token -> who waits

    # -- connections ---------------------------------------------------------------------

    def connection_opened(self, protocol: str, peer: str, *, tls: bool,
                          close: Callable[[str], object]) -> ConnectionRecord:
        """Register a client connection; the gateway sets its user, vhost and client id on
        the record as it learns them, and calls ``connection_closed`` when it ends.
        ``close(reason)`` closes it in the protocol's terms (``Connections.close``)."""
        return self.connections.open(protocol, peer, tls=tls, close=close)

    def connection_closed(self, connection: ConnectionRecord, lost: str = "") -> None:
        """``lost``: how the transport ended, for the log line (core/connections.py)."""
        self.connections.closed(connection, lost)

    def connection_logged_in(self, connection: ConnectionRecord | None, user: str, vhost: str = "",
                             how: str = "") -> None:
        """The connection acts as ``user`` (in ``vhost``) now: set on its record, logged."""
        if connection is not None:
            self.connections.logged_in(connection, user, vhost, how)

    def connection_refused(self, connection: ConnectionRecord | None, user: str, reason: str) -> float:
        """A login (or a vhost) refused on the connection: logged with who tried and why.
        Returns the seconds the gateway should wait before it answers: repeated failures
        from one host are slowed down (throttle.py)."""
        return self.connections.refused(connection, user, reason)

    def on_alarms(self, listener: Callable[[frozenset[str]], None]) -> frozenset[str]:
        """``listener(alarms)`` whenever the memory or disk alarms change; returns the
        alarms now (core/pressure.py)."""
        self.pressure.subscribe(listener)
        return self.pressure.alarms

    # -- logins and the access check -------------------------------------------------------

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
