"""AdminClient: the HTTP admin API from the outside, with urllib (no Twisted), for the CLI.

    client = AdminClient("http://127.0.0.1:8080", auth=("guest", "guest"))   # HTTP Basic
    client.create_topic("orders", partitions=3, config={"flush": "none"})   # -> TopicInfo JSON
    client.list_topics(); client.describe_topic("orders"); client.delete_topic("orders")
    client.pop_receive("billing", "orders", max=10, invisible_ms=30000)   # -> [message JSON]
    client.pop_ack("billing", "orders", [handle]); client.pop_nack(...); client.pop_invisible(...)
    client.pop_groups(); client.dlq_replay("billing", topic="orders")   # -> counts

    client.mqtt_clients(); client.mqtt_sessions()        # -> [session JSON]
    client.mqtt_kick("sensor-1"); client.mqtt_delete_session("sensor-1")

    client.overview(); client.list_queues("/"); client.purge_queue("/", "jobs")
    client.get_messages("/", "jobs", count=5)            # a browse: nothing is taken
    client.list_connections("mqtt"); client.close_connection(7)
    client.list_groups(); client.describe_group("g"); client.reset_offsets("g", "earliest")
    client.list_users(); client.put_user(...); client.list_vhosts(); client.set_permissions(...)

A server given as ``host:port`` means ``http://host:port``.

Every call but /healthz needs a user (docs/security.md has which tag or permission).

Failures raise AdminError: ``Unreachable`` when no logbus answers at the URL, otherwise
the server's ``{"error": code, "message": text}`` with the HTTP status.
"""

from __future__ import annotations

import base64
import http.client
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlencode

DEFAULT_SERVER = "http://127.0.0.1:8080"


