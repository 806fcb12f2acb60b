"""What the bench scripts share: a process's CPU and memory from /proc, nearest-rank
quantiles, a `logbus serve` of their own, and the tail of a log file.

    BenchError                        a run that fails, with a message worth printing
    cpu_split, memory, self_cpu       (user, system) CPU seconds and VmRSS/VmHWM of a
                                      process from /proc; this process's CPU (getrusage)
    quantile, distribution_ms         nearest-rank quantiles; a latency distribution in ms
    start_logbus, stop_logbus, tail   `logbus serve` in a temp dir on free loopback ports
                                      (from its ready file), stopped by its Popen
    free_ports                        free TCP ports on 127.0.0.1, for a broker we start

Imported by name (``from common import ...``): bench/ is on sys.path, as the script's
own directory or put there by the importing script (kafka_bench.py, amqp_bench.py) or
test (tests/integration/amqp_target.py). Never import a script that runs as __main__
from another module: a second copy of it would bring a second BenchError that its
``except BenchError`` does not catch; this one is the only one.
"""

from __future__ import annotations

import base64
import json
import math
import os
import resource
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

LOOPBACK = "tcp:0:interface=127.0.0.1"  # a `logbus serve` listener on a free loopback port
# the benches' Kafka and MQTT clients give no credentials and create their topics: they act
# as the administrator, an operator's explicit choice (docs/decisions/0039)
ANONYMOUS_ADMIN = ("--anonymous-user", "guest")


def basic_auth(user: str = "guest", password: str = "guest") -> dict[str, str]:
    """The header of HTTP Basic credentials (every logbus API endpoint but /healthz asks;
    a broker started here has guest/guest)."""
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")}
LISTENERS = ("amqp", "kafka", "mqtt", "http")


class BenchError(Exception):
    pass


