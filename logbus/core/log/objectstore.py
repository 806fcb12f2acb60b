"""An S3-compatible bucket, as tiered storage uses it (boto3; blocking: worker threads only).

Every call either does what it says or raises ``StoreError`` with a message naming the
location and what the store answered; a conditional write that lost raises ``Conflict``.
Credentials and the region come from boto3's standard chain (the ``AWS_*`` environment
variables, ``~/.aws/credentials`` and ``~/.aws/config``, an instance role); ``endpoint``
points it at any S3-compatible store (MinIO, Ceph, SeaweedFS), addressed path-style.

    store = ObjectStore("s3://bucket/prefix", endpoint="http://127.0.0.1:8333")
    etag = store.put("t/0/manifest.json", data, if_none_match=True)
    data, etag = store.get("t/0/manifest.json") or (None, None)
"""

from __future__ import annotations

import threading
from typing import Any, BinaryIO, NamedTuple

from .manifest import parse_remote

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
ATTEMPTS = 3  # botocore's own retries of one call (the caller retries the work later)
_CONFLICTS = ("PreconditionFailed", "ConditionalRequestConflict")


class StoreError(Exception):
    """The store could not be reached, or refused the call."""


class Conflict(StoreError):
    """A conditional write found the object changed (or there, or gone)."""


class Listed(NamedTuple):
    key: str  # under the prefix, without it
    size: int


class ObjectStore:
    def __init__(self, url: str, endpoint: str = "") -> None:
        self.url = url
        self.bucket, self.prefix = parse_remote(url)
        self.endpoint = endpoint
        self._local = threading.local()  # a client per thread (sessions are not thread-safe)

    def __repr__(self) -> str:
        return f"<ObjectStore {self.url}{' at ' + self.endpoint if self.endpoint else ''}>"

    @property
    def client(self) -> Any:
        c = getattr(self._local, "client", None)
        if c is None:
            import boto3
            from botocore.config import Config

            config = Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                            retries={"max_attempts": ATTEMPTS, "mode": "standard"},
                            s3={"addressing_style": "path"} if self.endpoint else None,
                            request_checksum_calculation="when_required",
                            response_checksum_validation="when_required")
            session = boto3.session.Session()
            c = session.client("s3", endpoint_url=self.endpoint or None, config=config,
                                region_name=session.region_name or "us-east-1")
            self._local.client = c
        return c

    def _call(self, what: str, key: str, fn: Any, **kw: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(Bucket=self.bucket, **kw)
        except ClientError as e:
            err = e.response.get("Error", {})
            code = str(err.get("Code", "?"))
            message = f"{what} s3://{self.bucket}/{self.prefix}{key}: {code}: {err.get('Message', e)}"
            if code in _CONFLICTS:
                raise Conflict(message) from None
            if code in ("NoSuchKey", "404", "NotFound"):
                raise KeyError(key) from None
            raise StoreError(message) from None
        except BotoCoreError as e:  # no connection, a timeout, no credentials
            raise StoreError(f"{what} s3://{self.bucket}/{self.prefix}{key}: {e}") from None

    def put(self, key: str, data: bytes | BinaryIO, *, if_match: str | None = None,
            if_none_match: bool = False) -> str:
        """Write the object ``key`` (under the prefix); returns its ETag. ``if_match``:
        only over the version with that ETag; ``if_none_match``: only where there is none."""
        kw: dict[str, Any] = {"Key": self.prefix + key, "Body": data}
        if if_match is not None:
            kw["IfMatch"] = if_match
        if if_none_match:
            kw["IfNoneMatch"] = "*"
        return str(self._call("writing", key, self.client.put_object, **kw)["ETag"])

    def put_file(self, key: str, path: str) -> str:
        with open(path, "rb") as f:
            return self.put(key, f)

    def get(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and ETag, None when there is no such object."""
        try:
            r = self._call("reading", key, self.client.get_object, Key=self.prefix + key)
        except KeyError:
            return None
        return r["Body"].read(), str(r["ETag"])

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object (fewer at its end); KeyError when gone."""
        r = self._call("reading", key, self.client.get_object, Key=self.prefix + key,
                       Range=f"bytes={start}-{end - 1}")
        return bytes(r["Body"].read())

    def delete(self, keys: list[str]) -> None:
        """Delete the objects (those already gone too)."""
        for i in range(0, len(keys), 1000):
            part = keys[i : i + 1000]
            r = self._call("deleting", part[0], self.client.delete_objects,
                           Delete={"Objects": [{"Key": self.prefix + k} for k in part], "Quiet": True})
            errors = r.get("Errors") or []
            if errors:
                e = errors[0]
                raise StoreError(f"deleting s3://{self.bucket}/{e.get('Key')}: {e.get('Code')}: {e.get('Message')}")

    def list(self, under: str) -> list[Listed]:
        """Every object whose key starts with ``under`` (under the prefix)."""
        out: list[Listed] = []
        token: str | None = None
        n = len(self.prefix)
        while True:
            kw: dict[str, Any] = {"Prefix": self.prefix + under}
            if token:
                kw["ContinuationToken"] = token
            r = self._call("listing", under, self.client.list_objects_v2, **kw)
            out.extend(Listed(o["Key"][n:], int(o["Size"])) for o in r.get("Contents", ()))
            token = r.get("NextContinuationToken")
            if not r.get("IsTruncated") or not token:
                return out
