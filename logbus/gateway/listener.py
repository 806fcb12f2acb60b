"""What one listener asks of the connections it accepts, beyond its gateway's settings: logbus's
own options in the listener's endpoint string, taken out before Twisted reads the rest.

    mqtt  = "tcp:1883:interface=127.0.0.1 ssl:8883:privateKey=key.pem:anonymous=off"
    kafka = "tcp:9092 ssl:9093:privateKey=key.pem:caCertsDir=/etc/logbus/ca:anonymous=off"

- ``caCertsDir=DIR`` (``ssl:`` only): client certificates signed by a CA in DIR are asked
  for and verified (logbus/tls.py; ``tls_cert_login`` makes them a login).
- ``anonymous=off|loopback`` (mqtt, mqtt_ws, kafka): this listener's rule for clients that
  give no credentials, instead of ``mqtt_anonymous`` / ``kafka_anonymous``: a TLS
  listener for remote devices can refuse them all while the loopback one keeps the
  default (Mosquitto's per-listener ``allow_anonymous``, Kafka's SASL_SSL listener beside
  a PLAINTEXT one).

A gateway's one factory serves all its listeners; ``ListenerFactory`` wraps it for a
listener with rules of its own and gives each protocol it builds the listener's
``ListenerRules`` (a protocol reads ``listener_rules``; a wrapping protocol, WebSocket,
passes them to the protocol it wraps).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from twisted.internet.protocol import Factory, Protocol

OPTIONS: Final = ("caCertsDir", "anonymous")
_OPTION = re.compile(rf":({'|'.join(OPTIONS)})=((?:[^:\\]|\\.)*)")
ANONYMOUS_RULES: Final = ("off", "loopback")


@dataclass(frozen=True, slots=True)
class ListenerRules:
    anonymous: str | None = None  # "off" / "loopback": this listener's; None: the gateway's setting


DEFAULT_RULES: Final = ListenerRules()


def split_options(description: str) -> tuple[str, dict[str, str]]:
    """(the endpoint string for Twisted, logbus's options taken out of it). A value may
    hold an escaped colon (``\\:``), as Twisted's own values do."""
    options: dict[str, str] = {}

    def take(m: re.Match[str]) -> str:
        if m.group(1) in options:
            raise ValueError(f"{m.group(1)}= given twice in {description!r}")
        options[m.group(1)] = m.group(2).replace("\\:", ":")
        return ""

    return _OPTION.sub(take, description), options


def rules_of(options: dict[str, str]) -> ListenerRules:
    """A listener's rules from its options (``split_options``); ValueError if bad."""
    anonymous = options.get("anonymous")
    if anonymous is not None and anonymous not in ANONYMOUS_RULES:
        raise ValueError(f"anonymous= must be one of {', '.join(ANONYMOUS_RULES)}, not {anonymous!r}")
    return ListenerRules(anonymous)


class ListenerFactory(Factory):
    """A gateway's factory as one listener's: the protocols it builds carry ``rules``."""

    def __init__(self, factory: Any, rules: ListenerRules) -> None:
        self.factory = factory
        self.rules = rules

    def doStart(self) -> None:
        self.factory.doStart()

    def doStop(self) -> None:
        self.factory.doStop()

    def buildProtocol(self, addr: Any) -> Protocol | None:
        p = self.factory.buildProtocol(addr)
        if p is not None:
            p.listener_rules = self.rules
            inner = getattr(p, "wrappedProtocol", None)  # a WebSocket's MQTT connection
            if inner is not None:
                inner.listener_rules = self.rules
        return p  # type: ignore[no-any-return]
