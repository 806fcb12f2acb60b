"""Exchanges, queues and bindings declared and deleted, and a message published to an
exchange, as RabbitMQ's management API does them: the checks and calls that the JSON API
(exchanges.py, queues.py) and the web console (console/pages/exchanges.py, queues.py)
share, so both ask the same permissions (those of the AMQP method it stands for) and
answer the same errors. The changes themselves are the AMQP gateway's (``Topology``).

    declare_exchange(request, services, "/", "orders", {"type": "topic", "durable": True})
    bind(request, services, "/", "orders", "queue", "billing", {"routing_key": "order.*"})
    d = publish(request, services, "/", "orders", {"routing_key": "order.1", "payload": "hi",
                                                   "payload_encoding": "string", "properties": {}})

Binding keys: a binding is named in a path by its ``properties_key`` (RabbitMQ's): its
routing key, or ``~`` for an empty one, and ``~`` with a digest of its arguments when it has
any.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from twisted.internet.defer import Deferred
from twisted.web import server

from ...core.errors import NotFound
from ...core.types import Resource
from .credentials import require, user_of
from .request import json_object
from .responses import HttpError

if TYPE_CHECKING:
    from .services import Services

EXCHANGE_FIELDS = ("type", "durable", "auto_delete", "internal", "arguments")
QUEUE_FIELDS = ("durable", "auto_delete", "arguments", "node")
BINDING_FIELDS = ("routing_key", "arguments")
PUBLISH_FIELDS = ("routing_key", "payload", "payload_encoding", "properties", "props")
MAX_PAYLOAD = 16 * 1024 * 1024  # an HTTP publish's payload, decoded


def _known_vhost(services: Services, vhost: str) -> None:
    if not services.admin.has_vhost(vhost):
        raise HttpError(404, "not_found", f"no vhost '{vhost}'")


def _flag(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise HttpError(400, "bad_request", f"\"{name}\" must be true or false")
    return value


def _arguments(body: Mapping[str, Any]) -> dict[str, Any]:
    value = body.get("arguments") or {}
    if not isinstance(value, dict):
        raise HttpError(400, "bad_request", "\"arguments\" must be an object")
    return value


def _text(body: Mapping[str, Any], name: str, default: str = "") -> str:
    value = body.get(name, default)
    if not isinstance(value, str):
        raise HttpError(400, "bad_request", f"\"{name}\" must be a string")
    return value


def _require_declare(request: server.Request, services: Services, what: Resource, target: Any,
                     exists: bool) -> None:
    """A declare's checks, as RabbitMQ orders them: configure on ``what``; when it is new and
    names an exchange it sends to (an alternate exchange, a dead-letter exchange), read on
    it and write on that exchange."""
    require(request, services.doors, "configure", what)
    if isinstance(target, str) and not exists:
        require(request, services.doors, "read", what)
        require(request, services.doors, "write", Resource(what.vhost, "exchange", target))


# -- exchanges ------------------------------------------------------------------------------


def declare_exchange(request: server.Request, services: Services, vhost: str, name: str,
                     body: Mapping[str, Any]) -> bool:
    """exchange.declare's checks (configure on it; new with an alternate exchange, also read
    on it and write on the alternate), then the declare; True when it is new."""
    body = json_object(dict(body), EXCHANGE_FIELDS)
    _known_vhost(services, vhost)
    kind = _text(body, "type", "direct")
    arguments = _arguments(body)
    exists = any(e["name"] == name for e in services.admin.list_exchanges(vhost))
    _require_declare(request, services, Resource(vhost, "exchange", name), arguments.get("alternate-exchange"),
                     exists)
    return services.topology.declare_exchange(vhost, name, kind, durable=_flag(body, "durable", True),
                                              auto_delete=_flag(body, "auto_delete", False),
                                              internal=_flag(body, "internal", False), arguments=arguments)


def delete_exchange(request: server.Request, services: Services, vhost: str, name: str, *,
                    if_unused: bool = False) -> None:
    _known_vhost(services, vhost)
    require(request, services.doors, "configure", Resource(vhost, "exchange", name))
    services.topology.delete_exchange(vhost, name, if_unused=if_unused)


def publish(request: server.Request, services: Services, vhost: str, exchange: str,
            body: Mapping[str, Any]) -> Deferred[bool]:
    """basic.publish's check (write on the exchange; a topic permission's write expression
    against the routing key), then the publish: fires with whether it reached a queue, once
    durable."""
    body = json_object(dict(body), PUBLISH_FIELDS)
    _known_vhost(services, vhost)
    routing_key = _text(body, "routing_key")
    payload = _payload(body)
    properties = body.get("properties", body.get("props")) or {}
    if not isinstance(properties, dict):
        raise HttpError(400, "bad_request", "\"properties\" must be an object")
    user = user_of(request)
    said = properties.get("user_id")
    if said is not None and said != user:  # RabbitMQ's validated user id
        raise HttpError(400, "bad_request", f"user_id property set to '{said}' but authenticated user was '{user}'")
    doors = services.doors
    if doors.topic_restricted(user, vhost, exchange):
        require(request, doors, "write", Resource(vhost, "exchange", exchange, routing_key))
    else:
        require(request, doors, "write", Resource(vhost, "exchange", exchange))
    return services.topology.publish(vhost, exchange, routing_key, payload, properties)


def _payload(body: Mapping[str, Any]) -> bytes:
    payload = _text(body, "payload")
    encoding = _text(body, "payload_encoding", "string")
    if encoding == "string":
        data = payload.encode("utf-8")
    elif encoding == "base64":
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise HttpError(400, "bad_request", "\"payload\" is not base64") from None
    else:
        raise HttpError(400, "bad_request", "\"payload_encoding\" must be \"string\" or \"base64\"")
    if len(data) > MAX_PAYLOAD:
        raise HttpError(413, "payload_too_large", f"a payload of at most {MAX_PAYLOAD} bytes")
    return data


# -- queues ---------------------------------------------------------------------------------


def declare_queue(request: server.Request, services: Services, vhost: str, name: str,
                  body: Mapping[str, Any]) -> bool:
    """queue.declare's checks (configure on it; new with a dead-letter exchange, also read
    on it and write on that exchange), then the declare; True when it is new."""
    body = json_object(dict(body), QUEUE_FIELDS)
    _known_vhost(services, vhost)
    arguments = _arguments(body)
    _require_declare(request, services, Resource(vhost, "queue", name), arguments.get("x-dead-letter-exchange"),
                     _queue_exists(services, vhost, name))
    return services.topology.declare_queue(vhost, name, durable=_flag(body, "durable", True),
                                           auto_delete=_flag(body, "auto_delete", False), arguments=arguments)


def _queue_exists(services: Services, vhost: str, name: str) -> bool:
    try:
        services.admin.queue_info(vhost, name)
    except NotFound:
        return False
    return True


def delete_queue(request: server.Request, services: Services, vhost: str, name: str, *, if_unused: bool = False,
                 if_empty: bool = False) -> int:
    _known_vhost(services, vhost)
    require(request, services.doors, "configure", Resource(vhost, "queue", name))
    return services.topology.delete_queue(vhost, name, if_unused=if_unused, if_empty=if_empty)


# -- bindings -------------------------------------------------------------------------------


def _check_binding(request: server.Request, services: Services, vhost: str, source: str, kind: str,
                   destination: str) -> None:
    """queue.bind / exchange.bind's checks: write on the destination, read on the source."""
    _known_vhost(services, vhost)
    doors = services.doors
    require(request, doors, "write", Resource(vhost, "queue" if kind == "queue" else "exchange", destination))
    if source != "":
        require(request, doors, "read", Resource(vhost, "exchange", source))


