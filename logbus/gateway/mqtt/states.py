"""The states of an MQTT connection (``protocol.TRANSITIONS`` is keyed by them)."""

from __future__ import annotations

import enum


class State(enum.Enum):
    AWAITING_CONNECT = "awaiting CONNECT"
    CONNECTED = "connected"
    CLOSED = "closed"
