"""Resource alarms in the MQTT session machine (gateway/mqtt/alarms.py, machine.py), sans
I/O: a connection that has published is not read while an alarm is set (``SetReading``),
one that only subscribes is; Hypothesis drives alarms, publishes, subscribes and pings
in any order against a model of when the socket is read."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from logbus.gateway.mqtt.packets import PingReq, PingResp, PubAck, Publish, SubAck, Subscribe, Subscription
from logbus.gateway.mqtt.requests import SetReading
from logbus.gateway.mqtt.states import State
from tests.unit.test_mqtt_machine import Shell, connected

DISK = frozenset({"disk"})
BOTH = frozenset({"disk", "memory"})
NONE: frozenset[str] = frozenset()


def alarm(shell: Shell, alarms: frozenset[str]) -> list[Any]:
    shell.machine.resource_alarm(alarms)
    return [r for r in shell.drain() if isinstance(r, SetReading)]


def readings(requests: list[Any]) -> list[bool]:
    return [r.on for r in requests if isinstance(r, SetReading)]


def test_a_publisher_stops_being_read_under_an_alarm_and_resumes_when_it_clears() -> None:
    shell, client = connected()
    assert client.send(Publish("a/b", b"x", qos=1, packet_id=1)) == [PubAck(1)]
    assert alarm(shell, DISK) == [SetReading(False)]
    assert shell.machine.blocked
    assert alarm(shell, BOTH) == []  # already not read
    assert alarm(shell, NONE) == [SetReading(True)]
    assert not shell.machine.blocked
    assert alarm(shell, NONE) == []


def test_a_subscriber_goes_on_being_read() -> None:
    shell, client = connected()
    assert alarm(shell, DISK) == []
    assert client.send(Subscribe(1, (Subscription("a/#", 1),))) == [SubAck(1, (1,))]
    assert client.send(PingReq()) == [PingResp()]
    assert readings(client.requests) == [] and not shell.machine.blocked
    assert alarm(shell, NONE) == []


def test_the_first_publish_under_an_alarm_is_handled_then_reading_stops() -> None:
    shell, client = connected(4)
    alarm(shell, DISK)
    got = client.send(Publish("a/b", b"1", qos=1, packet_id=1), PingReq(), Publish("a/b", b"2", qos=1, packet_id=2))
    assert got == [PubAck(1), PingResp(), PubAck(2)]  # the whole read is handled
    assert readings(client.requests) == [False] and client.requests[-1] == SetReading(False)
    assert [m.value for m in shell.published] == [b"1", b"2"]
    assert alarm(shell, NONE) == [SetReading(True)]


def test_a_closed_connection_asks_nothing() -> None:
    shell, client = connected()
    client.send(Publish("a/b", b"x", qos=0))
    shell.machine.connection_lost()
    shell.drain()
    assert alarm(shell, DISK) == [] and shell.machine.state is State.CLOSED


STEPS = st.lists(st.sampled_from(["alarm", "disk+memory", "clear", "publish", "subscribe", "ping"]), max_size=30)


@settings(max_examples=200, deadline=None)
@given(version=st.sampled_from([4, 5]), steps=STEPS)
def test_reading_follows_the_model(version: int, steps: list[str]) -> None:
    shell, client = connected(version)
    alarms, published, reading = NONE, False, True
    packet_id = 0
    for step in steps:
        if step in ("alarm", "disk+memory", "clear"):
            alarms = {"alarm": DISK, "disk+memory": BOTH, "clear": NONE}[step]
            told = readings(alarm(shell, alarms))
        else:
            if not reading:
                continue  # the shell reads nothing meanwhile
            if step == "publish":
                packet_id += 1
                client.send(Publish("t", b"x", qos=1, packet_id=packet_id))
                published = True
            elif step == "subscribe":
                packet_id += 1
                client.send(Subscribe(packet_id, (Subscription("t", 0),)))
            else:
                client.send(PingReq())
            told = readings(client.requests)
        expected = not (alarms and published)
        assert told == ([] if expected == reading else [expected]), (step, told)
        reading = expected
        assert shell.machine.blocked is (not reading)
