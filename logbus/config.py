"""Typed settings of one broker process.

Every key can come from four places; a later one wins:

    default  <  TOML file (--config FILE or LOGBUS_CONFIG)  <  LOGBUS_* environment  <  CLI flag

    settings = load_settings({"http": "tcp:0:interface=127.0.0.1"})   # flags; None values are unset
    settings.listeners()        # {"amqp": ["tcp:5672:interface=127.0.0.1"], ..., "http": ["tcp:0:..."]}
    settings.topic_defaults()   # TopicConfig for topics created without explicit settings

Every value is validated here, once; a bad one raises ConfigError naming the key and where
the value came from. The environment variable of a key is ``LOGBUS_`` + the key in upper
case (``LOGBUS_DATA_DIR``, ``LOGBUS_HTTP``, ...); an empty variable counts as unset.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from .core.access.auth import ANONYMOUS_USER
from .core.errors import InvalidConfig
from .retry.policy import InvalidRetryPolicy, parse_backoff
from .core.log.manifest import RemoteUrlError, parse_remote
from .core.log.topic_config import TopicConfig, parse_flush
from .core.pressure import (
    DEFAULT_DISK_FREE_LIMIT,
    DEFAULT_MEMORY_HIGH_WATERMARK,
    MAX_BYTES,
    check_watermark,
)

# Listener names, in start order. server.GATEWAYS maps each one to its protocol factory.
LISTENERS = ("amqp", "mqtt", "kafka", "http", "mqtt_ws")
OFF = "off"
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
CONFIG_ENV = "LOGBUS_CONFIG"
ENV_PREFIX = "LOGBUS_"


class ConfigError(Exception):
    """A setting is missing, malformed or out of range; the message says which and where."""


@dataclass(frozen=True, slots=True)
class Settings:
    data_dir: Path = Path("data")
    amqp: str = "tcp:5672:interface=127.0.0.1"
    mqtt: str = "tcp:1883:interface=127.0.0.1"
    kafka: str = "tcp:9092:interface=127.0.0.1"
    http: str = "tcp:8080:interface=127.0.0.1"
    mqtt_ws: str = OFF  # MQTT over WebSocket (subprotocol "mqtt"), e.g. tcp:8083:interface=127.0.0.1
    default_partitions: int = 1
    default_flush: str = "sync"
    max_open_files: int = 1024
    # tiered storage (docs/tiering.md): the bucket tiered topics upload sealed segments to,
    # s3://BUCKET/PREFIX, and the S3-compatible store's address ("": AWS S3); credentials
    # from the standard AWS environment variables and files
    remote_storage: str = ""
    remote_storage_endpoint: str = ""
    remote_cache_bytes: int = 1 << 30  # the local cache of remote segments' bytes read back
    log_level: str = "info"
    log_format: str = "text"  # "text": one line per record; "json": one JSON object per line
    kafka_advertised: str = ""  # host:port Kafka clients are told to connect to; "": the address they used
    kafka_auto_create_topics: bool = True  # Kafka's auto.create.topics.enable
    kafka_anonymous: str = "loopback"  # Kafka clients without SASL: "off", or from loopback only
    kafka_sasl_mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"  # offered by SaslHandshake
    # under a steady load, MQTT publishes read are appended, written and dispatched together
    # at most once per this long (core/tick.py, decision 0055; 0: at the end of every turn)
    turn_pace_ms: float = 1.0
    amqp_read_linger_ms: float = 1.0  # pause after a pipelined read (gateway/amqp/protocol.py)
    amqp_read_linger_max_ms: float = 8.0  # the longest it grows to, for a client that goes on sending
    amqp_max_message_size: int = 128 << 20  # largest AMQP body accepted (RabbitMQ's max_message_size)
    mqtt_max_packet_size: int = 16 << 20  # largest MQTT packet accepted (MQTT 5's Maximum Packet Size)
    mqtt_anonymous: str = "loopback"  # clients without a user name: "off", or from loopback only
    # who MQTT and Kafka clients without credentials act as (from loopback); made on first
    # boot with publish and consume on "/" (core/access/auth.py, decision 0039)
    anonymous_user: str = ANONYMOUS_USER
    # a verified TLS client certificate as the user (tls.py): its subject's common_name or its
    # subject_alternative_name; "off": certificates are not logins
    tls_cert_login: str = "off"
    # MQTT session limits (docs/operations.md, "MQTT session limits"): the longest a session
    # outlives its connection (seconds; 4294967295: no cap), messages queued per session (0: no
    # limit; past it new messages are dropped, as Mosquitto's max_queued_messages), QoS 1/2
    # messages in flight to a client (Mosquitto's max_inflight_messages), and the Receive
    # Maximum told to MQTT 5 clients (QoS 1/2 publishes from a client not yet answered)
    mqtt_max_session_expiry: int = 86400
    mqtt_max_queued_messages: int = 1000
    mqtt_max_inflight_messages: int = 20
    mqtt_receive_maximum: int = 20
    # timeouts (docs/operations.md, "Timeouts and connection limits"), in milliseconds:
    # the opening a new connection must complete in time, on every listener (RabbitMQ's
    # handshake_timeout): AMQP header to connection.open, MQTT CONNECT (after the WebSocket
    # upgrade, itself bounded alike), an HTTP request head
    handshake_timeout_ms: int = 10_000
    kafka_idle_timeout_ms: int = 600_000  # Kafka's connections.max.idle.ms: no complete request
    kafka_max_in_flight: int = 1  # requests of a connection handled at once (Kafka mutes at 1)
    http_idle_timeout_ms: int = 75_000  # a keep-alive connection between requests (nginx's keepalive_timeout)
    http_body_timeout_ms: int = 60_000  # a request body, from its head to its end (nginx's client_body_timeout)
    http_metrics_auth: bool = False  # /metrics asks for a monitoring user's credentials (else open, as RabbitMQ's)
    # pop groups (core/queues/pop.py): the wait before a given-back message comes again, and
    # the deliveries after which it goes to %DLQ%<group> (retry/policy.py parse_backoff)
    pop_retry_backoff: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    pop_max_deliveries: int = 16
    # per-client state of the stream model expires as in Kafka (docs/operations.md): an
    # idempotent producer's sequence state after this long without a batch from it
    # (producer.id.expiration.ms), and the committed offsets of a group with no members
    # after this long (Kafka's offsets.retention.minutes, 10080, in ms here; counted from
    # the later of its last commit and the moment it became empty)
    kafka_producer_id_expiration_ms: int = 86_400_000  # 1 day
    kafka_offsets_retention_ms: int = 604_800_000  # 7 days
    # how far a queue's messages may hold a topic's log against its retention (0: no
    # bound, as a RabbitMQ queue keeps its messages): past it, the messages holding it are
    # dead-lettered ("expired" / "maxlen") or dropped when retention runs (docs/operations.md)
    queue_max_pinned_ms: int = 0
    queue_max_pinned_bytes: int = 0
    # resource alarms (core/pressure.py): a fraction of RAM in (0, 1], or bytes above 1
    memory_high_watermark: float = DEFAULT_MEMORY_HIGH_WATERMARK
    disk_free_limit: int = DEFAULT_DISK_FREE_LIMIT  # bytes free on the data dir's filesystem
    # users (core/access/auth.py): the user created with vhost "/" on a fresh data directory, as
    # RabbitMQ's default_user / default_pass; users that may connect only from loopback
    default_user: str = "guest"
    default_pass: str = field(default="guest", repr=False)
    loopback_users: tuple[str, ...] = ("guest",)
    config_file: Path | None = None  # the TOML file these settings were read from, if any

    def listeners(self) -> dict[str, list[str]]:
        """Listener name -> its endpoint descriptions (one or more, side by side: plain
        and TLS, say), for every listener that is not ``off``."""
        return {name: ep.split() for name in LISTENERS if (ep := getattr(self, name)) != OFF}

    def topic_defaults(self) -> TopicConfig:
        return TopicConfig(partitions=self.default_partitions, flush=self.default_flush)


# --- validation of single values ------------------------------------------------------------
# Each converter takes the raw value (str from env/flags; any TOML type from the file) and
# returns the typed value or raises ValueError with a message that completes "<key>: ...".


def _as_str(raw: Any) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"must be a string, not {raw!r}")
    value = raw.strip()
    if not value:
        raise ValueError("must not be empty")
    return value


def _as_int(raw: Any, lo: int, hi: int) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"must be an integer, not {raw!r}")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str):
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"must be an integer, not {raw!r}") from None
    else:
        raise ValueError(f"must be an integer, not {raw!r}")
    if not lo <= value <= hi:
        raise ValueError(f"must be between {lo} and {hi}, not {value}")
    return value


def _data_dir(raw: Any) -> Path:
    return Path(_as_str(raw)).expanduser()


class _ParseOnlyReactor:
    """Stands in for the reactor while an endpoint string is parsed: parsing must not
    install the global reactor (``logbus serve`` installs epoll explicitly, later)."""


def check_endpoints(raw: Any, *, anonymous: bool = False) -> str:
    """One listener's endpoints: a description, several separated by whitespace, or (in
    TOML) an array of them; each checked by ``check_endpoint`` (``anonymous``: the
    listener's gateway takes an ``anonymous=`` option). Returned joined by one space
    (``off`` normalised)."""
    items = raw if isinstance(raw, list) else _as_str(raw).split()
    if not items:
        raise ValueError("must name at least one endpoint, or off")
    values = [check_endpoint(item, anonymous=anonymous) for item in items]
    if OFF in values:
        if len(values) > 1:
            raise ValueError(f"off cannot be listed beside endpoints: {raw!r}")
        return OFF
    return " ".join(values)


def check_endpoint(description: str, *, anonymous: bool = False) -> str:
    """Parse a Twisted server endpoint description the way ``serverFromString`` will at
    start-up, with logbus's own options (gateway/listener.py); return it (``off``
    normalised) or raise ValueError. Nothing is bound."""
    from twisted.internet.endpoints import serverFromString

    value = _as_str(description)
    if value.lower() == OFF:
        return OFF
    from .gateway.listener import rules_of, split_options

    parsed, options = split_options(value)  # logbus's own: caCertsDir=, anonymous=
    rules_of(options)
    if "anonymous" in options and not anonymous:
        raise ValueError(f"anonymous= is for mqtt, mqtt_ws and kafka listeners only, in {value!r}")
    ca_dir = options.get("caCertsDir")
    if ca_dir is not None and not value.startswith("ssl:"):
        raise ValueError(f"caCertsDir= is for ssl: endpoints only, in {value!r}")
    if ca_dir is not None and not Path(ca_dir).is_dir():
        raise ValueError(f"caCertsDir {ca_dir!r} is not a directory, in {value!r}")
    kind, _, rest = value.partition(":")
    first = rest.split(":", 1)[0]
    if kind in ("tcp", "tcp6", "ssl") and first.isdigit() and int(first) > 65535:
        raise ValueError(f"port {first} is out of range (0..65535) in {value!r}")
    try:
        serverFromString(_ParseOnlyReactor(), parsed)
    except ImportError as exc:
        raise ValueError(f"cannot use {value!r}: {exc} (TLS needs: pip install 'twisted[tls]')")
    except TypeError as exc:
        raise ValueError(f"wrong arguments for a {kind!r} endpoint in {value!r} ({exc})")
    except Exception as exc:  # ValueError, KeyError, OSError (certificate files), ...
        raise ValueError(f"not a valid endpoint {value!r}: {exc}")
    return value


def _remote_storage(raw: Any) -> str:
    url = _as_str(raw).strip()
    if url:
        try:
            parse_remote(url)
        except RemoteUrlError as e:
            raise ValueError(str(e)) from None
    return url


def _endpoint_url(raw: Any) -> str:
    url = _as_str(raw).strip()
    parts = urlsplit(url)
    if url and (parts.scheme not in ("http", "https") or not parts.netloc):
        raise ValueError(f"an endpoint is an http:// or https:// URL, not {url!r}")
    return url


def _flush(raw: Any) -> str:
    value = _as_str(raw).lower()
    try:
        parse_flush(value)
    except InvalidConfig as exc:
        raise ValueError(str(exc)) from None
    return value


def _host_port(raw: Any) -> str:
    value = _as_str(raw).strip()
    if not value:
        return ""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"must be host:port, not {raw!r}")
    return value


def _as_float(raw: Any, lo: float, hi: float) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise ValueError(f"must be a number, not {raw!r}")
    try:
        value = float(raw.strip() if isinstance(raw, str) else raw)
    except ValueError:
        raise ValueError(f"must be a number, not {raw!r}") from None
    if not lo <= value <= hi:  # NaN fails this too
        raise ValueError(f"must be between {lo:g} and {hi:g}, not {raw!r}")
    return value


def _as_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "yes", "on", "1"):
        return True
    if isinstance(raw, str) and raw.strip().lower() in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"must be true or false, not {raw!r}")


def _log_format(raw: Any) -> str:
    value = _as_str(raw).lower()
    if value not in ("text", "json"):
        raise ValueError(f"must be text or json, not {raw!r}")
    return value


def _log_level(raw: Any) -> str:
    value = _as_str(raw).lower()
    if value not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, not {raw!r}")
    return value


def _watermark(raw: Any) -> float:
    """A fraction of RAM or a byte count (core/pressure.py tells them by magnitude).
    Text (environment, flags) is read as an integer when it is one, so a byte count
    prints back as ``2000000000``, not ``2e9``."""
    if isinstance(raw, str):
        text = raw.strip()
        try:
            raw = int(text)
        except ValueError:
            try:
                raw = float(text)
            except ValueError:
                raise ValueError(f"must be a number, not {raw!r}") from None
    return check_watermark(raw)


def _user_name(raw: Any) -> str:
    value = _as_str(raw)
    if "\x00" in value:
        raise ValueError("must not contain NUL")
    return value


def _password(raw: Any) -> str:
    """A password is taken as given: not stripped (spaces may belong to it)."""
    if not isinstance(raw, str) or not raw:
        raise ValueError("must be a non-empty string")
    return raw


def _user_list(raw: Any) -> tuple[str, ...]:
    """A list of user names: a TOML array, or text with commas (``guest,admin``);
    ``none`` (RabbitMQ's ``loopback_users = none``) or ``[]`` for no user."""
    if isinstance(raw, str):
        text = raw.strip()
        if text.lower() == "none":
            return ()
        items: list[Any] = text.split(",")
    elif isinstance(raw, list):
        items = raw
    else:
        raise ValueError(f"must be a list of user names, not {raw!r}")  # noqa: TRY004 (a converter)
    if not all(isinstance(i, str) for i in items):
        raise ValueError(f"must be a list of user names, not {raw!r}")
    return tuple(dict.fromkeys(_user_name(i) for i in items if i.strip()))


ANONYMOUS = ("off", "loopback")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


CERT_LOGIN = ("off", "common_name", "subject_alternative_name")


def _cert_login(raw: Any) -> str:
    if raw not in CERT_LOGIN:
        raise ValueError(f"must be one of {', '.join(CERT_LOGIN)}, not {raw!r}")
    return str(raw)


def _sasl_mechanisms(raw: Any) -> str:
    names = [m.strip() for m in str(raw).replace(" ", ",").split(",") if m.strip()] if isinstance(raw, str) else None
    if not names or any(m not in SASL_MECHANISMS for m in names):
        raise ValueError(f"a comma-separated list of {', '.join(SASL_MECHANISMS)}, not {raw!r}")
    return ",".join(dict.fromkeys(names))


def _anonymous(raw: Any) -> str:
    if raw == "on":
        raise ValueError("'on' is gone: anonymous access is refused beyond loopback on every protocol;"
                            " give remote clients a user (docs/security.md), or 'loopback'")
    if raw not in ANONYMOUS:
        raise ValueError(f"must be one of {', '.join(ANONYMOUS)}, not {raw!r}")
    return str(raw)


def _backoff(raw: Any) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"a backoff is a string such as '1s 5s 30s', not {raw!r}")
    try:
        parse_backoff(raw)
    except InvalidRetryPolicy as e:
        raise ValueError(str(e)) from None
    return raw


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "data_dir": _data_dir,
    "amqp": check_endpoints,
    "mqtt": lambda raw: check_endpoints(raw, anonymous=True),
    "kafka": lambda raw: check_endpoints(raw, anonymous=True),
    "http": check_endpoints,
    "mqtt_ws": lambda raw: check_endpoints(raw, anonymous=True),
    "default_partitions": lambda raw: _as_int(raw, 1, 100_000),
    "default_flush": _flush,
    "max_open_files": lambda raw: _as_int(raw, 16, 1_000_000),
    "remote_storage": _remote_storage,
    "remote_storage_endpoint": _endpoint_url,
    "remote_cache_bytes": lambda raw: _as_int(raw, 16 << 20, MAX_BYTES),
    "log_level": _log_level,
    "log_format": _log_format,
    "kafka_advertised": _host_port,
    "kafka_auto_create_topics": _as_bool,
    "kafka_anonymous": _anonymous,
    "kafka_sasl_mechanisms": _sasl_mechanisms,
    "turn_pace_ms": lambda raw: _as_float(raw, 0.0, 100.0),
    "amqp_read_linger_ms": lambda raw: _as_float(raw, 0.0, 100.0),
    "amqp_read_linger_max_ms": lambda raw: _as_float(raw, 0.0, 1000.0),
    "amqp_max_message_size": lambda raw: _as_int(raw, 1, 512 << 20),  # RabbitMQ's ceiling: 512 MiB
    "mqtt_max_packet_size": lambda raw: _as_int(raw, 64, 268_435_460),  # MQTT's ceiling: 256 MiB + header
    "mqtt_anonymous": _anonymous,
    "anonymous_user": _user_name,
    "tls_cert_login": _cert_login,
    "mqtt_max_session_expiry": lambda raw: _as_int(raw, 1, 0xFFFFFFFF),  # MQTT 5's Session Expiry Interval
    "mqtt_max_queued_messages": lambda raw: _as_int(raw, 0, 100_000_000),
    "mqtt_max_inflight_messages": lambda raw: _as_int(raw, 1, 65535),  # packet ids
    "mqtt_receive_maximum": lambda raw: _as_int(raw, 1, 65535),  # MQTT 5's Receive Maximum
    "handshake_timeout_ms": lambda raw: _as_int(raw, 100, 3_600_000),
    "kafka_idle_timeout_ms": lambda raw: _as_int(raw, 100, 7 * 86_400_000),
    "kafka_max_in_flight": lambda raw: _as_int(raw, 1, 1000),
    "http_idle_timeout_ms": lambda raw: _as_int(raw, 100, 86_400_000),
    "http_body_timeout_ms": lambda raw: _as_int(raw, 100, 86_400_000),
    "http_metrics_auth": _as_bool,
    "pop_retry_backoff": _backoff,
    "pop_max_deliveries": lambda raw: _as_int(raw, 1, 1000),
    "kafka_producer_id_expiration_ms": lambda raw: _as_int(raw, 1, 2**31 - 1),  # Kafka's: an int, >= 1
    "kafka_offsets_retention_ms": lambda raw: _as_int(raw, 1, 2**31 * 60_000),  # Kafka's: int minutes
    "queue_max_pinned_ms": lambda raw: _as_int(raw, 0, 2**62),
    "queue_max_pinned_bytes": lambda raw: _as_int(raw, 0, MAX_BYTES),
    "memory_high_watermark": _watermark,
    "disk_free_limit": lambda raw: _as_int(raw, 0, MAX_BYTES),
    "default_user": _user_name,
    "default_pass": _password,
    "loopback_users": _user_list,
}
KEYS = tuple(_CONVERTERS)