class AdminError(Exception):
    def __init__(self, message: str, status: int = 0, code: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


class Unreachable(AdminError):
    pass


class AdminClient:
    def __init__(self, server: str = DEFAULT_SERVER, timeout: float = 30.0,
                 auth: tuple[str, str] | None = None) -> None:
        if "://" not in server:  # host:port, as rabbitmqadmin and kafka-consumer-groups take it
            server = "http://" + server
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.authorization = None if auth is None else "Basic " + base64.b64encode(
            f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
        # Talk to the broker directly, whatever http_proxy says.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def create_topic(
        self, name: str, partitions: int | None = None, config: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"name": name}
        if partitions is not None:
            body["partitions"] = partitions
        if config:
            body["config"] = config
        return self._call("POST", "/api/topics", body)

    def list_topics(self) -> list[dict[str, Any]]:
        return self._call("GET", "/api/topics")

    def describe_topic(self, name: str) -> dict[str, Any]:
        return self._call("GET", "/api/topics/" + quote(name, safe=""))

    def alter_topic(self, name: str, config: dict[str, Any]) -> dict[str, Any]:
        return self._call("PUT", "/api/topics/" + quote(name, safe=""), {"config": config})

    def delete_topic(self, name: str, force: bool = False) -> None:
        self._call("DELETE", "/api/topics/" + quote(name, safe="") + ("?force=true" if force else ""))

    def pop_receive(self, group: str, topic: str, max: int = 1, invisible_ms: int | None = None,
                    member: str | None = None, filter_tag: str | None = None,
                    filter_sql: str | None = None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"max": max}
        if invisible_ms is not None:
            body["invisible_ms"] = invisible_ms
        if member is not None:
            body["member"] = member
        if filter_tag is not None:
            body["filter_tag"] = filter_tag
        if filter_sql is not None:
            body["filter_sql"] = filter_sql
        messages: list[dict[str, Any]] = self._call("POST", _pop_path(group, topic, "receive"), body)["messages"]
        return messages

    def pop_ack(self, group: str, topic: str, handles: list[str]) -> dict[str, Any]:
        """``{"acked": n, "failed": [{"handle", "error", "message"}, ...]}``."""
        return self._call("POST", _pop_path(group, topic, "ack"), {"handles": handles})

    def pop_nack(self, group: str, topic: str, handles: list[str]) -> dict[str, Any]:
        return self._call("POST", _pop_path(group, topic, "nack"), {"handles": handles})

    def pop_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> None:
        self._call("POST", _pop_path(group, topic, "invisible"), {"handle": handle, "invisible_ms": invisible_ms})

    def pop_groups(self) -> list[dict[str, Any]]:
        return self._call("GET", "/api/pop")

    def dlq_replay(self, group: str, topic: str | None = None, max: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if topic is not None:
            body["topic"] = topic
        if max is not None:
            body["max"] = max
        return self._call("POST", "/api/pop/" + quote(group, safe="") + "/dlq/replay", body)

    def mqtt_clients(self) -> list[dict[str, Any]]:
        return self._call("GET", "/api/mqtt/clients")

    def mqtt_sessions(self) -> list[dict[str, Any]]:
        return self._call("GET", "/api/mqtt/sessions")

    def mqtt_kick(self, client_id: str) -> None:
        self._call("DELETE", "/api/mqtt/clients/" + quote(client_id, safe=""))

    def mqtt_delete_session(self, client_id: str) -> None:
        self._call("DELETE", "/api/mqtt/sessions/" + quote(client_id, safe=""))

    # -- the operator's view (docs/operations.md) --------------------------------------------

    def search(self, topic: str, *, key: bytes | None = None, message_id: str | None = None,
               start_ms: int | None = None, end_ms: int | None = None, partition: int | None = None,
               limit: int | None = None) -> dict[str, Any]:
        """{"messages": [...], "truncated": bool}: truncated when more matched than limit."""
        query: dict[str, Any] = {}
        if key is not None:
            query["key_base64"] = base64.b64encode(key).decode("ascii")
        for name, value in (("message_id", message_id), ("from", start_ms), ("to", end_ms),
                            ("partition", partition), ("limit", limit)):
            if value is not None:
                query[name] = value
        return self._call("GET", "/api/topics/" + quote(topic, safe="") + "/search?" + urlencode(query))

    def overview(self) -> dict[str, Any]:
        return self._call("GET", "/api/overview")

    def list_queues(self, vhost: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", "/api/queues" + ("" if vhost is None else "/" + _segment(vhost)))

    def queue(self, vhost: str, name: str) -> dict[str, Any]:
        return self._call("GET", f"/api/queues/{_segment(vhost)}/{quote(name, safe='')}")

    def purge_queue(self, vhost: str, name: str) -> None:
        self._call("DELETE", f"/api/queues/{_segment(vhost)}/{quote(name, safe='')}/contents")

    def get_messages(self, vhost: str, name: str, count: int = 10) -> list[dict[str, Any]]:
        return self._call("POST", f"/api/queues/{_segment(vhost)}/{quote(name, safe='')}/get", {"count": count})

    def list_exchanges(self, vhost: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", "/api/exchanges" + ("" if vhost is None else "/" + _segment(vhost)))

    def list_bindings(self, vhost: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", "/api/bindings" + ("" if vhost is None else "/" + _segment(vhost)))

    def list_connections(self, protocol: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", "/api/connections" + ("" if protocol is None else "?protocol=" + quote(protocol)))

    def close_connection(self, id: int) -> None:
        self._call("DELETE", f"/api/connections/{int(id)}")

    def list_groups(self) -> list[dict[str, Any]]:
        return self._call("GET", "/api/consumer-groups")

    def describe_group(self, group: str) -> dict[str, Any]:
        return self._call("GET", "/api/consumer-groups/" + quote(group, safe=""))

    def reset_offsets(self, group: str, to: str, value: int | None = None, topics: list[str] | None = None,
                      execute: bool = False) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"to": to, "execute": execute}
        if value is not None:
            body["value"] = value
        if topics:
            body["topics"] = topics
        return self._call("POST", "/api/consumer-groups/" + quote(group, safe="") + "/reset-offsets", body)

    def list_users(self) -> list[dict[str, Any]]:
        return self._call("GET", "/api/users")

    def put_user(self, name: str, password: str | None, tags: str) -> None:
        body: dict[str, Any] = {"tags": tags}
        if password is not None:
            body["password"] = password
        self._call("PUT", "/api/users/" + quote(name, safe=""), body)

    def delete_user(self, name: str) -> None:
        self._call("DELETE", "/api/users/" + quote(name, safe=""))

    def list_vhosts(self) -> list[dict[str, Any]]:
        return self._call("GET", "/api/vhosts")

    def put_vhost(self, name: str, description: str = "") -> None:
        self._call("PUT", "/api/vhosts/" + quote(name, safe=""), {"description": description})

    def delete_vhost(self, name: str) -> None:
        self._call("DELETE", "/api/vhosts/" + quote(name, safe=""))

    def list_permissions(self) -> list[dict[str, Any]]:
        return self._call("GET", "/api/permissions")

    def set_permissions(self, vhost: str, user: str, configure: str, write: str, read: str) -> None:
        self._call("PUT", f"/api/permissions/{quote(vhost, safe='')}/{quote(user, safe='')}",
                   {"configure": configure, "write": write, "read": read})

    def clear_permissions(self, vhost: str, user: str) -> None:
        self._call("DELETE", f"/api/permissions/{quote(vhost, safe='')}/{quote(user, safe='')}")

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        url = self.server + path
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        if self.authorization is not None:
            request.add_header("Authorization", self.authorization)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                raise _error_from(exc.code, exc.read(), url) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, OSError) and reason.strerror:
                reason = reason.strerror
            raise Unreachable(f"cannot reach logbus at {self.server}: {reason}") from None
        except http.client.HTTPException as exc:
            raise Unreachable(f"cannot reach logbus at {self.server}: bad HTTP ({exc!r})") from None
        except ValueError as exc:  # malformed URL
            raise AdminError(f"bad server URL {self.server!r}: {exc}") from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise AdminError(f"{url} did not answer JSON; is it a logbus server?") from None


def _segment(vhost: str) -> str:
    """A vhost as one path segment; "" (pop groups' namespace) is "~"."""
    return quote(vhost, safe="") if vhost else "~"


def _pop_path(group: str, topic: str, action: str) -> str:
    return f"/api/pop/{quote(group, safe='')}/{quote(topic, safe='')}/{action}"


def _error_from(status: int, raw: bytes, url: str) -> AdminError:
    try:
        payload = json.loads(raw)
        return AdminError(str(payload["message"]), status, str(payload["error"]))
    except (ValueError, KeyError, TypeError):
        return AdminError(f"HTTP {status} from {url}", status)
