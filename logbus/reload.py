"""SIGHUP: read the settings again and apply those that can change at run time, as
Mosquitto reloads its configuration file.

The settings are loaded again from the same places (the TOML file, the LOGBUS_*
environment, the ``serve`` flags, in that order), so in practice a change to the file
is what a reload brings (flags still win over it). Each key that changed is either
applied here (RELOADABLE) or named in the log as needing a restart; an invalid file
changes nothing and is logged. The broker never stops for a SIGHUP.

What applies at run time:

- ``log_level``: at once.
- ``memory_high_watermark``, ``disk_free_limit``: as ``PUT /api/limits`` (and then
  re-checked); a limit changed over HTTP since is overwritten only if the file's
  value changed.
- the timeouts (``handshake_timeout_ms``, ``kafka_idle_timeout_ms``,
  ``http_idle_timeout_ms``, ``http_body_timeout_ms``): for connections accepted from
  then on (a Kafka connection's idle timer takes the new value when it next fires).
- every TLS listener's certificate and key, read again from their files (tls.py): for
  connections accepted from then on; a pair that does not load leaves the old one.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Callable

from .config import Settings

if TYPE_CHECKING:
    from .server import LogbusService

log = logging.getLogger(__name__)

TIMEOUTS = ("handshake_timeout_ms", "kafka_idle_timeout_ms", "http_idle_timeout_ms", "http_body_timeout_ms")
RELOADABLE = ("log_level", "memory_high_watermark", "disk_free_limit", *TIMEOUTS)


def changed_keys(old: Settings, new: Settings) -> list[str]:
    return [f.name for f in dataclasses.fields(Settings)
            if getattr(old, f.name) != getattr(new, f.name)]


def set_log_level(level: str) -> None:
    logging.getLogger().setLevel(level.upper())
    # Twisted's info lines repeat ours; kept quiet but at debug (server.setup_logging)
    logging.getLogger("twisted").setLevel(logging.DEBUG if level == "debug" else logging.WARNING)


def apply_timeouts(service: LogbusService, settings: Settings) -> None:
    """The listeners' factories take the new timeouts (server.py built them with the old)."""
    from .gateway.http.timeouts import Timeouts

    handshake = settings.handshake_timeout_ms / 1000
    for listener in service.listeners:
        factory: Any = listener.factory
        if listener.name == "amqp":
            factory.handshake_timeout = handshake
        elif listener.name == "mqtt":
            factory.connect_timeout = handshake
        elif listener.name == "mqtt_ws":
            factory.handshake_timeout = handshake
            factory.wrappedFactory.connect_timeout = handshake
        elif listener.name == "kafka":
            factory.idle_timeout = settings.kafka_idle_timeout_ms / 1000
            factory.handshake_timeout = handshake
        elif listener.name == "http":
            factory.timeouts = Timeouts(head=handshake, idle=settings.http_idle_timeout_ms / 1000,
                                        body=settings.http_body_timeout_ms / 1000)


class Reloader:
    """Holds the settings in force; ``reload()`` is what SIGHUP calls (on the reactor thread)."""

    def __init__(self, service: LogbusService, settings: Settings, load: Callable[[], Settings]) -> None:
        self.service = service
        self.settings = settings
        self.load = load

    def reload(self) -> None:
        from .config import ConfigError

        for listener in self.service.listeners:  # renewed certificates, for new connections (first:
            if listener.tls is not None:  # a settings file that does not load does not stop them)
                listener.tls.reload()
        try:
            new = self.load()
        except ConfigError as exc:
            log.error("SIGHUP: settings not reloaded, the old ones stay: %s", exc)
            return
        old = self.settings
        changed = changed_keys(old, new)
        applied = [k for k in changed if k in RELOADABLE]
        restart = [k for k in changed if k not in RELOADABLE]
        if "memory_high_watermark" in applied or "disk_free_limit" in applied:
            from .core.errors import LogbusError

            try:
                self.service.broker.pressure.set_limits(
                    memory_high_watermark=new.memory_high_watermark if "memory_high_watermark" in applied else None,
                    disk_free_limit=new.disk_free_limit if "disk_free_limit" in applied else None)
            except LogbusError as exc:
                log.error("SIGHUP: resource limits not changed: %s", exc)
                applied = [k for k in applied if k not in ("memory_high_watermark", "disk_free_limit")]
        if "log_level" in applied:
            set_log_level(new.log_level)
        if any(k in TIMEOUTS for k in applied):
            apply_timeouts(self.service, new)
        # what is in force: the new values of what was applied, the old ones of the rest
        self.settings = dataclasses.replace(old, **{k: getattr(new, k) for k in applied})
        if not changed:
            log.info("SIGHUP: settings reloaded%s, nothing changed", _source(new))
            return
        log.info("SIGHUP: settings reloaded%s; applied: %s; changed but in force only after a restart: %s",
                 _source(new), _list(old, new, applied), _list(old, new, restart))


def _source(settings: Settings) -> str:
    return f" from {settings.config_file}" if settings.config_file else ""


def _list(old: Settings, new: Settings, keys: list[str]) -> str:
    if not keys:
        return "none"
    return ", ".join(f"{k} ({_show(k, getattr(old, k))} -> {_show(k, getattr(new, k))})" for k in keys)


def _show(key: str, value: Any) -> str:
    return "***" if key == "default_pass" else repr(value)
