"""The resource tree of the HTTP gateway and the Site (protocol factory) serving it.

    /healthz                 health.Health
    /metrics                 metrics.Metrics
    /api/topics[/<name>]     topics.Topics, topics.Topic
    /api/limits              limits.Limits (resource alarm limits, at run time)
    /api/users[/<name>]      users.Users, users.UserResource        } administrators only
    /api/vhosts[/<name>]     vhosts.VHosts, vhosts.VHostResource    } (HTTP Basic,
    /api/permissions[/<vhost>/<user>]  permissions.*                } auth.py)
    /api/topic-permissions[/<vhost>/<user>]  topic_permissions.*    }
    /api/mqtt/clients[/<id>]   mqtt.MqttClients, mqtt.MqttOne       }
    /api/mqtt/sessions[/<id>]  mqtt.MqttSessions, mqtt.MqttOne      }
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure
from twisted.web import http, resource, server

from ...core.types import ConnectionRecord
from ..output import is_tls, peer_of
from .connections import Connections
from .health import Health
from .limits import Limits
from .metrics import Metrics
from .mqtt import MqttClients, MqttSessions
from .permissions import Permissions
from .pop import Pop
from .request import LimitedRequest
from .resource import Directory, Refusal
from .responses import HttpError
from .topic_permissions import TopicPermissions
from .topics import Topics
from .users import Users
from .vhosts import VHosts

if TYPE_CHECKING:
    from ...core.broker import Broker

access_log = logging.getLogger("logbus.http.access")


class RegisteredChannel(http.HTTPChannel):
    """An HTTP connection, in the broker's connection registry while it is open."""

    record: ConnectionRecord | None = None

    def connectionMade(self) -> None:
        super().connectionMade()
        broker = self.site.broker  # type: ignore[attr-defined]
        t: Any = self.transport
        host, port = peer_of(t)
        self.record = broker.connection_opened("http", f"{host}:{port}", tls=is_tls(t),
                                               close=lambda reason: t.loseConnection())

    def dataReceived(self, data: bytes) -> None:
        if self.record is not None:
            self.record.bytes_in += len(data)
        super().dataReceived(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.record is not None:
            self.site.broker.connection_closed(self.record)  # type: ignore[attr-defined]
            self.record = None
        super().connectionLost(reason)


class ApiSite(server.Site):
    requestFactory = LimitedRequest
    protocol = RegisteredChannel  # type: ignore[assignment]  # twisted types it as a generic factory
    noisy = False  # no "Starting factory" lines; server.py logs the bound address

    def __init__(self, root: Any, broker: Broker, reactor: Any = None) -> None:
        super().__init__(root, reactor=reactor)
        self.broker = broker

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


def build_resource(broker: Broker) -> Directory:
    api = _directory({
        b"topics": Topics(broker),
        b"connections": Connections(broker),
        b"limits": Limits(broker),
        b"users": Users(broker),
        b"vhosts": VHosts(broker),
        b"permissions": Permissions(broker),
        b"topic-permissions": TopicPermissions(broker),
        b"pop": Pop(broker),
        b"mqtt": _directory({b"clients": MqttClients(broker), b"sessions": MqttSessions(broker)}),
    })
    return _directory({
        b"healthz": Health(),
        b"metrics": Metrics(broker.metrics.registry),
        b"api": api,
    })


def _directory(children: dict[bytes, resource.Resource]) -> Directory:
    directory = Directory()
    for name, child in children.items():
        # IResource(child) is child itself (it provides IResource), typed as putChild wants it.
        directory.putChild(name, resource.IResource(child))
    return directory


def build_site(broker: Broker, reactor: Any = None) -> ApiSite:
    return ApiSite(build_resource(broker), broker, reactor=reactor)
