"""The resource tree of the HTTP gateway and the Site (protocol factory) serving it.

    /healthz                 health.Health                          open
    /metrics                 metrics.Metrics                        open, or monitoring (http_metrics_auth)
    /api/whoami              whoami.WhoAmI                          any user
    /api/topics[/<name>]     topics.Topics, topics.Topic            management + permissions
    /api/topics/<name>/messages  topics.TopicMessages               write permission
    /api/pop[/...]           pop.Pop, pop.PopAction, pop.DlqReplay  read (write) permissions
    /api/connections[/<id>]  connections.*                          management: its own; monitoring
    /api/limits              limits.Limits (alarm limits)           monitoring; PUT: administrator
    /api/vhosts[/<name>]     vhosts.VHosts, vhosts.VHostResource    management; PUT, DELETE: administrator
    /api/users[/<name>]      users.Users, users.UserResource        administrator
    /api/permissions[/<vhost>/<user>]  permissions.*                administrator
    /api/topic-permissions[/<vhost>/<user>]  topic_permissions.*    administrator
    /api/mqtt/clients[/<id>]   mqtt.MqttClients, mqtt.MqttOne       monitoring; DELETE: administrator
    /api/mqtt/sessions[/<id>]  mqtt.MqttSessions, mqtt.MqttOne      monitoring; DELETE: administrator
    /api/mqtt/retained[/<topic>]  mqtt.MqttRetained, mqtt.MqttRetainedOne  monitoring; DELETE: administrator
    /api/overview            overview.Overview                      management
    /api/nodes[/<name>]      nodes.Nodes, nodes.OneNode             monitoring
    /api/queues[/<vhost>[/<name>[/contents|/get]]]  queues.*        management (+ read permission)
    /api/consumers[/<vhost>]  queues.Consumers                      management
    /api/channels            channels.Channels (AMQP)               management: its own; monitoring: all
    /api/exchanges[/...], /api/bindings[/...]  exchanges.*          management (+ permissions)
    /api/consumer-groups[/<group>[/reset-offsets]]  groups.*        monitoring; POST: administrator
    /metrics/per-object      metrics.Metrics (one series per queue)  as /metrics
    / and every other path   console.app.Console (the web console)  management (a session or Basic)

Every endpoint but /healthz (and /metrics unless ``http_metrics_auth``) asks for HTTP
Basic credentials of a broker user (credentials.py): 401 without them, 403 without the
tag (RabbitMQ's management, policymaker, monitoring, administrator) or permission the
operation needs. docs/security.md has the table.
"""

from __future__ import annotations

import email.policy  # noqa: F401 - twisted.web parses a Content-Type with email.message, which imports
# email.policy on first use: imported now, a first request made while out of file descriptors is answered
import logging
from functools import partial
from typing import TYPE_CHECKING, Any

from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure
from twisted.web import http, resource, server

from ...core.types import ConnectionRecord
from ..peers import is_tls, lost_reason, peer_of
from .connections import Connections
from .exchanges import Listing
from .groups import ConsumerGroups
from .console import build_console
from .halves import HalfGroups, Halves
from .health import Health
from .limits import Limits
from .metrics import Metrics
from .mqtt import MqttClients, MqttRetained, MqttSessions
from .nodes import Nodes
from .overview import Overview, RateSampler
from .permissions import Permissions
from .pop import Pop
from .channels import Channels
from .queues import Consumers, Queues
from .request import LimitedRequest, abort_transport, discard
from .resource import Directory, Refusal
from .responses import HttpError, Response
from .services import Services
from .timeouts import Phase, RequestClock, Timeouts
from .topic_permissions import TopicPermissions
from .topics import Topics
from .users import Users
from .vhosts import VHosts
from .whoami import WhoAmI

if TYPE_CHECKING:
    from ...core.ports import Admin, Doors
    from ...core.ports import Halves as HalvesPort
    from ...core.ports import Pop as PopPort
    from ...core.ports import Topics as TopicsPort
    from ...core.ports import Topology as TopologyPort
    from ...core.types import Metrics as MetricsRegistry

log = logging.getLogger(__name__)
access_log = logging.getLogger("logbus.http.access")
ABORT_AFTER = 5.0  # seconds a timed-out connection has to take our answer before it is reset

_SETTING = {Phase.HEAD: "handshake_timeout_ms", Phase.BODY: "http_body_timeout_ms",
            Phase.IDLE: "http_idle_timeout_ms"}