# -- /proc and getrusage -----------------------------------------------------------


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        raise BenchError(f"broker process {pid} is gone") from None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def memory(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a process, in MB (10^6 bytes)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in ("VmRSS", "VmHWM"):
                    out[name.lower() + "_mb"] = int(rest.split()[0]) * 1024 / 1e6
    except OSError:
        raise BenchError(f"broker process {pid} is gone") from None
    return out


def self_cpu() -> float:
    """User + system CPU seconds of this process so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# -- quantiles ---------------------------------------------------------------------


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of an ascending list (q in [0, 1])."""
    if not sorted_values:
        return float("nan")
    k = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[k - 1]


def distribution_ms(values: list[float]) -> dict[str, float]:
    """Count, p50/p90/p99, max and min of values in ms."""
    v = sorted(values)
    return {"count": len(v), "p50_ms": quantile(v, 0.50), "p90_ms": quantile(v, 0.90),
            "p99_ms": quantile(v, 0.99), "max_ms": v[-1] if v else float("nan"),
            "min_ms": v[0] if v else float("nan")}


# A latency message's head: sequence number, time due, time sent (time.monotonic_ns).
LATENCY_HEAD = struct.Struct("<Qqq")


class LatencyRecorder:
    """What a latency workload's receiver keeps of each message (``payload`` starts with
    LATENCY_HEAD): duplicates counted; past the first ``warmup`` messages, the latency
    from its send and from its due time, and when it came (ns)."""

    def __init__(self, total: int, warmup: int) -> None:
        self.warmup = warmup
        self.seen = bytearray(total)
        self.duplicates = 0
        self.latencies: list[int] = []
        self.from_schedule: list[int] = []
        self.received: list[int] = []

    def __call__(self, payload: Any, now: int | None = None) -> None:
        now = time.monotonic_ns() if now is None else now
        seq, due, sent = LATENCY_HEAD.unpack_from(payload)
        if self.seen[seq]:
            self.duplicates += 1
            return
        self.seen[seq] = 1
        if seq >= self.warmup:
            self.latencies.append(now - sent)
            self.from_schedule.append(now - due)
            self.received.append(now)

    def result(self) -> dict[str, Any]:
        return {"duplicates": self.duplicates, "latencies": self.latencies,
                "from_schedule": self.from_schedule, "received": self.received}


def slowest(latencies: Sequence[int], received: Sequence[int], count: int = 20) -> list[dict[str, float]]:
    """The ``count`` slowest messages: when each was sent (CLOCK_MONOTONIC, seconds, as
    logbus's LOGBUS_STALL_TRACE stamps its lines) and its latency in ms, slowest first,
    so that a stall can be matched with what the broker was doing then."""
    order = sorted(range(len(latencies)), key=latencies.__getitem__, reverse=True)[:count]
    return [{"sent_s": round((received[i] - latencies[i]) / 1e9, 6), "ms": round(latencies[i] / 1e6, 3)}
            for i in order]


# -- a `logbus serve` of our own ---------------------------------------------------


def tail(path: str, lines: int = 20) -> str:
    """The last lines of a text file ("" if it cannot be read)."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def log_problems(path: str) -> dict[str, Any]:
    """The warnings, errors and tracebacks a broker log holds: their count and the first ten."""
    with open(path, errors="replace") as f:
        bad = [line.rstrip() for line in f if " WARNING " in line or " ERROR " in line
               or " CRITICAL " in line or line.startswith("Traceback")]
    return {"count": len(bad), "first": bad[:10]}


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start_logbus(workdir: str, listeners: Mapping[str, str], extra: Sequence[str] = (),
                 timeout: float = 60.0, expect: Collection[str] | None = None,
                 ) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """`logbus serve` with its data in ``workdir``/data and its output in
    ``workdir``/broker.log, listening as ``listeners`` says (e.g. {"http": LOOPBACK}; every
    listener not named is off), clients without credentials acting as guest
    (``ANONYMOUS_ADMIN``), plus ``extra`` arguments. Returns the process and the
    addresses from its ready file ({"http": "127.0.0.1:port", ...}; the server writes it
    atomically). Fails, with the log's tail, if it does not start within ``timeout`` s or
    does not listen as asked: for each listener in ``expect`` (default: every one named in
    ``listeners`` and not "off"; pass () to check the ready file yourself, as
    mqtt_bench.py does while a gateway may not be built yet)."""
    unknown = set(listeners) - set(LISTENERS)
    if unknown:
        raise ValueError(f"unknown listeners {sorted(unknown)}")
    ready = os.path.join(workdir, "ready.json")
    log = os.path.join(workdir, "broker.log")
    args = [a for name in LISTENERS for a in (f"--{name}", listeners.get(name, "off"))]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "logbus", "serve", "--data-dir", os.path.join(workdir, "data"),
             *args, "--ready-file", ready, *ANONYMOUS_ADMIN, *extra],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out,
        )
    deadline = time.monotonic() + timeout
    while not os.path.exists(ready):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_logbus(proc)
            raise BenchError(f"logbus did not start (exit code {proc.returncode}); "
                             f"its log:\n{tail(log)}")
        time.sleep(0.05)
    with open(ready) as f:
        addresses: dict[str, Any] = json.load(f)
    if expect is None:
        expect = [name for name, listen in listeners.items() if listen != "off"]
    for name in expect:
        if name not in addresses:
            stop_logbus(proc)
            raise BenchError(
                f"logbus started but is not listening for {name.upper()} (its ready file lists "
                f"{sorted(addresses)}): no {name.upper()} gateway in this build. Its log:\n{tail(log)}")
    return proc, addresses


def stop_logbus(proc: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """SIGTERM to our own broker (by its Popen), SIGKILL if it is still up after ``grace`` s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class Meter:
    """Wall time, broker CPU (user, system) and the client's CPU over one measured span."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.user0, self.sys0 = cpu_split(pid)
        self.client0 = self_cpu()
        self.t0 = time.perf_counter()

    def stop(self, count: int, unit: str, plural: str, child_cpu: float = 0.0,
             seconds: float | None = None) -> dict[str, Any]:
        """``child_cpu``: CPU seconds of other client processes over the same span;
        ``seconds``: the span for the rate if not until now (e.g. until the last delivery)."""
        dt = time.perf_counter() - self.t0 if seconds is None else seconds
        user1, sys1 = cpu_split(self.pid)
        client = self_cpu() - self.client0 + child_cpu
        user, system = user1 - self.user0, sys1 - self.sys0
        n = max(count, 1)
        out = {
            plural: count, "seconds": dt, f"{plural}_per_s": count / dt if dt > 0 else None,
            "broker_cpu_seconds": user + system,
            f"broker_cpu_us_per_{unit}": (user + system) / n * 1e6,
            f"broker_user_us_per_{unit}": user / n * 1e6,
            f"broker_system_us_per_{unit}": system / n * 1e6,
            "broker_cpu_percent": (user + system) / dt * 100 if dt > 0 else None,
            f"client_cpu_us_per_{unit}": client / n * 1e6,
        }
        if child_cpu:
            out[f"client_consumer_process_cpu_us_per_{unit}"] = child_cpu / n * 1e6
        return out


class StartStop:
    """``with Broker(...) as b:``: ``start()`` on entry (``stop()`` if it fails part way),
    ``stop()`` on exit. Subclasses define both."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def end_process(proc: Any, finished: bool, grace: float) -> None:
    """End a ``multiprocessing`` child of ours by its handle: let it exit for ``grace``
    seconds if it said it is done, else terminate it, then kill it."""
    if finished:
        proc.join(grace)
    if proc.is_alive():
        proc.terminate()
        proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join(5)


def exit_on_sigterm(_signum: int, _frame: Any) -> None:
    """Outside the event loop (a broker starting, say): exit through the finally blocks."""
    sys.exit(143)


async def cancelled_by_sigterm(coro: Any, label: str) -> Any:
    """Await ``coro``; SIGTERM cancels it as Ctrl-C does (so connections close and queues
    are deleted) and then fails the run with BenchError. Afterwards SIGTERM exits through
    the finally blocks (``exit_on_sigterm``)."""
    import asyncio
    import signal

    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    terminated: list[bool] = []

    def on_sigterm() -> None:
        terminated.append(True)
        main_task.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        return await coro
    except asyncio.CancelledError:
        if terminated:
            raise BenchError(f"{label}: stopped by SIGTERM") from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, exit_on_sigterm)
