"""What a queue has done since it was made, as plain counters the operator's view reads
(core/inventory.py: the API, the console, the Prometheus series).

Each ``QueueState`` has one ``QueueStats``; the queue service bumps it where the event
happens (an entry routed in, handed out, acked, dead-lettered) and bumps its kind's
running total with it, so a global figure is one read, not a walk over every queue (a
broker may hold 10,000 MQTT sessions). Entries made are also counted by the protocol
the message was published with (``QueueService.routed_by``, indexed as PUBLISHED_BY):
the per-protocol "routed" figure is the publisher's, the others the consumer's (the
queue kind's, ``inventory.PROTOCOL_OF``). The counts are not stored: after a restart they
start from 0, as RabbitMQ's do.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

# what kind of queue a QueueState is: a declared queue (AMQP's), an MQTT session's, an MQTT
# shared subscription's, a pop group's
CLASSIC = "classic"
SESSION = "session"
SHARED = "shared"
POP = "pop"
KINDS = (CLASSIC, SESSION, SHARED, POP)

# the protocol a message was published with, by its envelope's ``protocol`` (the Protocol
# enum of core/envelope.proto); a record with none (0) was produced over Kafka, which
# writes no envelope
PUBLISHED_BY = ("kafka", "amqp", "mqtt", "kafka", "http")


@dataclass(slots=True)
class QueueStats:
    routed: int = 0  # entries made (a message routed to the queue)
    delivered: int = 0  # handed to a consumer or taken (pushed, got, popped)
    redelivered: int = 0  # ... of which had been handed out before
    acked: int = 0  # settled by an ack (not by a no-ack hand-out)
    dead_lettered: int = 0  # removed with a reason and sent to a dead-letter target

    def add(self, other: QueueStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_json(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


COUNTERS = tuple(f.name for f in fields(QueueStats))