class RegisteredChannel(http.HTTPChannel):
    """An HTTP connection, in the broker's connection registry while it is open, held
    to the timeouts of its site (timeouts.py): a request head or body that takes too
    long is answered 408 and the connection closed; a silent new connection or an idle
    kept-alive one is closed."""

    record: ConnectionRecord | None = None
    clock: RequestClock | None = None
    _deadline_call: Any = None

    def connectionMade(self) -> None:
        super().connectionMade()
        site: ApiSite = self.site  # type: ignore[attr-defined]
        t: Any = self.transport
        host, port = peer_of(t)
        self.record = site.doors.connection_opened("http", f"{host}:{port}", tls=is_tls(t),
                                               close=lambda reason: t.loseConnection())
        self.clock = RequestClock(site.timeouts, self._reactor().seconds())
        self._arm()

    def dataReceived(self, data: bytes) -> None:
        if self.record is not None:
            self.record.bytes_in += len(data)
        clock = self.clock
        if clock is not None and not clock.started and clock.phase in (Phase.HEAD, Phase.IDLE):
            idle = clock.phase is Phase.IDLE
            clock.data(self._reactor().seconds())
            if idle:
                self._arm()
        super().dataReceived(data)

    def write(self, data: bytes) -> None:
        if self.record is not None:
            self.record.bytes_out += len(data)
        super().write(data)

    def writeSequence(self, iovec: list[bytes]) -> None:
        if self.record is not None:
            self.record.bytes_out += sum(len(d) for d in iovec)
        super().writeSequence(iovec)

    def allHeadersReceived(self) -> None:
        if self.clock is not None:
            self.clock.head_done(self._reactor().seconds())
            self._arm()
        super().allHeadersReceived()

    def allContentReceived(self) -> None:
        if self.clock is not None:
            self.clock.body_done()
        super().allContentReceived()

    def requestDone(self, request: http.Request) -> None:
        clock = self.clock
        if clock is not None:
            if self.persistent:
                clock.answered(self._reactor().seconds())
                self._arm()
            else:
                clock.stop()
        super().requestDone(request)

    def _reactor(self) -> Any:
        return self.site.reactor  # type: ignore[attr-defined]

    def stop_deadlines(self) -> None:
        """The connection is being closed another way (a 413's lingering close)."""
        if self.clock is not None:
            self.clock.stop()

    def _arm(self) -> None:
        """One reactor call, at or before the current deadline."""
        assert self.clock is not None
        deadline = self.clock.deadline
        if deadline is None:
            return  # the call, if any, finds nothing due and goes
        reactor = self._reactor()
        call = self._deadline_call
        delay = max(0.0, deadline - reactor.seconds())
        if call is None or not call.active():
            self._deadline_call = reactor.callLater(delay, self._deadline_passed)
        elif call.getTime() > deadline:
            call.reset(delay)

    def _deadline_passed(self) -> None:
        self._deadline_call = None
        clock = self.clock
        if clock is None:
            return
        now = self._reactor().seconds()
        phase = clock.expired(now)
        if phase is None:
            self._arm()
            return
        site: ApiSite = self.site  # type: ignore[attr-defined]
        site.timed_out(phase)
        seconds = {Phase.HEAD: clock.timeouts.head, Phase.BODY: clock.timeouts.body,
                   Phase.IDLE: clock.timeouts.idle}[phase]
        answer = phase is Phase.BODY or (phase is Phase.HEAD and clock.started)
        what = {Phase.HEAD: "request head" if clock.started else "request",
                Phase.BODY: "request body", Phase.IDLE: "new request on a kept-alive connection"}[phase]
        log.info("HTTP %s: no complete %s within %.1f s (%s): %s", self.record.peer if self.record else "?",
                 what, seconds, _SETTING[phase], "answered 408, closed" if answer else "closed")
        clock.stop()
        t: Any = self.transport
        self.dataReceived = discard  # type: ignore[method-assign]
        if answer:
            response = Response.error(408, "request_timeout",
                                      f"the {what} was not complete within {seconds:g} s")
            t.write(b"HTTP/1.1 408 Request Timeout\r\n"
                    + f"Content-Type: {response.content_type}\r\nContent-Length: {len(response.body)}\r\n"
                      "Connection: close\r\n\r\n".encode() + response.body)
        t.loseConnection()
        self._reactor().callLater(ABORT_AFTER, partial(abort_transport, t))

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._deadline_call is not None and self._deadline_call.active():
            self._deadline_call.cancel()
        self._deadline_call = None
        if self.record is not None:
            self.site.doors.connection_closed(self.record, lost_reason(reason))  # type: ignore[attr-defined]
            self.record = None
        super().connectionLost(reason)


