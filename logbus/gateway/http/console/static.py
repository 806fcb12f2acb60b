"""The console's static files (static/: its CSS and JavaScript, and the vendored htmx and
uPlot with their licences), read once at start and served at
``/static/<hash>/<path>``, where ``<hash>`` is the first 12 hex digits of the file's
SHA-256: a changed file gets a new URL, so every answer may be cached for a year
(``immutable``). A path with a hash that is not the file's current one is 404: a page
of an older version asks again after it reloads.
"""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from pathlib import Path

from twisted.web import resource, server

ROOT = Path(__file__).resolve().parent / "static"
CACHE = "public, max-age=31536000, immutable"
TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
         ".txt": "text/plain; charset=utf-8", "": "text/plain; charset=utf-8"}


@dataclass(frozen=True, slots=True)
class StaticFile:
    body: bytes
    content_type: str
    digest: str  # 12 hex digits of its SHA-256


def load(root: Path = ROOT) -> dict[str, StaticFile]:
    """Every file under ``root`` by its path relative to it ("vendor/htmx/htmx.min.js")."""
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        body = path.read_bytes()
        kind = TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        files[path.relative_to(root).as_posix()] = StaticFile(body, kind, hashlib.sha256(body).hexdigest()[:12])
    return files


class Static(resource.Resource):
    isLeaf = True

    def __init__(self, files: dict[str, StaticFile]) -> None:
        super().__init__()
        self.files = files

    def url(self, name: str) -> str:
        """The URL of static file ``name``, with its content hash."""
        return f"/static/{self.files[name].digest}/{name}"

    def render_GET(self, request: server.Request) -> bytes:
        parts = [p.decode("utf-8", "replace") for p in request.postpath or []]
        found = self.files.get("/".join(parts[1:])) if len(parts) > 1 else None
        if found is None or found.digest != parts[0]:
            request.setResponseCode(404)
            request.setHeader(b"Content-Type", b"text/plain; charset=utf-8")
            request.setHeader(b"Cache-Control", b"no-store")
            return b"no such file\n"
        request.setHeader(b"Content-Type", found.content_type.encode())
        request.setHeader(b"Cache-Control", CACHE.encode())
        request.setHeader(b"X-Content-Type-Options", b"nosniff")
        request.setHeader(b"Content-Length", str(len(found.body)).encode())
        return found.body

    def render_HEAD(self, request: server.Request) -> bytes:
        self.render_GET(request)
        return b""