def env_var(key: str) -> str:
    return ENV_PREFIX + key.upper()


# --- loading ----------------------------------------------------------------------------------


def load_settings(
    flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Merge defaults < TOML file < environment < flags into validated Settings.

    ``flags`` uses the key names (plus ``"config"`` for the file); None means "not given".
    ``environ`` defaults to ``os.environ``; variables with other names are ignored.
    """
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    environ = os.environ if environ is None else environ
    unknown = set(flags) - set(KEYS) - {"config"}
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")

    raw: dict[str, tuple[Any, str]] = {}  # key -> (value, where it came from)

    config_file: Path | None = None
    if "config" in flags:
        config_file = Path(str(flags["config"])).expanduser()
        file_source = f"--config {config_file}"
    elif environ.get(CONFIG_ENV):
        config_file = Path(environ[CONFIG_ENV]).expanduser()
        file_source = f"{CONFIG_ENV}={config_file}"
    if config_file is not None:
        for key, value in _read_toml(config_file, file_source).items():
            raw[key] = (value, f"config file {config_file}")

    for key in KEYS:
        value = environ.get(env_var(key))
        if value:
            raw[key] = (value, f"environment variable {env_var(key)}")

    for key in KEYS:
        if key in flags:
            raw[key] = (flags[key], f"command-line flag --{key.replace('_', '-')}")

    values: dict[str, Any] = {}
    for key, (value, source) in raw.items():
        try:
            values[key] = _CONVERTERS[key](value)
        except ValueError as exc:
            raise ConfigError(f"{key}: {exc} (from {source})") from None
    return Settings(**values, config_file=config_file)


def _read_toml(path: Path, source: str) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path} ({source}): {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    unknown = [key for key in data if key not in _CONVERTERS]
    if unknown:
        raise ConfigError(
            f"config file {path}: unknown key(s) {', '.join(map(repr, unknown))}"
            f" (known: {', '.join(KEYS)})"
        )
    return data
