"""MQTT clients for integration tests: paho-mqtt (the real client, through a small
synchronous wrapper), and a raw socket client speaking through logbus's own codec for what
a well-behaved client library never sends (bad input, flow-control edges).

    c = Paho(server, "dev-1", version=5)      # connected, loop running
    c.subscribe("a/#", qos=1); c.publish("a/b", b"x", qos=1)
    m = c.next_message()                       # (topic, payload, qos, retain, properties)
    c.close()

    r = Raw(server, version=5)                 # a socket, nothing sent
    r.send(Connect("raw-1", 5)); r.expect(ConnAck)
"""

from __future__ import annotations

import queue
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from logbus.gateway.mqtt import Decoder, MqttError, encode

WAIT = 10.0


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@dataclass
class Received:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: Any = None
    dup: bool = False


class Paho:
    """A paho-mqtt client, connected, its network loop in a thread."""

    def __init__(self, server: Any, client_id: str = "", *, version: int = 4, clean: bool = True,
                 username: str | None = None, password: str | None = None, keepalive: int = 60,
                 properties: PahoProperties | None = None, will: tuple[str, bytes, int, bool] | None = None,
                 transport: str = "tcp", port: int | None = None, connect: bool = True) -> None:
        proto = mqtt.MQTTv5 if version == 5 else mqtt.MQTTv311
        kwargs: dict[str, Any] = {"client_id": client_id, "protocol": proto, "transport": transport}
        if version != 5:
            kwargs["clean_session"] = clean
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, **kwargs)
        self.version = version
        self.clean = clean
        self.messages: queue.Queue[Received] = queue.Queue()
        self.connack: queue.Queue[tuple[Any, Any, Any]] = queue.Queue()
        self.disconnects: queue.Queue[Any] = queue.Queue()
        self.client.on_message = self._on_message
        self.client.on_connect = lambda c, u, flags, rc, props: self.connack.put((flags, rc, props))
        self.client.on_disconnect = lambda c, u, flags, rc, props: self.disconnects.put(rc)
        if username is not None:
            self.client.username_pw_set(username, password)
        if will is not None:
            self.client.will_set(*will)
        self.host, default_port = server.host_port("mqtt")
        self.port = port or default_port
        self.keepalive = keepalive
        self.properties = properties
        _OPEN.add(self)
        if connect:
            self.connect()

    def connect(self) -> Any:
        """Connect and wait for the CONNACK: (flags, reason code, properties)."""
        kwargs: dict[str, Any] = {"keepalive": self.keepalive}
        if self.version == 5:
            kwargs["clean_start"] = self.clean
            if self.properties is not None:
                kwargs["properties"] = self.properties
        self.client.connect(self.host, self.port, **kwargs)
        self.client.loop_start()
        try:
            return self.connack.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError("no CONNACK") from None

    def _on_message(self, client: Any, userdata: Any, m: Any) -> None:
        self.messages.put(Received(m.topic, m.payload, m.qos, bool(m.retain), getattr(m, "properties", None),
                                   bool(m.dup)))

    def subscribe(self, topic: str | list[tuple[str, Any]], qos: int = 0, **kw: Any) -> list[Any]:
        """Subscribe and wait for the SUBACK: its reason codes."""
        got: queue.Queue[Any] = queue.Queue()
        self.client.on_subscribe = lambda c, u, mid, codes, props: got.put(codes)
        rc, _ = self.client.subscribe(topic, qos, **kw) if isinstance(topic, str) else self.client.subscribe(topic, **kw)
        assert rc == mqtt.MQTT_ERR_SUCCESS
        return list(got.get(timeout=WAIT))

    def unsubscribe(self, topic: str) -> Any:
        got: queue.Queue[Any] = queue.Queue()
        self.client.on_unsubscribe = lambda c, u, mid, codes, props: got.put(codes)
        self.client.unsubscribe(topic)
        return got.get(timeout=WAIT)

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False,
                properties: PahoProperties | None = None) -> Any:
        """Publish and wait until it is acknowledged (QoS 1/2) or written (QoS 0)."""
        info = self.client.publish(topic, payload, qos, retain, properties)
        info.wait_for_publish(WAIT)
        assert info.is_published(), f"publish to {topic!r} not acknowledged"
        return info

    def next_message(self, timeout: float = WAIT) -> Received:
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no message arrived") from None

    def take(self, n: int, timeout: float = WAIT) -> list[Received]:
        return [self.next_message(timeout) for _ in range(n)]

    def assert_quiet(self, seconds: float = 0.5) -> None:
        try:
            m = self.messages.get(timeout=seconds)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected message {m}")

    def close(self) -> None:
        _OPEN.discard(self)
        self.client.disconnect()
        self.client.loop_stop()
        self._release()

    def drop(self) -> None:
        """Close the socket without DISCONNECT (the will is published)."""
        _OPEN.discard(self)
        self.client.loop_stop()
        sock = self.client.socket()
        if sock is not None:
            sock.close()
        self._release()

    def _release(self) -> None:
        # paho 2.x's loop_start opens a socket pair that close() does not: left to the
        # garbage collector, it raises ResourceWarning in some later test
        self.client._reset_sockets(sockpair_only=True)


def props(packet_type: int = PacketTypes.CONNECT, **values: Any) -> PahoProperties:
    p = PahoProperties(packet_type)
    for k, v in values.items():
        setattr(p, k, v)
    return p


_OPEN: set[Any] = set()  # Raw and Paho clients not closed yet (closed after each test)


def open_clients() -> set[Any]:
    return set(_OPEN)


def close_leftovers(keep: set[Any]) -> None:
    """Close the clients a test left open (it failed before closing them), but those of
    ``keep`` (a module's own): their sockets would otherwise raise ResourceWarning in
    some later test."""
    for c in list(_OPEN - keep):
        try:
            c.close()
        except Exception:  # noqa: BLE001 - best effort, the test has failed already
            _OPEN.discard(c)


class Raw:
    """A raw MQTT client over our codec: packets as logbus's dataclasses."""

    def __init__(self, server: Any, version: int = 5, port: int | None = None) -> None:
        host, default_port = server.host_port("mqtt")
        self.sock = socket.create_connection((host, port or default_port), timeout=WAIT)
        _OPEN.add(self)
        self.version = version
        self.decoder = Decoder(version=version)
        self.packets: list[Any] = []

    def send(self, packet: Any) -> None:
        self.sock.sendall(encode(packet, self.version))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, timeout: float = WAIT) -> Any:
        """The next packet; None if the broker closed the connection."""
        deadline = time.monotonic() + timeout
        while not self.packets:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no packet arrived")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                raise AssertionError("no packet arrived") from None
            except ConnectionResetError:
                return None
            if not data:
                return None
            try:
                self.packets += self.decoder.feed(data)
            except MqttError as e:
                raise AssertionError(f"the broker sent a bad packet: {e}") from None
        return self.packets.pop(0)

    def expect(self, kind: type, timeout: float = WAIT) -> Any:
        p = self.recv(timeout)
        assert isinstance(p, kind), f"expected {kind.__name__}, got {p!r}"
        return p

    def expect_closed(self, timeout: float = WAIT) -> list[Any]:
        """Read until the broker closes; the packets that came first."""
        got = []
        while True:
            p = self.recv(timeout)
            if p is None:
                return got
            got.append(p)

    def quiet(self, seconds: float = 0.5) -> None:
        try:
            p = self.recv(seconds)
        except AssertionError:
            return
        raise AssertionError(f"unexpected packet {p!r}")

    def close(self) -> None:
        _OPEN.discard(self)
        self.sock.close()
