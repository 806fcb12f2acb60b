"""A kept MQTT session draining its queue on a real broker in a temp dir, driven without
sockets (Twisted's StringTransport): what it costs per message, and that every message
comes once. Issue 30: a session was stored once per message delivered, each record
holding every message in flight, so a drain of N QoS 2 messages wrote O(N^2) bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message as ProtoMessage

from logbus.gateway.mqtt import (
    Connect, Properties, PubAck, PubComp, Publish, PubRec, PubRel, Subscribe, Subscription, encode,
)  # fmt: skip
from tests.core.test_mqtt_protocol import Client, _gateway

KEEP = Properties(session_expiry_interval=600)


def _publish(pub: Client, loop: Any, topic: str, n: int, qos: int) -> None:
    """``n`` publishes, answered (so durable and queued) before this returns."""
    for i in range(n):
        pub.send(Publish(topic, str(i).encode(), qos, packet_id=i % 65535 + 1))
        if qos == 2 and i % 500 == 499:  # the ids come again: release them first
            loop.run_until(lambda: sum(isinstance(p, PubRec) for p in pub.received_all()) == 500)
            for p in pub.seen:
                if isinstance(p, PubRec):
                    pub.send(PubRel(p.packet_id))
            pub.seen.clear()
    loop.run_until(lambda: not pub.protocol.machine.answers_waiting)


@pytest.mark.parametrize("qos", [1, 2])
def test_a_draining_session_is_stored_in_o1_bytes_per_message(tmp_path: Path, monkeypatch: Any, qos: int) -> None:
    n = 2000
    with _gateway(tmp_path) as (loop, broker, factory):
        sub = Client(factory, loop)
        sub.send(Connect("keeper", 5, clean_start=False, properties=KEEP))
        sub.send(Subscribe(1, (Subscription("t/#", qos),)))
        sub.drop()
        pub = Client(factory, loop)
        pub.send(Connect("pub", 5))
        _publish(pub, loop, "t/x", n, qos)
        written = []

        def save_session(protocol: str, client_id: str, record: ProtoMessage) -> None:
            written.append(record.ByteSize())
            saved(protocol, client_id, record)

        saved = broker.sessions.save_session
        monkeypatch.setattr(broker.sessions, "save_session", save_session)
        back = Client(factory, loop)
        back.send(Connect("keeper", 5, clean_start=False, properties=KEEP))
        payloads: list[bytes] = []
        done = 0
        while done < n:  # a client answering each read as it comes
            loop.run_until(lambda: bool(back.transport.value()))
            answers: list[Any] = []
            for p in back.received():
                if isinstance(p, Publish):
                    payloads.append(p.payload)
                    answers.append(PubRec(p.packet_id) if qos == 2 else PubAck(p.packet_id))
                    done += qos == 1
                elif isinstance(p, PubRel):
                    answers.append(PubComp(p.packet_id))
                    done += 1
            back.protocol.dataReceived(b"".join(encode(a, 5) for a in answers))  # as one TCP read
        assert sorted(payloads, key=int) == [str(i).encode() for i in range(n)]  # each once
        assert len(payloads) == n
        # O(1) per message: stored once per flush of the output (here: unlimited in flight,
        # the client answering each read at once), not once per message with all in flight
        assert sum(written) < 40 * n, (len(written), sum(written))
        back.drop()
        pub.drop()
