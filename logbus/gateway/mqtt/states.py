"""The states of an MQTT connection (``machine.TRANSITIONS`` is keyed by them)."""

from __future__ import annotations

import enum


class State(enum.Enum):
    AWAITING_CONNECT = "awaiting CONNECT"
    CONNECTING = "connecting"  # CONNECT taken, its login asked of the shell
    CONNECTED = "connected"
    CLOSED = "closed"

    # members are singletons: hashed by identity, not by name (Enum's __hash__ is a
    # Python call; the machine looks a (state, packet type) up per packet)
    __hash__ = object.__hash__
