"""Build the Broker and its gateways as one Twisted service tree, and run it (`logbus serve`).

Theory of operation:

    LogbusService (MultiService)
      BrokerService           start: broker.start() (lock, state, recovery); stop: broker.stop()
      ListenerService amqp    one per configured listener: endpoint.listen(factory)
      ListenerService ...

Children start in that order, so no connection is accepted before the log is recovered,
and stop in reverse order, each waiting for the one before: listeners close first, the
broker flushes last. ``run()`` installs the stop as a "before shutdown" trigger, so
SIGTERM/SIGINT (which stop the reactor) flush the broker before the process exits;
SIGHUP reloads the settings that can change at run time (reload.py) and never stops it.

Adding a protocol: write ``build(broker, settings, reactor) -> IProtocolFactory`` in its
gateway package and put it in GATEWAYS below (the listener name is already a config key,
see config.LISTENERS).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import sys
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from twisted.application.service import MultiService, Service
from twisted.internet import defer
from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IAddress, IProtocolFactory
from twisted.python.failure import Failure

from .retry.policy import pop_retry_policy
from .config import LISTENERS, Settings
from .console_line import console_line
from .core.errors import LogbusError
from .reload import Reloader, set_log_level
from .gateway.listener import DEFAULT_RULES, ListenerFactory, rules_of, split_options
from .tls import ServerTLS, server_tls

if TYPE_CHECKING:
    from .core.broker import Broker

log = logging.getLogger(__name__)

GatewayBuilder = Callable[["Broker", Settings, Any], IProtocolFactory]
# IProtocolFactory(factory) is the factory itself (it provides the interface), typed as the
# interface: mypy does not see zope's @implementer.


# per broker, the AMQP model as an operator changes it (built by whichever of _http and
# _amqp comes first; the AMQP listener hands it its connections for the channels view)
_OPERATORS: weakref.WeakKeyDictionary[Broker, Any] = weakref.WeakKeyDictionary()


def _amqp_operator(broker: Broker) -> Any:
    from .gateway.amqp.operator import AmqpOperator

    operator = _OPERATORS.get(broker)
    if operator is None:
        # exchanges, queues and bindings as an operator declares them: AMQP's model, whether
        # or not an AMQP listener runs (RabbitMQ's management API declares in its terms too)
        operator = _OPERATORS[broker] = AmqpOperator(broker.queue_model)
    return operator


def _http(broker: Broker, settings: Settings, reactor: Any) -> IProtocolFactory:
    from .gateway.http.site import build_site

    topology = _amqp_operator(broker)
    return IProtocolFactory(build_site(doors=broker.doors, admin=broker.admin, topics=broker.topics,
                                       pop=broker.pop_service, metrics=broker.metrics, halves=broker.halves,
                                       topology=topology, reactor=reactor,
                                       timeouts=_http_timeouts(settings), metrics_auth=settings.http_metrics_auth))


def _http_timeouts(settings: Settings) -> Any:
    from .gateway.http.timeouts import Timeouts

    return Timeouts(head=settings.handshake_timeout_ms / 1000, idle=settings.http_idle_timeout_ms / 1000,
                    body=settings.http_body_timeout_ms / 1000)


def _kafka(broker: Broker, settings: Settings, reactor: Any) -> IProtocolFactory:
    from .gateway.kafka.codec import DEFAULT_MAX_FRAME
    from .gateway.kafka.protocol import KafkaFactory

    advertised = None
    if settings.kafka_advertised:
        host, _, port = settings.kafka_advertised.rpartition(":")
        advertised = (host, int(port))
    return IProtocolFactory(KafkaFactory(broker.doors, broker.streams, broker.topics, broker.access, broker.metrics,
                                         reactor, DEFAULT_MAX_FRAME, advertised,
                                         auto_create_topics=settings.kafka_auto_create_topics,
                                         idle_timeout=settings.kafka_idle_timeout_ms / 1000,
                                         handshake_timeout=settings.handshake_timeout_ms / 1000,
                                         max_in_flight=settings.kafka_max_in_flight,
                                         anonymous=settings.kafka_anonymous,
                                         sasl_mechanisms=tuple(settings.kafka_sasl_mechanisms.split(",")),
                                         cert_login=settings.tls_cert_login,
                                         anonymous_user=settings.anonymous_user))


def _amqp(broker: Broker, settings: Settings, reactor: Any) -> IProtocolFactory:
    from .gateway.amqp.protocol import AmqpFactory

    factory = AmqpFactory(broker.doors, broker.queue_model, broker.metrics, reactor,
                          read_linger=settings.amqp_read_linger_ms / 1000,
                          read_linger_max=settings.amqp_read_linger_max_ms / 1000,
                          max_message_size=settings.amqp_max_message_size,
                          handshake_timeout=settings.handshake_timeout_ms / 1000, cert_login=settings.tls_cert_login)
    _amqp_operator(broker).connections = factory.connections  # the channels the operator sees
    return IProtocolFactory(factory)


def _mqtt_factory(broker: Broker, settings: Settings, reactor: Any) -> Any:
    """The one MQTT factory (and room of sessions) of a broker, TCP and WebSocket alike."""
    from .gateway.mqtt.connect import ServerLimits
    from .gateway.mqtt.protocol import MqttFactory
    from .gateway.mqtt.room import MqttRoom

    sessions = broker.admin.client_sessions  # the operator's view of them (HTTP API, console)
    room = sessions.get("mqtt")
    if not isinstance(room, MqttRoom):
        limits = ServerLimits(maximum_packet_size=settings.mqtt_max_packet_size, topic_alias_maximum=64,
                              max_session_expiry=settings.mqtt_max_session_expiry,
                              max_inflight=settings.mqtt_max_inflight_messages,
                              receive_maximum=settings.mqtt_receive_maximum)
        factory = MqttFactory(broker.doors, broker.queue_model, broker.sessions, broker.metrics, reactor,
                              properties=broker.forms.properties, max_packet_size=settings.mqtt_max_packet_size,
                              anonymous=settings.mqtt_anonymous, limits=limits,
                              max_queued=settings.mqtt_max_queued_messages,
                              connect_timeout=settings.handshake_timeout_ms / 1000,
                              cert_login=settings.tls_cert_login, anonymous_user=settings.anonymous_user)
        sessions["mqtt"] = room = factory.room
    return room.factory


def _mqtt(broker: Broker, settings: Settings, reactor: Any) -> IProtocolFactory:
    return IProtocolFactory(_mqtt_factory(broker, settings, reactor))


def _mqtt_ws(broker: Broker, settings: Settings, reactor: Any) -> IProtocolFactory:
    from .gateway.websocket import WebSocketFactory

    # a WebSocket message may hold a whole MQTT packet and its framing
    timeouts = broker.metrics.counter(
        "logbus_mqtt_ws_handshake_timeouts",
        "MQTT-over-WebSocket connections closed for no complete upgrade within handshake_timeout_ms")
    return IProtocolFactory(WebSocketFactory(_mqtt_factory(broker, settings, reactor), ("mqtt", "mqttv3.1"),
                                             max_message_size=settings.mqtt_max_packet_size + 16, clock=reactor,
                                             handshake_timeout=settings.handshake_timeout_ms / 1000,
                                             on_handshake_timeout=timeouts.inc))


# THE gateway table: listener name -> builder of the protocol factory that serves it.
# None: the protocol is accepted by the config but not built yet; nothing listens for it.
GATEWAYS: dict[str, GatewayBuilder | None] = {
    "amqp": _amqp,
    "mqtt": _mqtt,
    "kafka": _kafka,
    "http": _http,
    "mqtt_ws": _mqtt_ws,
}
assert set(GATEWAYS) == set(LISTENERS), "every listener in config.LISTENERS needs a GATEWAYS entry"


class BrokerService(Service):
    # twisted declares Service.name = None (IService: a str or None)
    name: str = "broker"  # type: ignore[assignment]

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def startService(self) -> None:
        self.broker.start()  # raises (DataDirLocked, ...) before we count as running
        super().startService()

    def stopService(self) -> defer.Deferred[None]:
        if not self.running:
            return defer.succeed(None)  # never started: the data dir is not ours to touch
        super().stopService()
        return defer.maybeDeferred(self.broker.stop)


class ListeningPort(Protocol):
    """What a listener uses of the IListeningPort its endpoint gives: zope interfaces'
    methods are opaque to mypy without the mypy-zope plugin."""

    def getHost(self) -> IAddress: ...
    def stopListening(self) -> defer.Deferred[None] | None: ...


class ListenerService(Service):
    """Listens on one endpoint with one factory; ``when_listening()`` gives the port."""

    # twisted declares Service.name = None (IService: a str or None)
    name: str  # type: ignore[assignment]

    def __init__(self, name: str, description: str, endpoint: Any, factory: IProtocolFactory,
                 tls: ServerTLS | None = None):
        self.name = name
        self.description = description
        self.tls = tls  # a TLS endpoint's certificate, reloaded on SIGHUP
        self.endpoint = endpoint
        self.factory = factory
        self.port: ListeningPort | None = None
        self._failure: Failure | None = None
        self._waiting: list[defer.Deferred[ListeningPort]] = []

    def startService(self) -> None:
        super().startService()
        self.endpoint.listen(self.factory).addCallbacks(self._listening, self._failed)

    def _listening(self, port: ListeningPort) -> None:
        self.port = port
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            d.callback(port)

    def _failed(self, failure: Failure) -> None:
        self._failure = failure
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            d.errback(failure)

    def when_listening(self) -> defer.Deferred[ListeningPort]:
        if self.port is not None:
            return defer.succeed(self.port)
        if self._failure is not None:
            return defer.fail(self._failure)
        d: defer.Deferred[ListeningPort] = defer.Deferred()
        self._waiting.append(d)
        return d

    def stopService(self) -> defer.Deferred[None]:
        super().stopService()
        port, self.port = self.port, None
        if port is None:
            return defer.succeed(None)
        d = defer.maybeDeferred(_stop_listening, port)
        close = getattr(self.factory, "close_connections", None)  # tell clients why they go
        if close is not None:
            d.addCallback(lambda _: close())
        return d


def _stop_listening(port: ListeningPort) -> defer.Deferred[None]:
    stopped = port.stopListening()
    return stopped if stopped is not None else defer.succeed(None)


class LogbusService(MultiService):
    def __init__(self, broker: Broker) -> None:
        super().__init__()
        self.broker = broker
        self.broker_service = BrokerService(broker)
        self.broker_service.setServiceParent(self)
        self.listeners: list[ListenerService] = []

    def add_listener(self, listener: ListenerService) -> None:
        listener.setServiceParent(self)
        self.listeners.append(listener)
        admin, tls = self.broker.admin, listener.tls is not None  # the node's view of its listeners
        listener.when_listening().addCallbacks(
            lambda port: admin.listener_up(listener.name, format_address(port.getHost()), tls),
            lambda failure: admin.listener_failed(listener.name, listener.description, tls,
                                                  failure.getErrorMessage()))

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        """Stop children one at a time, last started first (MultiService stops them all at once)."""
        Service.stopService(self)
        for child in reversed(list(self)):
            if child.running:
                yield defer.maybeDeferred(child.stopService)

    def when_listening(self) -> defer.Deferred[list[tuple[bool, Any]]]:
        """Fires with DeferredList results (success, port | Failure), one per listener."""
        return defer.DeferredList(
            [listener.when_listening() for listener in self.listeners], consumeErrors=True
        )


def build_service(settings: Settings, reactor: Any) -> LogbusService:
    from .core.broker import Broker
    from .gateway.amqp.model.forms import AMQP_FORMS
    from .gateway.amqp.model.upgrade import AMQP_LEGACY
    from .gateway.mqtt.mapping import EXCHANGE as MQTT_EXCHANGE
    from .core.tick import tick_of
    from .gateway.mqtt.topic_map import key_forms

    tick_of(reactor).pace = settings.turn_pace_ms / 1000
    broker = Broker(
        settings.data_dir,
        reactor=reactor,
        topic_defaults=settings.topic_defaults(),
        max_open_files=settings.max_open_files,
        remote_storage=settings.remote_storage,
        remote_storage_endpoint=settings.remote_storage_endpoint,
        remote_cache_bytes=settings.remote_cache_bytes,
        memory_high_watermark=settings.memory_high_watermark,
        disk_free_limit=settings.disk_free_limit,
        default_user=settings.default_user,
        default_pass=settings.default_pass,
        anonymous_user=settings.anonymous_user,
        loopback_users=settings.loopback_users,
        queue_max_message_bytes=settings.amqp_max_message_size,
        pop_retry=pop_retry_policy(settings.pop_retry_backoff, settings.pop_max_deliveries),
        producer_id_expiration_ms=settings.kafka_producer_id_expiration_ms,
        offsets_retention_ms=settings.kafka_offsets_retention_ms,
        queue_max_pinned_ms=settings.queue_max_pinned_ms,
        queue_max_pinned_bytes=settings.queue_max_pinned_bytes,
        # AMQP's forms of the neutral model's messages: typed headers, x-death (core/forms.py)
        forms=AMQP_FORMS,
        legacy=AMQP_LEGACY,  # definitions stored with AMQP field tables, upgraded at start (decision 0021)
        # a search of amq.topic's records by key takes an MQTT topic or its routing key alike
        key_forms={MQTT_EXCHANGE: key_forms},
    )
    service = LogbusService(broker)
    for name, descriptions in settings.listeners().items():
        builder = GATEWAYS[name]
        if builder is None:
            log.info("%s gateway is not built yet; not listening on %s", name, " ".join(descriptions))
            continue
        factory = builder(broker, settings, reactor)  # one gateway, however many endpoints it listens on
        for i, description in enumerate(descriptions):
            listener_name = name if i == 0 else f"{name}.{i + 1}"
            plain_description, options = split_options(description)  # logbus's, not Twisted's (listener.py)
            endpoint = serverFromString(reactor, plain_description)
            tls = server_tls(listener_name, endpoint, plain_description, options.get("caCertsDir"))  # hardened,
            # reloaded on SIGHUP
            rules = rules_of(options)
            served = factory if rules == DEFAULT_RULES else IProtocolFactory(ListenerFactory(factory, rules))
            service.add_listener(ListenerService(listener_name, description, endpoint, served, tls=tls))
    return service


def format_address(address: IAddress) -> str:
    if isinstance(address, IPv6Address):
        return f"[{address.host}]:{address.port}"
    if isinstance(address, IPv4Address):
        return f"{address.host}:{address.port}"
    if isinstance(address, UNIXAddress):
        name = address.name
        return name.decode() if isinstance(name, bytes) else str(name)
    return str(address)


def write_ready_file(path: Path, addresses: dict[str, str]) -> None:
    """Write ``{"pid": ..., "<listener>": "host:port", ...}`` atomically (temp file + rename)."""
    payload = {"pid": os.getpid(), **addresses}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(payload) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def install_epoll_reactor() -> Any:
    """Install (or confirm) the epoll reactor (``logbus.reactor``, Twisted's own when one
    was installed already); call before anything imports the reactor."""
    if "twisted.internet.reactor" not in sys.modules:
        from . import reactor as logbus_reactor

        logbus_reactor.install()
    from twisted.internet import reactor
    from twisted.internet.epollreactor import EPollReactor

    if not isinstance(reactor, EPollReactor):
        raise RuntimeError(f"logbus serve needs the epoll reactor, got {type(reactor).__name__}")
    return reactor


# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def tune_malloc() -> bool:
    """Keep freed memory in the process instead of giving it back to the kernel at once.

    Every produce request and Fetch answer allocates buffers of ~1 MiB. By default glibc
    serves those with mmap and unmaps them when freed, so the next request faults in
    fresh, zeroed pages: measured here at twice the broker's kernel CPU per produced
    record (docs/decisions/0005). Returns False where this is not glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = mallopt(_M_MMAP_THRESHOLD, 64 << 20) and mallopt(_M_TRIM_THRESHOLD, 512 << 20)
    return bool(ok and mallopt(_M_TOP_PAD, 64 << 20))


