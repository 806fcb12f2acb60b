#!/usr/bin/env python3
"""Python function calls per message on the AMQP and MQTT paths of the source tree it is
run from: a count, not a time, so it does not drift with the machine (compare two trees
by running it from each: `cd TREE && PYTHONPATH=. python bench/calls_per_message.py`).

In memory, over a real broker on a temporary directory (flush "none": no fdatasync), with
the tests' own sans-socket clients (tests/unit/test_amqp_pipelined.py's and
tests/core/test_mqtt_protocol.py's), so each tree drives its own gateway's signatures:

- amqp: N persistent publishes in confirm mode to a queue with a consumer, in one read,
  until every confirm and delivery is out; then the N acks, in one read.
- mqtt: N QoS 1 publishes to a topic a QoS 1 subscriber holds, in one read, until every
  PUBACK and delivery is out; then the subscriber's N PUBACKs, in one read.

Counted with ``sys.setprofile``: "call" events (Python functions) and "c_call" events
(C functions called from Python), per message. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable


class Counter:
    def __init__(self) -> None:
        self.py = self.c = 0

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            self.py += 1
        elif event == "c_call":
            self.c += 1


def counted(n: int, step: Callable[[], None]) -> dict[str, float]:
    c = Counter()
    sys.setprofile(c)
    try:
        step()
    finally:
        sys.setprofile(None)
    return {"python_calls_per_message": round(c.py / n, 1), "c_calls_per_message": round(c.c / n, 1)}


def amqp(n: int, path: Path) -> dict[str, Any]:
    from pamqp import body, frame, header
    from pamqp import commands as C

    from tests.unit.test_amqp_pipelined import Client, Env

    env = Env(path)
    try:
        client = Client(env.broker, env.loop)
        client.feed(frame.marshal(C.Queue.Declare(queue="q"), 1),
                    frame.marshal(C.Basic.Consume(queue="q", consumer_tag="c"), 1))
        client.methods()
        props = C.Basic.Properties(delivery_mode=2)
        one = (frame.marshal(C.Basic.Publish(exchange="", routing_key="q"), 1)
               + frame.marshal(header.ContentHeader(0, 16, props), 1) + frame.marshal(body.ContentBody(b"x" * 16), 1))
        client.feed(one)  # warm: the route cached, the topic made
        warm = [m for _, m in client.methods() if isinstance(m, C.Basic.Deliver)]
        client.feed(frame.marshal(C.Basic.Ack(warm[0].delivery_tag), 1))
        client.methods()
        publish = counted(n, lambda: client.feed(one * n))
        tags = [m.delivery_tag for _, m in client.methods() if isinstance(m, C.Basic.Deliver)]
        assert len(tags) == n, len(tags)
        acks = b"".join(frame.marshal(C.Basic.Ack(t), 1) for t in tags)
        ack = counted(n, lambda: client.feed(acks))
        assert not env.broker.vhosts["/"].queues["q"].queue.entries
        return {"publish_confirm_deliver": publish, "ack": ack}
    finally:
        env.close()


def mqtt(n: int, path: Path) -> dict[str, Any]:
    from logbus.gateway.mqtt import Connect, PubAck, Publish, Subscribe, Subscription, encode

    from tests.core.test_mqtt_protocol import Client, _gateway

    with _gateway(path) as (loop, broker, factory):
        sub = Client(factory, loop)
        sub.send(Connect("sub", 5))
        sub.send(Subscribe(1, (Subscription("t/#", 1),)))
        pub = Client(factory, loop)
        pub.send(Connect("pub", 5))

        def settle() -> None:
            while loop.run_once():
                pass

        settle()
        sub.received(), pub.received()
        pub.protocol.dataReceived(encode(Publish("t/x", b"warm", 1, packet_id=1), 5))
        settle()
        got = [p for p in sub.received() if isinstance(p, Publish)]
        sub.protocol.dataReceived(encode(PubAck(got[0].packet_id), 5))
        settle()
        pub.received()
        data = b"".join(encode(Publish("t/x", b"x" * 16, 1, packet_id=2 + i), 5) for i in range(n))

        def publish() -> None:
            pub.protocol.dataReceived(data)
            settle()

        def ack() -> None:
            sub.protocol.dataReceived(acks)
            settle()

        published = counted(n, publish)
        got = [p for p in sub.received() if isinstance(p, Publish)]
        assert len(got) == n, len(got)
        acks = b"".join(encode(PubAck(p.packet_id), 5) for p in got)
        acked = counted(n, ack)
        assert len([p for p in pub.received() if isinstance(p, PubAck)]) == n
        return {"qos1_publish_puback_deliver": published, "puback": acked}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200, help="per burst (the MQTT subscriber's window caps it)")
    a = ap.parse_args()
    sys.path.insert(0, ".")
    import logbus

    with tempfile.TemporaryDirectory() as d:
        out = {"bench": "calls_per_message", "tree": str(Path(logbus.__file__).parents[1]),
               "python": sys.version.split()[0], "messages": a.messages,
               "amqp": amqp(a.messages, Path(d) / "amqp"), "mqtt": mqtt(a.messages, Path(d) / "mqtt")}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
