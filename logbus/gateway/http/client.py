"""AdminClient: the HTTP admin API from the outside, with urllib (no Twisted), for the CLI.

    client = AdminClient("http://127.0.0.1:8080")
    client.create_topic("orders", partitions=3, config={"flush": "none"})   # -> TopicInfo JSON
    client.list_topics(); client.describe_topic("orders"); client.delete_topic("orders")

Failures raise AdminError: ``Unreachable`` when no logbus answers at the URL, otherwise
the server's ``{"error": code, "message": text}`` with the HTTP status.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

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
    def __init__(self, server: str = DEFAULT_SERVER, timeout: float = 30.0) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
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

    def delete_topic(self, name: str) -> None:
        self._call("DELETE", "/api/topics/" + quote(name, safe=""))

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        url = self.server + path
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
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


def _error_from(status: int, raw: bytes, url: str) -> AdminError:
    try:
        payload = json.loads(raw)
        return AdminError(str(payload["message"]), status, str(payload["error"]))
    except (ValueError, KeyError, TypeError):
        return AdminError(f"HTTP {status} from {url}", status)