def bind(request: server.Request, services: Services, vhost: str, source: str, kind: str, destination: str,
         body: Mapping[str, Any]) -> str:
    """Add a binding; returns its properties key."""
    body = json_object(dict(body), BINDING_FIELDS)
    routing_key, arguments = _text(body, "routing_key"), _arguments(body)
    _check_binding(request, services, vhost, source, kind, destination)
    services.topology.bind(vhost, source, kind, destination, routing_key, arguments)
    return properties_key(routing_key, arguments)


def bindings_between(services: Services, vhost: str, source: str, kind: str, destination: str) -> list[dict[str, Any]]:
    """The bindings from ``source`` to ``destination``, each with its ``properties_key``."""
    return [with_key(b) for b in services.admin.list_bindings(vhost)
            if b["source"] == source and b["destination"] == destination and b["destination_type"] == kind]


def unbind(request: server.Request, services: Services, vhost: str, source: str, kind: str, destination: str,
           key: str) -> None:
    """Remove the binding named by its properties key (404 when there is none)."""
    _check_binding(request, services, vhost, source, kind, destination)
    for b in bindings_between(services, vhost, source, kind, destination):
        if b["properties_key"] == key:
            services.topology.unbind(vhost, source, kind, destination, b["routing_key"], all_arguments(b))
            return
    raise HttpError(404, "not_found", f"no binding {key!r} from '{source}' to {kind} '{destination}'")


def all_arguments(binding: Mapping[str, Any]) -> dict[str, Any]:
    """A binding's arguments as it was declared with them: its filter's too."""
    return {**binding["arguments"], **binding.get("filter_arguments", {})}


def properties_key(routing_key: str, arguments: Mapping[str, Any]) -> str:
    """RabbitMQ's name of a binding between two ends: the routing key (``~`` when empty),
    with ``~`` and a digest of the arguments when there are any."""
    if not arguments:
        return routing_key or "~"
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"{routing_key}~{digest}"


def with_key(binding: dict[str, Any]) -> dict[str, Any]:
    return {**binding, "properties_key": properties_key(binding["routing_key"], all_arguments(binding))}


def binding_path(vhost: str, source: str, kind: str, destination: str, key: str) -> str:
    """The API path of one binding."""
    parts = [vhost, "e", source, "q" if kind == "queue" else "e", destination, key]
    return "/api/bindings/" + "/".join(quote(p, safe="") for p in parts)
