"""Queues of every kind, as RabbitMQ's management API has them: AMQP's declared queues
(``kind`` "classic"), MQTT sessions ("session") and shared subscriptions ("shared"), pop
groups ("pop"). A user with the ``management`` tag sees the queues of the vhosts it has a
permission in (``monitoring``: all).

    GET    /api/queues                          200 [queue, ...]
    GET    /api/queues/<vhost>                  200 [queue, ...] of one vhost
    GET    /api/queues/<vhost>/<name>           200 queue | 404
    PUT    /api/queues/<vhost>/<name>           201 declared, 204 it was there (AMQP
                                                queue.declare: configure on it); body
                                                {"durable", "auto_delete", "arguments"}
    DELETE /api/queues/<vhost>/<name>[?if-empty=true&if-unused=true]  204 (queue.delete:
                                                configure on it; an AMQP queue only)
    DELETE /api/queues/<vhost>/<name>/contents  204: its ready messages dropped (AMQP
                                                queue.purge; read permission on it)
    POST   /api/queues/<vhost>/<name>/get       200 [message, ...]: the first ``count``
                                                ready messages, without taking them
                                                (read permission); body {"count": 10}
    GET    /api/consumers[/<vhost>]             200 [consumer, ...]: RabbitMQ's fields
                                                (``queue``, ``consumer_tag``, ``prefetch_count``,
                                                ``ack_required``, ``channel_details``...)

A queue is RabbitMQ's fields (``name``, ``vhost``, ``durable``, ``auto_delete``,
``exclusive``, ``arguments``, ``consumers``, ``messages``, ``messages_ready``,
``messages_unacknowledged``, ``message_bytes_ready``, ``message_stats`` with ``publish``,
``deliver_get``, ``redeliver``, ``ack``) and logbus's: ``kind``, ``protocol``,
``messages_scheduled`` (delayed or waiting for a retry backoff), ``message_stats.dead_lettered``.
Pop groups are in no vhost: their ``vhost`` is "" and a path names it ``~``, their name
is ``<group>/<topic>`` (``/api/queues/~/billing%2Forders``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.web import resource, server

from ...core.types import Action, QueueInfo, Resource, topic_exchange
from . import topology
from .auth import AdminResource, path_name
from .credentials import require, require_topic, user_of
from .rates import ReadRates, with_details
from .request import json_object, query_flag, read_json, request_body
from .responses import HttpError, Response

if TYPE_CHECKING:
    from ...core.ports import Doors
    from .services import Services

POP_PATH = "~"


def queue_json(q: QueueInfo, reads: ReadRates | None) -> dict[str, object]:
    """A queue as the API answers it: with its counters' rates (``*_details``) when ``reads``."""
    j = q.to_json()
    if reads is not None:
        stats = j["message_stats"]
        assert isinstance(stats, dict)
        j["message_stats"] = with_details(stats, reads.rates(("queue", q.vhost, q.name), stats))
    return j


class Queues(AdminResource):
    needs: Action | None = "manage"

    def __init__(self, services: Services, reads: ReadRates | None = None, vhost: str | None = None) -> None:
        super().__init__(services)
        self.vhost = vhost
        self.reads = reads  # rates differenced between reads (rates.py)

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self
        if self.vhost is None:
            return Queues(self.services, self.reads, path_name(path, "vhost"))
        return OneQueue(self.services, self.vhost, path_name(path, "queue"), reads=self.reads)

    def handle_GET(self, request: server.Request) -> Response:
        user = user_of(request)
        vhost = None if self.vhost is None else ("" if self.vhost == POP_PATH else self.vhost)
        if vhost is not None and vhost != "" and not self.admin.has_vhost(vhost):
            raise HttpError(404, "not_found", f"no vhost '{vhost}'")
        queues = self.admin.list_queues(self.vhost)
        return Response.json(200, [queue_json(q, self.reads) for q in queues
                                   if sees_queue(self.doors, user, q.vhost, q.name)])


def sees_queue(doors: Doors, user: str, vhost: str, name: str) -> bool:
    """Whether ``user`` sees the queue (the console asks this too)."""
    if vhost == "":  # a pop group: shown as /api/pop shows it, by its topic's vhost
        return doors.sees_vhost(user, topic_exchange(name.split("/", 1)[1])[0])
    return doors.sees_vhost(user, vhost)


