"""Resource alarms, as RabbitMQ raises them: "memory" while the process uses more than
its memory limit, "disk" while the data directory's filesystem has less free space
than the disk free limit.

    monitor = ResourceMonitor(data_dir, memory_high_watermark=0.4, disk_free_limit=50_000_000)
    monitor.subscribe(lambda alarms: ...)   # called with the new frozenset on every change
    monitor.check()                         # the broker calls this once a second
    monitor.set_limits(disk_free_limit=1 << 60)   # at run time (PUT /api/limits): re-checks

Theory of operation. Nothing here blocks anything: the monitor only reads the two
numbers and keeps the set of active alarms; subscribers (the AMQP gateway) decide what
an alarm means for their clients. Memory is the process's resident set size
(/proc/self/statm), not the whole VM's allocator view RabbitMQ uses; free disk space is
what an unprivileged process may still write (``f_bavail``), as ``df`` shows it.

A memory watermark is relative or absolute, with one rule everywhere (config, HTTP,
here): a number in (0, 1] is a fraction of the machine's RAM, an integer above 1 is a
byte count.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from .errors import InvalidConfig

log = logging.getLogger(__name__)

MEMORY = "memory"
DISK = "disk"
RESOURCES = (MEMORY, DISK)
DEFAULT_MEMORY_HIGH_WATERMARK = 0.4  # RabbitMQ's vm_memory_high_watermark
DEFAULT_DISK_FREE_LIMIT = 50_000_000  # RabbitMQ's disk_free_limit
MAX_BYTES = 2**63 - 1

Alarms = frozenset[str]
Subscriber = Callable[[Alarms], None]


def check_watermark(value: Any) -> float:
    """A memory watermark, validated: a fraction in (0, 1] (made a float) or a whole
    number of bytes above 1 (made an int, so it prints as one). ValueError, completing
    "<setting>: ...", otherwise."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and 0 < value <= 1:
        return float(value)
    if number and 1 < value <= MAX_BYTES and float(value).is_integer():
        return int(value)
    raise ValueError(
        f"must be a fraction of RAM (0 < x <= 1) or a whole number of bytes, not {value!r}"
    )


def check_disk_free_limit(value: Any) -> int:
    """A disk free limit in bytes, validated (0 disables the disk alarm)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be a whole number of bytes, not {value!r}")
    if not 0 <= value <= MAX_BYTES:
        raise ValueError(f"must be between 0 and {MAX_BYTES}, not {value}")
    return value


def total_memory() -> int:
    """The machine's RAM in bytes (MemTotal of /proc/meminfo)."""
    with open("/proc/meminfo", "rb") as f:
        for line in f:
            if line.startswith(b"MemTotal:"):
                return int(line.split()[1]) * 1024  # the kernel writes kB
    raise OSError("/proc/meminfo has no MemTotal line")


