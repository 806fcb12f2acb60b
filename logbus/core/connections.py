"""The registry of every client connection of every protocol (``Broker.connections``).

Each gateway registers a connection when it is made (``open``: protocol, peer, TLS or
not, and how to close it) and says when it ends (``closed``); what the connection learns
later (the user it logged in as, its vhost, the name the client gave and the client
software it runs) it sets on its ``ConnectionRecord``, and it counts what it carries
(``received`` and ``sent`` messages, ``bytes_in`` and ``bytes_out``). The operator's view (the HTTP API, the CLI) lists them and
closes one by id (``close``), whatever its protocol; each gateway closes in its own
terms (AMQP: connection.close 320 CONNECTION_FORCED; MQTT 5: DISCONNECT 0x98).

Nothing here touches a socket or a protocol: a record is plain data plus the close
callable its gateway gave.

The log (logger ``logbus.connections``) has one line for each connection accepted, logged
in (``logged_in``: the user and vhost), refused (``refused``: who tried and why, a
warning) and closed (with its user, how long it lasted and what it carried), each with
the connection's id, protocol, peer and whether it is TLS, as RabbitMQ logs its
connections. An HTTP connection's accepted, logged-in and closed lines are at debug
level: a client polling the API (a health check, a dashboard) would otherwise fill the
log, and RabbitMQ and Mosquitto keep HTTP requests to an access log too; its refusals
are warnings as any protocol's.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .access.throttle import LoginThrottle

PROTOCOLS = ("amqp", "mqtt", "kafka", "http")
CLIENT_TEXT_MAX = 255  # characters kept of what a client says of itself (its name, product, version)
log = logging.getLogger("logbus.connections")
# the level of a connection's accepted, logged-in and closed lines, per protocol
LEVELS = {"amqp": logging.INFO, "mqtt": logging.INFO, "kafka": logging.INFO, "http": logging.DEBUG}


@dataclass(slots=True, eq=False)
class ConnectionRecord:
    id: int
    protocol: str  # one of PROTOCOLS
    peer: str  # host:port
    tls: bool
    opened_ms: int  # epoch ms
    close_with: Callable[[str], object] = field(repr=False)  # closes it, with a reason for the client
    user: str = ""  # once logged in
    login: str = ""  # how (the mechanism, "anonymous"), when the gateway says
    vhost: str = ""
    client_id: str = ""  # the name the client gave: MQTT client id, Kafka client.id, AMQP connection_name
    client_product: str = ""  # its software, where the protocol says: AMQP client properties' product,
    client_version: str = ""  # ... and version; Kafka ApiVersions' client_software_name and _version
    received: int = 0  # messages from the client
    confirmed: int = 0  # ... of which confirmed to it (AMQP confirms, MQTT PUBACK/PUBREC, Kafka acks)
    sent: int = 0  # messages to the client (Kafka: the records of its fetches)
    bytes_in: int = 0
    bytes_out: int = 0
    close_reason: str = ""  # why the broker closed it, when it did (an administrator, a timeout)

    @property
    def host(self) -> str:
        """The peer's host, without its port."""
        return self.peer.rsplit(":", 1)[0]

    def fields(self, event: str, **more: object) -> dict[str, object]:
        """The structured form of a log line about it (``log_format = "json"``)."""
        return {"connection": {"event": event, "id": self.id, "protocol": self.protocol, "peer": self.peer,
                               "tls": self.tls, "user": self.user or None, "vhost": self.vhost or None,
                               "client_id": self.client_id or None, **more}}

    def describe(self) -> str:
        """"amqp connection 7 from 127.0.0.1:5555 (TLS)": how the log names it."""
        return f"{self.protocol} connection {self.id} from {self.peer}{' (TLS)' if self.tls else ''}"

    def client_said(self, *, name: str | None = None, product: str = "", version: str = "") -> None:
        """What the client says of itself (``name`` None: unchanged), each cut at
        CLIENT_TEXT_MAX characters."""
        if name is not None:
            self.client_id = name[:CLIENT_TEXT_MAX]
        self.client_product, self.client_version = product[:CLIENT_TEXT_MAX], version[:CLIENT_TEXT_MAX]

    @property
    def connected_at(self) -> str:
        """When it was accepted, in UTC: "2026-12-06T15:51:34.123Z"."""
        return utc_iso(self.opened_ms)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "protocol": self.protocol, "peer": self.peer, "tls": self.tls,
                "opened_ms": self.opened_ms, "connected_at": self.connected_at, "user": self.user,
                "vhost": self.vhost, "client_id": self.client_id, "client_product": self.client_product,
                "client_version": self.client_version, "received": self.received, "sent": self.sent,
                "bytes_in": self.bytes_in, "bytes_out": self.bytes_out}