class OneQueue(AdminResource):
    needs: Action | None = "manage"

    def __init__(self, services: Services, vhost: str, name: str, action: str = "",
                 reads: ReadRates | None = None) -> None:
        super().__init__(services)
        self.vhost, self.name, self.action = vhost, name, action
        self.reads = reads

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if self.action or path not in (b"contents", b"get"):
            raise HttpError(404, "not_found", f"no such resource: {request.uri.decode('latin-1', 'replace')}")
        return OneQueue(self.services, self.vhost, self.name, path.decode())

    def _visible(self, request: server.Request) -> QueueInfo:
        info = self.admin.queue_info(self.vhost, self.name)
        if not sees_queue(self.doors, user_of(request), info.vhost, info.name):
            raise HttpError(404, "not_found", f"no queue '{self.name}' in vhost '{self.vhost}'")
        return info

    def _may_read(self, request: server.Request, info: QueueInfo) -> None:
        if info.vhost == "":
            require_topic(request, self.doors, "read", info.name.split("/", 1)[1])
        else:
            require(request, self.doors, "read", Resource(info.vhost, "queue", info.name))

    def handle_GET(self, request: server.Request) -> Response:
        if self.action:
            raise HttpError(405, "method_not_allowed", f"GET is not allowed on .../{self.action}")
        return Response.json(200, queue_json(self._visible(request), self.reads))

    def handle_PUT(self, request: server.Request) -> Response:
        if self.action:
            raise HttpError(405, "method_not_allowed", f"PUT is not allowed on .../{self.action}")
        body = read_json(request) if request_body(request).strip() else {}
        if not isinstance(body, dict):
            raise HttpError(400, "bad_request", "request body must be a JSON object")
        new = topology.declare_queue(request, self.services, self.vhost, self.name, body)
        return Response.empty(201 if new else 204)

    def handle_DELETE(self, request: server.Request) -> Response:
        if not self.action:
            info = self._visible(request)
            if info.kind != "classic":
                raise HttpError(405, "method_not_allowed", f"a {info.kind} queue is deleted by its protocol"
                                " (an MQTT session, a pop group); DELETE .../contents purges it")
            topology.delete_queue(request, self.services, self.vhost, self.name,
                                  if_unused=query_flag(request, "if-unused"), if_empty=query_flag(request, "if-empty"))
            return Response.empty(204)
        if self.action != "contents":
            raise HttpError(405, "method_not_allowed", f"DELETE is not allowed on .../{self.action}")
        info = self._visible(request)
        self._may_read(request, info)
        self.admin.purge_queue_contents(self.vhost, self.name)
        return Response.empty(204)

    def handle_POST(self, request: server.Request) -> Response:
        if self.action != "get":
            raise HttpError(405, "method_not_allowed", "POST is allowed on .../get only")
        info = self._visible(request)
        self._may_read(request, info)
        count = 10
        if request_body(request).strip():
            # RabbitMQ's body also names ackmode, encoding, truncate: a browse takes nothing
            body = json_object(read_json(request), ("count", "ackmode", "encoding", "truncate"))
            count = body.get("count", 10)
            if isinstance(count, bool) or not isinstance(count, int):
                raise HttpError(400, "bad_request", "count must be a whole number")
        return Response.json(200, [m.to_json() for m in self.admin.peek_queue(self.vhost, self.name, count)])


class Consumers(AdminResource):
    """``/api/consumers[/<vhost>]``: the consumers of the vhosts the user sees."""

    needs: Action | None = "manage"

    def __init__(self, services: Services, vhost: str | None = None) -> None:
        super().__init__(services)
        self.vhost = vhost

    def getChild(self, path: bytes, request: server.Request) -> resource.Resource:
        if path == b"":
            return self
        if self.vhost is not None:
            raise HttpError(404, "not_found", f"no such resource: {request.uri.decode('latin-1', 'replace')}")
        return Consumers(self.services, path_name(path, "vhost"))

    def handle_GET(self, request: server.Request) -> Response:
        if self.vhost is not None and not self.admin.has_vhost(self.vhost):
            raise HttpError(404, "not_found", f"no vhost '{self.vhost}'")
        user = user_of(request)
        names = [self.vhost] if self.vhost is not None else [v.name for v in self.admin.list_vhosts()]
        return Response.json(200, [c for name in names if self.doors.sees_vhost(user, name)
                                   for c in self.services.topology.consumers(name)])