def resident_memory(statm: int | None = None) -> int:
    """This process's resident set size in bytes (``statm``: an open descriptor of
    /proc/self/statm, read again without opening a file: it works when the process is
    out of file descriptors)."""
    if statm is not None:
        return int(os.pread(statm, 256, 0).split()[1]) * os.sysconf("SC_PAGE_SIZE")
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def free_disk(directory: str | os.PathLike[str]) -> int:
    """Bytes an unprivileged process may still write on ``directory``'s filesystem."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


class ResourceMonitor:
    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        memory_high_watermark: float = DEFAULT_MEMORY_HIGH_WATERMARK,
        disk_free_limit: int = DEFAULT_DISK_FREE_LIMIT,
    ) -> None:
        self.directory = directory
        self.total_memory = total_memory()
        self.memory_high_watermark = _valid(
            "memory_high_watermark", check_watermark, memory_high_watermark
        )
        self.disk_free_limit = _valid("disk_free_limit", check_disk_free_limit, disk_free_limit)
        self.memory_used = 0  # bytes, as of the last check
        self.disk_free = 0  # bytes, as of the last check
        self.alarms: Alarms = frozenset()
        self._subscribers: list[Subscriber] = []
        # held open for good: memory is read even when no descriptor is left to open
        self._statm = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)

    @property
    def memory_limit(self) -> int:
        """The watermark in bytes."""
        w = self.memory_high_watermark
        return int(w * self.total_memory) if w <= 1 else int(w)

    def subscribe(self, callback: Subscriber) -> None:
        """Call ``callback(alarms)`` whenever the set of active alarms changes."""
        self._subscribers.append(callback)

    def set_limits(
        self, *, memory_high_watermark: Any = None, disk_free_limit: Any = None
    ) -> Alarms:
        """Change either limit or both (None: keep it) and re-check at once, as
        ``rabbitmqctl set_vm_memory_high_watermark`` / ``set_disk_free_limit`` do. Both
        values are validated before either is applied: InvalidConfig names the bad one."""
        watermark, disk = self.memory_high_watermark, self.disk_free_limit
        if memory_high_watermark is not None:
            watermark = _valid("memory_high_watermark", check_watermark, memory_high_watermark)
        if disk_free_limit is not None:
            disk = _valid("disk_free_limit", check_disk_free_limit, disk_free_limit)
        self.memory_high_watermark, self.disk_free_limit = watermark, disk
        log.info(
            "limits: memory high watermark %r (%d bytes), disk free limit %d bytes",
            watermark,
            self.memory_limit,
            disk,
        )
        return self.check()

    def check(self) -> Alarms:
        """Read memory and disk, update the alarms, notify subscribers if they changed."""
        try:
            self.memory_used = resident_memory(self._statm if self._statm >= 0 else None)
        except OSError as exc:
            log.warning("cannot read this process's memory use: %s", exc)
        disk_low = DISK in self.alarms  # as it was, if the directory cannot be read now
        try:
            self.disk_free = free_disk(self.directory)
            disk_low = self.disk_free < self.disk_free_limit
        except OSError as exc:  # the directory was removed under us, say
            log.warning("cannot read free disk space of %s: %s", self.directory, exc)
        memory_high = self.memory_used > self.memory_limit
        alarms = frozenset(name for name, on in ((MEMORY, memory_high), (DISK, disk_low)) if on)
        if alarms != self.alarms:
            for name in sorted(alarms ^ self.alarms):
                if name in alarms:
                    log.warning("%s alarm set: %s", name, self._describe(name))
                else:
                    log.info("%s alarm cleared: %s", name, self._describe(name))
            self.alarms = alarms
            for callback in list(self._subscribers):
                callback(alarms)
        return alarms

    def close(self) -> None:
        if self._statm >= 0:
            os.close(self._statm)
            self._statm = -1

    def describe(self, name: str) -> str:
        return self._describe(name)

    def _describe(self, name: str) -> str:
        if name == MEMORY:
            return f"{self.memory_used} bytes used, limit {self.memory_limit}"
        return f"{self.disk_free} bytes free on {self.directory}, limit {self.disk_free_limit}"

    def to_json(self) -> dict[str, Any]:
        """What GET /api/limits answers."""
        return {
            "memory_high_watermark": self.memory_high_watermark,
            "memory_limit_bytes": self.memory_limit,
            "disk_free_limit": self.disk_free_limit,
            "alarms": [name for name in RESOURCES if name in self.alarms],
            "memory_used_bytes": self.memory_used,
            "disk_free_bytes": self.disk_free,
        }


def _valid(name: str, check: Callable[[Any], Any], value: Any) -> Any:
    try:
        return check(value)
    except ValueError as exc:
        raise InvalidConfig(f"{name}: {exc}") from None


class AlarmCollector:
    """``logbus_resource_alarm{resource=...}``: 1 while the alarm is set, read from the
    monitor at scrape time."""

    def __init__(self, monitor: ResourceMonitor) -> None:
        self._monitor = monitor

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily(
            "logbus_resource_alarm", "1 while a resource alarm is set", labels=["resource"]
        )
        for name in RESOURCES:
            gauge.add_metric([name], 1.0 if name in self._monitor.alarms else 0.0)
        yield gauge
