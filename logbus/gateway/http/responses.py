"""What an API handler returns (Response) or raises (HttpError), and how core errors map
to HTTP statuses. Every error body is ``{"error": code, "message": text}``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

JSON_TYPE = "application/json"

# LogbusError.code -> HTTP status; codes not listed are 500.
STATUS_BY_CODE: dict[str, int] = {
    "invalid_topic_name": 400,
    "invalid_config": 400,
    "corrupt_batch": 400,
    "unknown_topic": 404,
    "unknown_partition": 404,
    "topic_exists": 409,
    "record_too_large": 413,
    "offset_out_of_range": 416,
    "storage_error": 503,
    "unknown_user": 404,
    "unknown_vhost": 404,
    "unknown_permission": 404,
    "bad_request": 400,
    "invalid_request": 400,
    "unknown_group": 404,
    "stale_receipt": 409,
    "not_found": 404,
    "access_refused": 403,
    "precondition_failed": 400,
    "resource_locked": 409,
    "topic_in_use": 409,
    "unsupported": 400,
    "replay_in_progress": 409,
    "group_active": 409,
}


def status_for(code: str) -> int:
    return STATUS_BY_CODE.get(code, 500)


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str | None = None
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, status: int, payload: Any, headers: tuple[tuple[str, str], ...] = ()) -> Response:
        return cls(status, json.dumps(payload).encode() + b"\n", JSON_TYPE, headers)

    @classmethod
    def empty(cls, status: int = 204) -> Response:
        return cls(status)

    @classmethod
    def error(
        cls, status: int, code: str, message: str, headers: tuple[tuple[str, str], ...] = ()
    ) -> Response:
        return cls.json(status, {"error": code, "message": message}, headers)


class HttpError(Exception):
    """Raised by a handler for a request-level problem (bad JSON, wrong method, ...)."""

    def __init__(
        self, status: int, code: str, message: str, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        self.delay = 0.0  # seconds to wait before answering (a login refused once too often)

    def response(self) -> Response:
        return Response.error(self.status, self.code, self.message, self.headers)
