"""The clients of bench/fanin_bench.py: many devices, each publishing one message at a
time on its own connection, and one consumer receiving them all -- raw non-blocking
sockets and packets encoded once, no client library on the hot path, so that the
broker and not the clients is measured.

Theory of operation. The run's messages are numbered by a global sequence number
``seq``: device ``i`` of ``N`` sends ``seq = k * N + i`` as its k-th message, due at
``t0 + seq / (N * rate)`` (CLOCK_MONOTONIC, the same clock in every process), so device
i's first send is at i / (N * rate) s and then every 1 / rate s, and the whole fleet's
sends are spread evenly. Messages with ``seq < warmup_msgs`` are the warm-up; ``seq <
total`` are all there are. Each payload starts with common.LATENCY_HEAD (seq, due,
sent) so the consumer can take the delivery latency and find losses and duplicates.

    devices_main    one process, a share of the devices (i % processes): connects them
                    all (``concurrency`` handshakes at a time), says "connected", waits
                    for "start" (t0), then one epoll loop: a cursor walks the schedule
                    and sends each due message; a device whose previous message is not
                    yet acknowledged owes it and sends it the moment the ack comes (one
                    in flight per connection). QoS 0 has no ack: sent is done. Then the
                    last acks (--drain-timeout), goodbye, and "done" with the maps of
                    seqs sent and acknowledged and the ack latencies.
    consumer_main   (bench/fanin_consumer.py) one process, one connection.
    ClientProcess   the parent's handle on either.

The codecs are in bench/fanin_codecs.py.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import select
import socket
import struct
import time
from collections import deque
from typing import Any

from common import BenchError, end_process, self_cpu
from fanin_codecs import CODECS, HOST, Device, raise_nofile

from logbus.reactor import FineTimer

_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")



# -- the devices -------------------------------------------------------------------



class Fleet:
    """One process's devices on one epoll."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.codec = CODECS[spec["protocol"]](spec)
        self.devices = [Device(i, self.codec.head(i))
                        for i in range(spec["process"], spec["devices"], spec["processes"])]
        self.by_fd: dict[int, Device] = {}
        self.ep = select.epoll()

    def write(self, dev: Device, data: bytes) -> None:
        assert dev.sock is not None
        if dev.out:
            dev.out += data
            return
        try:
            n = dev.sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError as exc:
            raise BenchError(f"device {dev.index}: {exc}") from None
        if n < len(data):
            dev.out = data[n:]
            self.ep.modify(dev.fd, select.EPOLLIN | select.EPOLLOUT)

    def flush(self, dev: Device) -> None:
        assert dev.sock is not None
        data, dev.out = dev.out, b""
        if data:
            self.write(dev, data)
        if not dev.out:
            self.ep.modify(dev.fd, select.EPOLLIN)

    def read(self, dev: Device) -> bool:
        """Append what came to dev.buf; False if nothing could be read yet."""
        assert dev.sock is not None
        try:
            data = dev.sock.recv(65536)
        except BlockingIOError:
            return False
        except OSError as exc:
            raise BenchError(f"device {dev.index}: {exc}") from None
        if not data:
            raise BenchError(f"device {dev.index}: the broker closed the connection")
        dev.buf += data
        return True

    # -- connecting ------------------------------------------------------------------

    def connect(self) -> float:
        """Every device connected and through its handshake; returns the seconds it took."""
        spec = self.spec
        t0 = time.monotonic()
        waiting = deque(self.devices)
        opening: dict[int, Device] = {}
        deadline = t0 + spec["connect_timeout"] * max(1, len(self.devices) / spec["concurrency"])
        while waiting or opening:
            now = time.monotonic()
            while waiting and len(opening) < spec["concurrency"]:
                dev = waiting.popleft()
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setblocking(False)
                err = sock.connect_ex((HOST, spec["port"]))
                if err not in (0, errno.EINPROGRESS):
                    raise BenchError(f"device {dev.index}: connect: {os.strerror(err)}")
                dev.sock, dev.fd, dev.deadline = sock, sock.fileno(), now + spec["connect_timeout"]
                self.by_fd[dev.fd] = dev
                opening[dev.fd] = dev
                self.ep.register(dev.fd, select.EPOLLOUT)
            for fd, ev in self.ep.poll(0.1):
                dev = self.by_fd[fd]
                if not dev.connected:
                    self._connected(dev)
                else:
                    if ev & select.EPOLLOUT:
                        self.flush(dev)
                    if ev & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR) and self.read(dev):
                        out = self.codec.handshake(dev)
                        if out:
                            self.write(dev, out)
                if dev.ready:
                    opening.pop(fd, None)
            now = time.monotonic()
            late = [d for d in opening.values() if now > d.deadline]
            if late or now > deadline:
                raise BenchError(f"{len(opening)} devices not connected within {spec['connect_timeout']:g} s "
                                 f"(first: device {(late or list(opening.values()))[0].index}); "
                                 f"{len(self.devices) - len(waiting) - len(opening)} were")
        return time.monotonic() - t0

    def _connected(self, dev: Device) -> None:
        """The TCP connect finished (or failed): write the opening."""
        assert dev.sock is not None
        err = dev.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise BenchError(f"device {dev.index}: connect: {os.strerror(err)}")
        dev.connected = True
        self.ep.modify(dev.fd, select.EPOLLIN)
        first = self.codec.opening(dev)
        if first:
            self.write(dev, first)

    # -- the schedule ----------------------------------------------------------------

    def run(self, t0: int) -> dict[str, Any]:
        """Send every due message, one in flight per device, then wait for the last acks."""
        spec, codec = self.spec, self.codec
        n, total, warm = spec["devices"], spec["total"], spec["warmup_msgs"]
        period = 1e9 / (n * spec["rate"])  # ns between two sends of the fleet
        order = self.devices  # ascending index: the cursor's seqs ascend
        sent_map, acked_map = bytearray(total), bytearray(total)
        ack_ns: list[int] = []
        lag_ns: list[int] = []
        counts = {"sent": 0, "acked": 0, "owed_sends": 0}
        busy = 0
        acks = codec.acks
        write, ep, by_fd = self.write, self.ep, self.by_fd
        monotonic_ns = time.monotonic_ns

        def send(dev: Device, seq: int) -> None:
            nonlocal busy
            due = t0 + int(seq * period)
            now = monotonic_ns()
            write(dev, codec.message(dev, seq, due, now))
            dev.sent += 1
            sent_map[seq] = 1
            counts["sent"] += 1
            if seq >= warm:
                lag_ns.append(now - due)
            if acks:
                dev.busy, dev.seq, dev.sent_ns = True, seq, now
                busy += 1
            else:
                acked_map[seq] = 1
                counts["acked"] += 1

        # --send-clock timer: the broker's own timerfd (logbus.reactor.FineTimer) wakes the
        # poll at the next send's time; epoll's own timeout counts whole ms, rounded up
        timer: FineTimer | None = None
        if spec.get("send_clock", "timer") == "timer":
            timer = FineTimer.open(ep)
            if timer is None:
                raise BenchError("--send-clock timer: no timerfd here")
        j, k = 0, 0
        next_seq = order[0].index if order else total
        end = t0 + int(total * period) + int(spec["drain_timeout"] * 1e9)
        while True:
            now = monotonic_ns()
            while next_seq < total and t0 + int(next_seq * period) <= now:
                dev = order[j]
                if dev.busy:
                    dev.owed.append(next_seq)
                    counts["owed_sends"] += 1
                else:
                    send(dev, next_seq)
                j += 1
                if j == len(order):
                    j, k = 0, k + 1
                next_seq = k * n + order[j].index
            if next_seq >= total and not busy or now > end:
                break
            if next_seq < total:
                due_ns = t0 + int(next_seq * period)
                timeout = min(max(due_ns - now, 0) / 1e9, 0.05)
                if timer is not None and 0 < due_ns - now < 50_000_000:
                    timer.arm((due_ns - now) / 1e9)  # not again while armed for about then
                    timeout = 0.05  # the timer wakes the poll at the send's time
            else:
                timeout = 0.05
            for fd, ev in ep.poll(timeout):
                if timer is not None and fd == timer.fd:
                    timer.expired()
                    continue
                dev = by_fd[fd]
                if ev & select.EPOLLOUT:
                    self.flush(dev)
                if not ev & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR) or not self.read(dev):
                    continue
                done, reply = codec.feed(dev)
                if reply:
                    write(dev, reply)
                if done:
                    if not dev.busy:
                        raise BenchError(f"device {dev.index}: an ack with nothing in flight")
                    now = monotonic_ns()
                    seq = dev.seq
                    acked_map[seq] = 1
                    counts["acked"] += 1
                    if seq >= warm:
                        ack_ns.append(now - dev.sent_ns)
                    dev.busy = False
                    busy -= 1
                    if dev.owed:
                        send(dev, dev.owed.popleft())
        if timer is not None:
            timer.close(ep)
        due_here = sum((total - d.index + n - 1) // n for d in order if d.index < total)
        unsent = due_here - counts["sent"]
        return {**counts, "unacked": busy, "unsent": unsent, "sent_map": bytes(sent_map),
                "acked_map": bytes(acked_map), "ack_ns": ack_ns, "lag_ns": lag_ns}

    def close(self, timeout: float) -> None:
        """Goodbye on every connection; wait (at most ``timeout``) for the broker to close
        where the protocol says it does, then close ours."""
        live = {d.fd: d for d in self.devices if d.sock is not None}
        for dev in live.values():
            try:
                bye = self.codec.closing(dev)
                if bye:
                    self.write(dev, bye)
            except BenchError:
                pass
        if self.codec.waits_for_eof:
            deadline = time.monotonic() + timeout
            while live and time.monotonic() < deadline:
                for fd, _ev in self.ep.poll(0.1):
                    closing = live.get(fd)
                    if closing is None or closing.sock is None:
                        continue
                    try:
                        data = closing.sock.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        self.ep.unregister(fd)
                        del live[fd]
        for dev in self.devices:
            if dev.sock is not None:
                dev.sock.close()
                dev.sock = None
        self.ep.close()


def devices_main(spec: dict[str, Any], pipe: Any) -> None:
    """A spawned process: its share of the fleet (see the module's docstring)."""
    fleet = None
    try:
        raise_nofile(len(range(spec["process"], spec["devices"], spec["processes"])) + 64)
        fleet = Fleet(spec)
        seconds = fleet.connect()
        pipe.send(("connected", {"seconds": seconds, "devices": len(fleet.devices)}))
        if not pipe.poll(spec["start_timeout"]):
            raise BenchError(f"no start within {spec['start_timeout']:g} s")
        what, t0 = pipe.recv()
        if what != "start":
            raise BenchError(f"start expected, the parent said {what!r}")
        result = fleet.run(t0)
        # "done" only after the window: before it, the parent takes a word from us as a failure
        window_end = t0 + int(spec["total"] * 1e9 / (spec["devices"] * spec["rate"]))
        time.sleep(max(0, window_end - time.monotonic_ns()) / 1e9 + 0.01)
        result["connect_seconds"] = seconds
        result["cpu"] = self_cpu()
        fleet.close(5.0)
        fleet = None
        pipe.send(("done", result))
    except BaseException as exc:  # noqa: BLE001 -- whatever it is, the parent reports it
        pipe.send(("error", str(exc) if isinstance(exc, BenchError) else repr(exc)))
    finally:
        if fleet is not None:
            try:
                fleet.close(0.5)
            except Exception:  # noqa: BLE001 -- failing already
                pass
        pipe.close()


# -- the parent's side -------------------------------------------------------------


class ClientProcess:
    """A spawned child running ``target(spec, pipe)``, read with a deadline."""

    def __init__(self, target: Any, spec: dict[str, Any], label: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.label = label
        self.pipe, child_end = ctx.Pipe()
        self.finished = False
        self.proc = ctx.Process(target=target, args=(spec, child_end), daemon=True)
        self.proc.start()
        child_end.close()

    @property
    def pid(self) -> int:
        assert self.proc.pid is not None
        return self.proc.pid

    def send(self, what: str, value: Any = None) -> None:
        self.pipe.send((what, value))

    def expect(self, kind: str, timeout: float) -> Any:
        if not self.pipe.poll(timeout):
            raise BenchError(f"{self.label}: no {kind!r} within {timeout:g} s")
        try:
            what, value = self.pipe.recv()
        except EOFError:
            self.proc.join(5)
            raise BenchError(f"{self.label} exited (code {self.proc.exitcode})") from None
        if what == "error":
            self.finished = True
            raise BenchError(f"{self.label}: {value}")
        if what != kind:
            raise BenchError(f"{self.label} said {what!r}, expected {kind!r}")
        self.finished = kind == "done"
        return value

    def stop(self) -> None:
        """Our own child, by its handle: let it exit if it is done, else end it."""
        end_process(self.proc, self.finished, 10 if self.finished else 0.1)
        self.pipe.close()
