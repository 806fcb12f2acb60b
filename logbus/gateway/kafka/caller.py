"""Who a Kafka request comes from: what every handler is given beside the request.

``advertised`` is the address the client connected to (Metadata and FindCoordinator
answer it); ``user`` the logbus user whose permissions decide (Doors.authorize): the one
SASL authenticated (sasl.py), else, on a connection that never started SASL, the user an
anonymous connection acts as when ``kafka_anonymous`` lets it in (``anonymous_user``), else
None: such a connection may only ask ApiVersions and authenticate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...core.types import ConnectionRecord
    from .sasl import SaslSession


@dataclass(slots=True, eq=False)
class Caller:
    advertised: tuple[str, int]
    anonymous: str | None = None  # the user of an unauthenticated connection, if it may have one
    peer: str = "?"  # host:port, for the log
    loopback: bool = False  # the peer is a loopback address
    record: ConnectionRecord | None = None  # in the broker's connection registry
    sasl: SaslSession | None = None  # set by a SaslHandshake
    close_after_answer: bool = False  # a failed authentication: the connection ends once it is told

    @property
    def user(self) -> str | None:
        if self.sasl is not None:
            return self.sasl.user
        return self.anonymous
