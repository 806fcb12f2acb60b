"""The registry of every client connection of every protocol (``Broker.connections``).

Each gateway registers a connection when it is made (``open``: protocol, peer, TLS or
not, and how to close it) and says when it ends (``closed``); what the connection learns
later (the user it logged in as, its vhost, its client id) it sets on its
``ConnectionRecord``, and it counts what it carries (``received`` and ``sent``
messages, ``bytes_in``). The operator's view (the HTTP API, the CLI) lists them and
closes one by id (``close``), whatever its protocol; each gateway closes in its own
terms (AMQP: connection.close 320 CONNECTION_FORCED; MQTT 5: DISCONNECT 0x98).

Nothing here touches a socket or a protocol: a record is plain data plus the close
callable its gateway gave.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

PROTOCOLS = ("amqp", "mqtt", "kafka", "http")


@dataclass(slots=True, eq=False)
class ConnectionRecord:
    id: int
    protocol: str  # one of PROTOCOLS
    peer: str  # host:port
    tls: bool
    opened_ms: int  # epoch ms
    close_with: Callable[[str], object] = field(repr=False)  # closes it, with a reason for the client
    user: str = ""  # once logged in
    vhost: str = ""
    client_id: str = ""  # MQTT client id, Kafka client.id, AMQP connection_name
    received: int = 0  # messages from the client
    sent: int = 0  # messages to the client
    bytes_in: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "protocol": self.protocol, "peer": self.peer, "tls": self.tls,
                "opened_ms": self.opened_ms, "user": self.user, "vhost": self.vhost, "client_id": self.client_id,
                "received": self.received, "sent": self.sent, "bytes_in": self.bytes_in}


class Connections:
    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock  # epoch ms
        self._open: dict[int, ConnectionRecord] = {}
        self._ids = itertools.count(1)
        self.closes = 0  # connections closed so far

    def open(self, protocol: str, peer: str, *, tls: bool, close: Callable[[str], object]) -> ConnectionRecord:
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {protocol!r}")
        c = ConnectionRecord(next(self._ids), protocol, peer, tls, self.clock(), close)
        self._open[c.id] = c
        return c

    def closed(self, c: ConnectionRecord) -> None:
        if self._open.pop(c.id, None) is not None:
            self.closes += 1

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
        c.close_with(reason)
        return True
