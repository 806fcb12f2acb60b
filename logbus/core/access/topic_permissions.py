"""Topic permissions: RabbitMQ's authorisation of routing keys on topic exchanges.

A user's permissions in a vhost (``auth.Permission``) say which exchanges and queues it
may write to and read from. A topic permission narrows that, for one topic exchange, to
routing keys: ``write``, a regular expression a publish's routing key must match;
``read``, one a binding key (an MQTT subscription's filter, mapped to AMQP) must match.
As in RabbitMQ, a user without a topic permission for an exchange is not restricted
there, an empty expression matches nothing, and ``{username}``, ``{vhost}`` and
``{client_id}`` in an expression stand for the user, the vhost and the MQTT client
identifier (regex-escaped) at check time.

The MQTT gateway checks them on every PUBLISH (``amq.topic``, write, the routing key of
the MQTT topic) and SUBSCRIBE (read, the binding key of the filter): PUBACK/PUBREC
0x87 and SUBACK 0x87 (3.1.1: 0x80) when refused.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Literal

TopicPerm = Literal["write", "read"]
_VARIABLES = ("{username}", "{vhost}", "{client_id}")


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern or "^$")


def _check(pattern: str, what: str) -> str:
    if not isinstance(pattern, str):
        raise ValueError(f"{what} must be a string (a regular expression), not {pattern!r}")
    try:
        _compiled(_expand(pattern, "u", "v", "c"))
    except re.error as exc:
        raise ValueError(f"{what} is not a valid regular expression: {pattern!r} ({exc})") from None
    return pattern


def _expand(pattern: str, user: str, vhost: str, client_id: str) -> str:
    if "{" not in pattern:
        return pattern
    return (pattern.replace("{username}", re.escape(user)).replace("{vhost}", re.escape(vhost))
            .replace("{client_id}", re.escape(client_id)))


@dataclass(frozen=True, slots=True)
class TopicPermission:
    user: str
    vhost: str
    exchange: str
    write: str
    read: str
    _variables: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """ValueError for an expression that does not compile."""
        _check(self.write, "write")
        _check(self.read, "read")
        object.__setattr__(self, "_variables", any(v in p for v in _VARIABLES for p in (self.write, self.read)))

    def allows(self, perm: TopicPerm, key: str, client_id: str = "") -> bool:
        pattern = self.write if perm == "write" else self.read
        if self._variables:
            pattern = _expand(pattern, self.user, self.vhost, client_id)
        return _compiled(pattern).search(key) is not None

    def to_json(self) -> dict[str, str]:
        return {"user": self.user, "vhost": self.vhost, "exchange": self.exchange,
                "write": self.write, "read": self.read}
