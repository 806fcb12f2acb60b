"""The states of an MQTT connection (``machine.TRANSITIONS`` is keyed by them)."""

from __future__ import annotations

import enum


class State(enum.Enum):
    AWAITING_CONNECT = "awaiting CONNECT"
    CONNECTING = "connecting"  # CONNECT taken, its login asked of the shell
    CONNECTED = "connected"
    CLOSED = "closed"