def utc_iso(ms: int) -> str:
    """Epoch ms as an ISO 8601 UTC time to the millisecond, with "Z"."""
    secs, milli = divmod(ms, 1000)
    return dt.datetime.fromtimestamp(secs, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{milli:03d}Z"


class Connections:
    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock  # epoch ms
        self.throttle = LoginThrottle(lambda: self.clock() / 1000)  # failed logins per source host
        self._open: dict[int, ConnectionRecord] = {}
        self._ids = itertools.count(1)
        self.closes = 0  # connections closed so far
        # per protocol, the messages received and sent by connections closed so far
        self._closed_counts = {p: [0, 0, 0] for p in PROTOCOLS}

    def open(self, protocol: str, peer: str, *, tls: bool, close: Callable[[str], object]) -> ConnectionRecord:
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {protocol!r}")
        c = ConnectionRecord(next(self._ids), protocol, peer, tls, self.clock(), close)
        self._open[c.id] = c
        log.log(LEVELS[protocol], "%s accepted", c.describe(), extra={"fields": c.fields("accepted")})
        return c

    def logged_in(self, c: ConnectionRecord, user: str, vhost: str = "", how: str = "") -> None:
        """``c`` acts as ``user`` (in ``vhost``) from now on; ``how``: the mechanism."""
        if (c.user, c.vhost, c.login) == (user, vhost or c.vhost, how or c.login):
            return  # an HTTP connection's next request, say
        c.user = user
        c.vhost = vhost or c.vhost
        c.login = how or c.login
        self.throttle.succeeded(c.host)
        log.log(LEVELS[c.protocol], "%s: user %r logged in%s%s", c.describe(), user, f" to vhost {c.vhost!r}" if c.vhost else "",
                 f" ({how})" if how else "", extra={"fields": c.fields("logged_in", login=c.login or None)})

    def refused(self, c: ConnectionRecord | None, user: str, reason: str) -> float:
        """A login or a vhost refused on ``c``: who tried, and why. Returns how many
        seconds the gateway waits before it says so (failed logins from one host are
        slowed down after a burst: access/throttle.py)."""
        delay = self.throttle.failed(c.host) if c is not None else 0.0
        log.warning("%s: login refused for user %r: %s%s", c.describe() if c else "a connection", user, reason,
                    f" (answered after {delay:.1f} s: repeated failures from {c.host})" if c and delay else "")
        return delay

    def closed(self, c: ConnectionRecord, lost: str = "") -> None:
        """``c`` is gone; ``lost``: how its transport ended (the gateway's word for it),
        unless the broker said why it closed it (``close_reason``)."""
        if self._open.pop(c.id, None) is not None:
            self.closes += 1
            counts = self._closed_counts[c.protocol]
            counts[0] += c.received
            counts[1] += c.sent
            counts[2] += c.confirmed
            reason = c.close_reason or lost or "closed"
            ms = self.clock() - c.opened_ms
            log.log(LEVELS[c.protocol], "%s closed (%s): %s, %.1f s, %d messages in, %d out, %d bytes in, %d out",
                    c.describe(), reason, f"user {c.user!r}" if c.user else "no login", ms / 1000, c.received,
                    c.sent, c.bytes_in, c.bytes_out,
                    extra={"fields": c.fields("closed", reason=reason, duration_ms=ms, received=c.received,
                                              sent=c.sent, bytes_in=c.bytes_in, bytes_out=c.bytes_out)})

    def message_counts(self) -> dict[str, dict[str, int]]:
        """Per protocol, the messages every connection since start received, confirmed
        and sent."""
        out = {p: list(n) for p, n in self._closed_counts.items()}
        for c in self._open.values():
            n = out[c.protocol]
            n[0] += c.received
            n[1] += c.sent
            n[2] += c.confirmed
        return {p: {"received": n[0], "confirmed": n[2], "sent": n[1]} for p, n in out.items()}

    def get(self, id: int) -> ConnectionRecord | None:
        return self._open.get(id)

    def __iter__(self) -> Iterator[ConnectionRecord]:
        return iter(list(self._open.values()))

    def __len__(self) -> int:
        return len(self._open)

    def list(self, protocol: str | None = None) -> list[ConnectionRecord]:
        return [c for c in self._open.values() if protocol is None or c.protocol == protocol]

    def close(self, id: int, reason: str = "closed by an administrator") -> bool:
        """Close connection ``id`` in its protocol's terms; False when there is none."""
        c = self._open.get(id)
        if c is None:
            return False
        c.close_reason = c.close_reason or reason
        c.close_with(reason)
        return True