class ApiSite(server.Site):
    requestFactory = LimitedRequest
    protocol = RegisteredChannel  # type: ignore[assignment]  # twisted types it as a generic factory
    noisy = False  # no "Starting factory" lines; server.py logs the bound address

    def __init__(self, root: Any, services: Services, reactor: Any = None, timeouts: Timeouts | None = None) -> None:
        # timeout=None: twisted's own idle timer (reset by every byte) gives way to ours
        super().__init__(root, reactor=reactor, timeout=None)
        self.doors = services.doors  # each connection's registration and each request's login
        self.sampler: RateSampler | None = None  # the overview's message rates (build_site)
        self.timeouts = timeouts or Timeouts()
        self._timeout_counters = {
            phase: services.metrics.counter(f"logbus_http_{phase.value}_timeouts", doc) for phase, doc in (
                (Phase.HEAD, "HTTP connections closed for no complete request head within handshake_timeout_ms"),
                (Phase.BODY, "HTTP requests answered 408 for no complete body within http_body_timeout_ms"),
                (Phase.IDLE, "Kept-alive HTTP connections closed idle after http_idle_timeout_ms"))}

    def startFactory(self) -> None:
        super().startFactory()
        if self.sampler is not None:
            self.sampler.start()

    def stopFactory(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        super().stopFactory()

    def timed_out(self, phase: Phase) -> None:
        self._timeout_counters[phase].inc()

    def getResourceFor(self, request: http.Request) -> resource.IResource:
        """The resource of the request's path; a ``getChild`` that refuses a name with
        HttpError answers with that error (not twisted.web's 500)."""
        try:
            return super().getResourceFor(request)  # type: ignore[no-any-return]
        except HttpError as exc:
            return resource.IResource(Refusal(exc))

    def log(self, request: http.Request) -> None:
        if access_log.isEnabledFor(logging.DEBUG):
            access_log.debug("%s", http.combinedLogFormatter(self._logDateTime, request))


def build_resource(services: Services, sampler: RateSampler, metrics_auth: bool = False) -> resource.Resource:
    api = _directory({
        b"overview": Overview(services, sampler),
        b"nodes": Nodes(services),
        b"queues": Queues(services, sampler.reads),
        b"consumers": Consumers(services),
        b"channels": Channels(services, sampler.reads),
        b"exchanges": Listing(services, "exchanges", reads=sampler.reads),
        b"bindings": Listing(services, "bindings"),
        b"consumer-groups": ConsumerGroups(services),
        b"whoami": WhoAmI(services.admin),
        b"topics": Topics(services, sampler),
        b"connections": Connections(services, sampler.reads),
        b"limits": Limits(services),
        b"users": Users(services),
        b"vhosts": VHosts(services),
        b"permissions": Permissions(services),
        b"topic-permissions": TopicPermissions(services),
        b"pop": Pop(services),
        b"halves": Halves(services),
        b"half-groups": HalfGroups(services),
        b"mqtt": _directory({b"clients": MqttClients(services), b"sessions": MqttSessions(services),
                             b"retained": MqttRetained(services)}),
    })
    root = build_console(services)  # the web console at / (console/app.py), the API beside it
    for name, child in {
        b"healthz": Health(services.admin),
        b"metrics": Metrics(services.metrics.registry, authenticated=metrics_auth,
                            per_object=services.metrics.per_object),
        b"api": api,
    }.items():
        root.putChild(name, resource.IResource(child))
    return root


def _directory(children: dict[bytes, resource.Resource]) -> Directory:
    directory = Directory()
    for name, child in children.items():
        # IResource(child) is child itself (it provides IResource), typed as putChild wants it.
        directory.putChild(name, resource.IResource(child))
    return directory


def build_site(*, doors: Doors, admin: Admin, topics: TopicsPort, pop: PopPort, metrics: MetricsRegistry,
               halves: HalvesPort, topology: TopologyPort, reactor: Any, timeouts: Timeouts | None = None,
               metrics_auth: bool = False) -> ApiSite:
    """The HTTP gateway, built from the ports it calls (services.py)."""
    services = Services(doors=doors, admin=admin, topics=topics, pop=pop, metrics=metrics, halves=halves,
                        topology=topology)
    sampler = RateSampler(admin, reactor)
    site = ApiSite(build_resource(services, sampler, metrics_auth), services, reactor=reactor, timeouts=timeouts)
    site.sampler = sampler
    return site
