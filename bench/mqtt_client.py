"""The client side of bench/mqtt_bench.py: paho-mqtt clients, the measuring, and the
client processes that run apart from the publisher.

    connect, Publisher         a paho client on its own network thread, connected (CONNACK
                               checked); a publisher with at most --window messages not yet
                               acknowledged (QoS 1: PUBACK) or not yet written (QoS 0)
    ClientProcess              a spawned process of subscribers or of idle connections,
                               talking to us over a pipe

Why processes: a paho client spends about as much CPU per message as a broker, and its
network thread shares the GIL with everything else in the process, so a publisher and
its subscribers in one process measure the GIL. The subscribers (and the idle
connections, which need more file descriptors than one process may have) therefore run
in processes of their own. time.monotonic_ns is CLOCK_MONOTONIC, system-wide on Linux,
so a subscriber process can subtract the publisher's stamps.

Imported by name from bench/ (mqtt_bench.py puts its own directory on sys.path); see
common.py on why never from mqtt_bench itself.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import resource
import selectors
import threading
import time
from typing import Any

import paho.mqtt.client as mqtt
from common import BenchError, LatencyRecorder, end_process, self_cpu

HOST = "127.0.0.1"
DISCONNECT = b"\xe0\x00"
KEEPALIVE = 600  # s: no PINGREQ during a run; the idle connections have no network thread


_TAG = os.urandom(3).hex()
_SEQ = itertools.count()


def client_id(kind: str) -> str:
    """Unique on the broker: a second CONNECT with an id in use takes the session over
    (the broker closes the first connection), so a counter, not random bits."""
    return f"mqtt-bench-{kind}-{os.getpid()}-{_TAG}-{next(_SEQ)}"


# -- measuring ---------------------------------------------------------------------


# -- paho plumbing -----------------------------------------------------------------


def new_client(kind: str) -> mqtt.Client:
    return mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id(kind),
                       protocol=mqtt.MQTTv311, clean_session=True)


def connect(port: int, kind: str, timeout: float, inflight: int = 20) -> mqtt.Client:
    """A client on its own network thread (loop_start), its CONNACK received and accepting."""
    c = new_client(kind)
    c.max_inflight_messages_set(inflight)
    acked = threading.Event()
    codes: list[Any] = []

    def on_connect(_c: Any, _u: Any, _flags: Any, reason: Any, _props: Any) -> None:
        codes.append(reason)
        acked.set()

    c.on_connect = on_connect
    c.connect_timeout = timeout
    try:
        c.connect(HOST, port, KEEPALIVE)
    except OSError as exc:
        raise BenchError(f"cannot connect to {HOST}:{port}: {exc!r}") from None
    c.loop_start()
    if not acked.wait(timeout):
        stop_client(c)
        raise BenchError(f"no CONNACK from {HOST}:{port} within {timeout:g} s")
    if codes[0].is_failure:
        stop_client(c)
        raise BenchError(f"CONNACK refused: {codes[0]}")
    c.on_connect = None
    return c


def subscribe(c: mqtt.Client, topic: str, qos: int, timeout: float) -> None:
    """SUBSCRIBE and wait for a SUBACK that grants it."""
    done = threading.Event()
    codes: list[Any] = []

    def on_subscribe(_c: Any, _u: Any, _mid: int, reasons: Any, _props: Any) -> None:
        codes.extend(reasons)
        done.set()

    c.on_subscribe = on_subscribe
    c.subscribe(topic, qos)
    if not done.wait(timeout):
        raise BenchError(f"no SUBACK for {topic!r} within {timeout:g} s")
    if not codes or any(r.is_failure for r in codes):
        raise BenchError(f"SUBACK refused {topic!r}: {codes}")


def stop_client(c: mqtt.Client) -> None:
    try:
        c.disconnect()
    finally:
        c.loop_stop()


class Publisher:
    """Publishes with at most ``window`` messages outstanding: QoS 1, not yet acknowledged
    (PUBACK); QoS 0, not yet written to the socket (paho's on_publish means that there).
    The broker or the network dropping the connection fails the next publish."""

    def __init__(self, port: int, qos: int, window: int, timeout: float) -> None:
        self.qos, self.window, self.timeout = qos, window, timeout
        self.client = connect(port, "pub", timeout, inflight=window)
        self.done = 0
        self.sent = 0
        self.cond = threading.Condition()
        self.lost: list[Any] = []
        self.client.on_publish = self._on_publish
        self.client.on_disconnect = self._on_disconnect

    def _on_publish(self, _c: Any, _u: Any, _mid: int, _reason: Any, _props: Any) -> None:
        with self.cond:
            self.done += 1
            self.cond.notify()

    def _on_disconnect(self, _c: Any, _u: Any, _flags: Any, reason: Any, _props: Any) -> None:
        with self.cond:
            self.lost.append(reason)
            self.cond.notify()

    def _wait(self, limit: int) -> None:
        deadline = time.monotonic() + self.timeout
        with self.cond:
            while self.sent - self.done > limit and not self.lost:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"{self.sent - self.done} publishes not acknowledged "
                                     f"within {self.timeout:g} s")
                self.cond.wait(left)
            if self.lost:
                raise BenchError(f"the broker closed the publisher's connection: {self.lost[0]}")

    def publish(self, topic: str, payload: bytes) -> None:
        self._wait(self.window - 1)
        info = self.client.publish(topic, payload, self.qos)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            raise BenchError(f"publish failed: {mqtt.error_string(info.rc)}")
        self.sent += 1

    def drain(self) -> None:
        self._wait(0)

    def close(self) -> None:
        self.client.on_disconnect = None
        stop_client(self.client)


# -- client processes --------------------------------------------------------------
#
# The pipe carries, child to parent: ("ready", info) once subscribed (or connected),
# ("done", result) or ("error", text); parent to child: ("published", None) when the
# publisher is through (the subscribers then stop after --settle seconds without a
# message) or ("close", None) (idle connections: disconnect and exit).


def subscriber_main(spec: dict[str, Any], pipe: Any) -> None:
    """Subscribers: ``spec["clients"]`` paho clients on one filter, each counting what it
    receives until it has ``expected`` or the publisher is through and nothing came for
    ``settle`` s. With ``latency_warmup`` set, payloads carry LATENCY_HEAD and each
    latency after the warm-up is kept."""
    clients: list[mqtt.Client] = []
    try:
        expected, warmup = spec["expected"], spec.get("latency_warmup")
        counts = [0] * spec["clients"]
        last_ns = [0] * spec["clients"]
        recorder = LatencyRecorder(expected if warmup is not None else 0, warmup or 0)

        def on_message_for(i: int) -> Any:
            def on_message(_c: Any, _u: Any, msg: Any) -> None:
                now = time.monotonic_ns()
                counts[i] += 1
                last_ns[i] = now
                if warmup is not None:
                    recorder(msg.payload, now)
            return on_message

        for i in range(spec["clients"]):
            c = connect(spec["port"], "sub", spec["timeout"])
            clients.append(c)
            c.on_message = on_message_for(i)
            subscribe(c, spec["filter"], spec["qos"], spec["timeout"])
        pipe.send(("ready", None))
        cpu0 = self_cpu()
        deadline = time.monotonic() + spec["timeout"]
        published_at: float | None = None
        while sum(counts) < expected * len(clients):
            if pipe.poll(0.05):
                what, _ = pipe.recv()
                if what == "published":
                    published_at = time.monotonic()
            quiet_since = max([published_at or 0.0] + [n / 1e9 for n in last_ns])
            if published_at is not None and time.monotonic() - quiet_since > spec["settle"]:
                break  # the publisher is through and nothing more comes: count what is lost
            if time.monotonic() > deadline:
                raise BenchError(f"subscribers: {sum(counts)} of {expected * len(clients)} "
                                 f"deliveries within {spec['timeout']:g} s")
        cpu = self_cpu() - cpu0
        pipe.send(("done", {"counts": counts, "last_ns": max(last_ns), "cpu": cpu, **recorder.result()}))
    except BaseException as exc:  # noqa: BLE001 -- whatever it is, the parent reports it
        pipe.send(("error", str(exc) if isinstance(exc, BenchError) else repr(exc)))
    finally:
        for c in clients:
            try:
                stop_client(c)
            except Exception:  # noqa: BLE001,S110 -- exiting anyway
                pass
        pipe.close()


def raise_nofile() -> tuple[int, int]:
    """Soft RLIMIT_NOFILE up to the hard one; returns (soft, hard) as they are now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def idle_main(spec: dict[str, Any], pipe: Any) -> None:
    """``spec["count"]`` idle connections (CONNECT, CONNACK, then nothing), opened
    ``spec["batch"]`` at a time, with no network thread (one descriptor each: paho's
    loop_start would add a socket pair per client). Held until the parent says close."""
    clients: list[mqtt.Client] = []
    try:
        soft, _hard = raise_nofile()
        if spec["count"] + 64 > soft:
            raise BenchError(f"{spec['count']} connections in one process but RLIMIT_NOFILE is "
                             f"{soft}: use more --idle-processes")
        sel = selectors.DefaultSelector()
        t0 = time.perf_counter()
        cpu0 = self_cpu()
        deadline = time.monotonic() + spec["timeout"]
        refused: list[Any] = []
        for start in range(0, spec["count"], spec["batch"]):
            waiting: set[int] = set()
            for _ in range(start, min(spec["count"], start + spec["batch"])):
                c = new_client("idle")
                i = len(clients)
                clients.append(c)

                def on_connect(_c: Any, _u: Any, _f: Any, reason: Any, _p: Any, i: int = i) -> None:
                    waiting.discard(i)
                    if reason.is_failure:
                        refused.append(reason)

                c.on_connect = on_connect
                try:
                    c.connect(HOST, spec["port"], KEEPALIVE)  # blocking TCP connect, CONNECT sent
                except OSError as exc:
                    raise BenchError(f"connection {i + 1} of {spec['count']}: {exc!r}") from None
                sock = c.socket()
                assert sock is not None  # connected
                sel.register(sock.fileno(), selectors.EVENT_READ, c)
                waiting.add(i)
            while waiting:
                if time.monotonic() > deadline:
                    raise BenchError(f"{len(waiting)} CONNACKs missing after {spec['timeout']:g} s "
                                     f"({len(clients) - len(waiting)} connected)")
                for key, _ in sel.select(0.5):
                    if key.data.loop_read() != mqtt.MQTT_ERR_SUCCESS:
                        raise BenchError(f"connection closed by the broker after "
                                         f"{len(clients) - len(waiting)} connected")
            if refused:
                raise BenchError(f"CONNACK refused: {refused[0]}")
        sel.close()
        pipe.send(("ready", {"connected": len(clients), "seconds": time.perf_counter() - t0,
                             "cpu": self_cpu() - cpu0, "nofile_soft": soft}))
        if not pipe.poll(spec["timeout"] + spec["hold"]):
            raise BenchError("the parent never said close")
        pipe.recv()
        pipe.send(("done", {"closed_by_broker": close_after_broker(clients, spec["timeout"])}))
    except BaseException as exc:  # noqa: BLE001 -- whatever it is, the parent reports it
        pipe.send(("error", str(exc) if isinstance(exc, BenchError) else repr(exc)))
    finally:
        for c in clients:
            s = c.socket()
            if s is not None:
                s.close()
        pipe.close()


def close_after_broker(clients: list[mqtt.Client], timeout: float) -> int:
    """DISCONNECT each connection and close it once the broker has closed its end, as MQTT
    has it do on DISCONNECT: the TIME_WAIT then falls on the broker's side. Were it on
    ours, 10,000 connections a broker would hold 10,000 of the 28,232 ephemeral ports for
    a minute, and paho binds before it connects (bind() cannot share a port held in
    TIME_WAIT), so the next broker's idle workload would fail with EADDRINUSE. Not
    paho's disconnect(): it closes the socket itself right after writing. Returns how
    many the broker closed within ``timeout`` (the others are closed by us)."""
    sel = selectors.DefaultSelector()
    socks = {}
    for c in clients:
        sock = c.socket()
        if sock is None:
            continue
        try:
            sock.send(DISCONNECT)
            sel.register(sock.fileno(), selectors.EVENT_READ, sock)
            socks[sock.fileno()] = sock
        except OSError:
            pass
    closed = 0
    deadline = time.monotonic() + timeout
    while socks and time.monotonic() < deadline:
        for key, _ in sel.select(0.5):
            sock = key.data
            try:
                data = sock.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                sel.unregister(key.fd)
                del socks[key.fd]
                sock.close()
                closed += 1
    sel.close()
    return closed


class ClientProcess:
    """Parent side: a spawned child (never fork paho's threads), read with a deadline."""

    def __init__(self, target: Any, spec: dict[str, Any]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pipe, child_end = ctx.Pipe()
        self.finished = False
        self.proc = ctx.Process(target=target, args=(spec, child_end), daemon=True)
        self.proc.start()
        child_end.close()

    def send(self, what: str) -> None:
        """A word to the child; one that is through already (a subscriber that has every
        message) may have closed its end: what it said is still to be read."""
        try:
            self.pipe.send((what, None))
        except (BrokenPipeError, ConnectionResetError):
            pass

    def expect(self, kind: str, timeout: float) -> Any:
        if not self.pipe.poll(timeout):
            raise BenchError(f"client process: no {kind!r} within {timeout:g} s")
        try:
            what, value = self.pipe.recv()
        except EOFError:
            self.proc.join(5)
            raise BenchError(f"client process exited (code {self.proc.exitcode})") from None
        if what == "error":
            raise BenchError(f"client process: {value}")
        if what != kind:
            raise BenchError(f"client process said {what!r}, expected {kind!r}")
        self.finished = kind == "done"
        return value

    def stop(self) -> None:
        """Our own child, by its handle: let it exit if it is done, else end it."""
        end_process(self.proc, True, 10 if self.finished else 0.1)
        self.pipe.close()
