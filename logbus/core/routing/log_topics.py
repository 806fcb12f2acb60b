"""Where a routed record lands in the log: the log topic behind an exchange of a vhost
(``vhost_topic``) and the partition of a keyed record (``key_partition``).

Each exchange is backed by one log topic: its own name in vhost ``/`` (the default
exchange's is ``DEFAULT_EXCHANGE_TOPIC``); in any other vhost V, V percent-encoded
(``urllib.parse.quote(V, safe="")``), ``@``, then the topic the exchange would have in
``/``. So exchange ``x`` of vhost ``a/b`` is backed by topic ``a%2Fb@x``, and the same
names in two vhosts never share a topic (docs/architecture.md section 4).
"""

from __future__ import annotations

import zlib
from typing import Final
from urllib.parse import quote, unquote

DEFAULT_EXCHANGE_TOPIC: Final = "__amqp_default"
DEFAULT_VHOST: Final = "/"
VHOST_SEPARATOR: Final = "@"  # in topic names: quote(vhost) + "@" + topic in vhost "/"


def key_partition(key: bytes | None, partitions: int) -> int:
    """The partition a record with ``key`` goes to when none is named: ``crc32(key) %
    partitions``, partition 0 when there is one or the key is empty (docs/interop.md)."""
    return 0 if partitions == 1 or not key else zlib.crc32(key) % partitions


def vhost_topic(vhost: str, topic: str) -> str:
    """The log topic behind an exchange of ``vhost`` that would be backed by ``topic`` in
    vhost ``/``: ``topic`` itself in ``/``, else ``quote(vhost, safe="") + "@" + topic``.
    ``quote`` leaves no ``@`` (nor ``/``) in the vhost part, so the first ``@`` ends it."""
    if vhost == DEFAULT_VHOST:
        return topic
    return quote(vhost, safe="") + VHOST_SEPARATOR + topic


def topic_exchange(topic: str) -> tuple[str, str]:
    """The (vhost, exchange) a log topic stands for in permission checks: the inverse of
    ``vhost_topic`` (the default exchange's topic is exchange ``""``). A topic
    no exchange backs (one created over Kafka or HTTP) is the exchange of its own name
    in vhost ``/``, and ``v@t`` is always exchange ``t`` of vhost ``v``: a name cannot
    reach into another vhost without that vhost's permissions."""
    vhost, sep, rest = topic.partition(VHOST_SEPARATOR)
    if not sep:
        vhost, rest = DEFAULT_VHOST, topic
    else:
        vhost = unquote(vhost)
    return vhost, "" if rest == DEFAULT_EXCHANGE_TOPIC else rest
