"""Resource alarms for one MQTT connection, sans I/O: which connections stop being read.

MQTT has no way to tell a client to stop publishing (AMQP's connection.blocked has no
counterpart), so the broker stops reading the socket, as Mosquitto and EMQX do under
back-pressure: TCP's window fills and the client's own writes wait. A connection is
not read while an alarm (core/pressure.py: "memory", "disk") is set once it has sent a
PUBLISH; a connection that only subscribes goes on being read, so its PUBACKs and
PINGREQs keep consumers draining what fills memory or disk. A connection that sends its
first PUBLISH under an alarm has that read's packets handled, then is not read.

    gate = ReadGate()
    gate.published()                    # a PUBLISH was taken
    gate.alarms(frozenset({"disk"}))    # -> SetReading(False) for a publisher, else None
    gate.end_of_read()                  # -> SetReading(False): the first publish under an alarm
    gate.alarms(frozenset())            # -> SetReading(True) if it was blocked
"""

from __future__ import annotations

from .requests import SetReading

STOP_READING = SetReading(False)
READ_AGAIN = SetReading(True)


class ReadGate:
    __slots__ = ("has_published", "active", "blocked")

    def __init__(self) -> None:
        self.has_published = False  # a PUBLISH came on this connection
        self.active: frozenset[str] = frozenset()  # the broker's alarms, as last told
        self.blocked = False  # the socket is not read because of them

    def published(self) -> None:
        self.has_published = True

    def alarms(self, active: frozenset[str]) -> SetReading | None:
        """The broker's alarms changed: what to do with the socket, if anything."""
        self.active = active
        if active and self.has_published and not self.blocked:
            self.blocked = True
            return STOP_READING
        if not active and self.blocked:
            self.blocked = False
            return READ_AGAIN
        return None

    def end_of_read(self) -> SetReading | None:
        """A read's packets are handled: a first publisher under an alarm reads no further."""
        if self.active and self.has_published and not self.blocked:
            self.blocked = True
            return STOP_READING
        return None