GC_YOUNG_THRESHOLD = 10_000


def tune_gc() -> None:
    """Once started: move everything alive now out of the cyclic collector's sight
    (``gc.freeze``) and collect the young generation every 10,000 allocations instead
    of 700. The broker holds one object per queued message (entries, cached messages),
    and the collector kept walking them: 7% of the reactor thread's samples in a
    confirmed publish (docs/decisions/0007). Reference counting still frees everything
    acyclic at once; cycles are found later, not never."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


MEMORY_RETURN_SECONDS = 1.0


def start_memory_return(broker: Broker, reactor: Any) -> Any:
    """Once a second: freed heap given back to the system (memory.py, decision 0024).
    Returns the LoopingCall (None where the C library is not glibc)."""
    from twisted.internet.task import LoopingCall

    from .core.pressure import MEMORY, resident_memory
    from .memory import Allocator, MemoryReturn

    allocator = Allocator.load()
    if allocator is None:
        log.info("memory: not glibc, freed memory is returned as the C library decides")
        return None
    counters = {
        "trims": broker.metrics.counter("logbus_malloc_trims", "Times freed heap was returned to the system"),
        "returned_bytes": broker.metrics.counter(
            "logbus_malloc_returned_bytes", "Bytes of resident memory returned to the system by those trims"),
        "collections": broker.metrics.counter(
            "logbus_gc_alarm_collections", "Full garbage collections run while the memory alarm was set"),
    }
    pressure = broker.pressure

    def resident() -> int:
        try:
            return resident_memory()
        except OSError:  # out of file descriptors: the last check's figure
            return pressure.memory_used

    memory = MemoryReturn(allocator, resident, lambda: MEMORY in pressure.alarms,
                          count=lambda what, amount: counters[what].inc(amount))

    def tick() -> None:
        try:
            memory.tick()
        except Exception:  # never let the LoopingCall die: it would not run again
            log.exception("memory: returning freed memory failed")

    call = LoopingCall(tick)
    call.clock = reactor
    call.start(MEMORY_RETURN_SECONDS, now=False)
    return call


def setup_logging(level: str, form: str = "text") -> None:
    """Everything to stderr, one line per record (``form`` "json": one JSON object per
    line, logformat.py); Twisted's own log is bridged into it."""
    from twisted.logger import ILogObserver, STDLibLogObserver, globalLogBeginner

    from .logformat import JsonFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if form == "json"
                         else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    # Twisted's info lines ("Site starting on ...") repeat ours; keep its warnings and errors.
    set_log_level(level)
    globalLogBeginner.beginLoggingTo([ILogObserver(STDLibLogObserver())], redirectStandardIO=False)


def run(settings: Settings, reactor: Any, ready_file: Path | None = None,
        load: Callable[[], Settings] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; return the process exit code (0: clean stop). SIGHUP
    loads the settings again with ``load`` and applies what can change (reload.py)."""
    exit_code = 0
    started = wrote_ready = stopping = False

    def stop_reactor() -> None:
        """Stop once: a second SIGTERM (or a failure) during shutdown changes nothing."""
        nonlocal stopping
        if reactor.running and not stopping:
            stopping = True
            reactor.stop()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        reactor.callFromThread(stop_reactor)

    def on_hangup(signum: int, _frame: Any) -> None:
        reactor.callFromThread(hangup)

    def hangup() -> None:
        if stopping or reloader is None:
            log.info("received SIGHUP: nothing to reload%s", " while stopping" if stopping else "")
            return
        log.info("received SIGHUP: reloading settings")
        try:
            reloader.reload()
        except Exception:
            log.exception("SIGHUP: reload failed; the broker goes on with the settings it had")

    def fail(message: str, *args: Any) -> None:
        nonlocal exit_code
        log.error(message, *args)
        exit_code = 1
        stop_reactor()

    log.info(
        "logbus starting: data dir %s%s",
        settings.data_dir.resolve(),
        f", config {settings.config_file}" if settings.config_file else "",
    )
    try:
        service = build_service(settings, reactor)
    except LogbusError as exc:
        log.error("cannot start: %s [%s]", exc, exc.code)
        return 1
    reloader = Reloader(service, settings, load) if load is not None else None

    def stop() -> defer.Deferred[None]:
        def stopped(result: Any) -> None:
            if started:
                log.info("logbus stopped")

        def failed(failure: Failure) -> None:
            nonlocal exit_code
            exit_code = 1
            log.error("shutdown failed: %s", failure.getErrorMessage(), exc_info=_exc_info(failure))

        return defer.maybeDeferred(service.stopService).addCallbacks(stopped, failed)

    def ready(results: list[tuple[bool, Any]]) -> None:
        nonlocal wrote_ready
        addresses: dict[str, str] = {}
        for listener, (ok, value) in zip(service.listeners, results):
            if not ok:
                fail("cannot listen for %s on %s: %s", listener.name, listener.description,
                     value.getErrorMessage())
                return
            addresses[listener.name] = format_address(value.getHost())
        for listener in service.listeners:
            log.info("%s listening on %s (%s)", listener.name, addresses[listener.name],
                     "TLS 1.2+" if listener.tls else "plain, no TLS")
        for listener, (_, port) in zip(service.listeners, results):
            if listener.name == "http":  # where a new user goes next
                log.info("%s", console_line(port.getHost(), listener.tls is not None, settings))
        tune_gc()
        start_memory_return(service.broker, reactor)
        if ready_file is not None:  # last: a client that waits for it finds the broker whole
            try:
                write_ready_file(ready_file, addresses)
            except OSError as exc:
                fail("cannot write ready file %s: %s", ready_file, exc)
                return
            wrote_ready = True
        log.info("logbus ready (pid %d)", os.getpid())

    def start() -> None:
        nonlocal started
        try:
            service.startService()
        except LogbusError as exc:
            fail("cannot start: %s [%s]", exc, exc.code)
            return
        except OSError as exc:
            fail("cannot start: %s", exc)
            return
        except Exception:
            log.exception("cannot start")
            fail("cannot start: unexpected error (traceback above)")
            return
        started = True
        service.when_listening().addCallback(ready).addErrback(
            lambda failure: fail("cannot start: %s", failure.getErrorMessage())
        )

    reactor.addSystemEventTrigger("before", "shutdown", stop)
    reactor.callWhenRunning(start)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_hangup)  # its default action kills the process
    reactor.run(installSignalHandlers=False)
    # stopped and flushed: a late signal must not turn a clean exit into "killed"
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if wrote_ready and ready_file is not None:
        ready_file.unlink(missing_ok=True)
    return exit_code


def _exc_info(failure: Failure) -> tuple[Any, Any, Any]:
    return (failure.type, failure.value, failure.getTracebackObject())

