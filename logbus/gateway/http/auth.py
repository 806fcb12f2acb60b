"""The management resources' base: ``AdminResource``, an ApiResource that only an
administrator may use (RabbitMQ's ``administrator`` tag), and ``path_name``.

Authentication itself and the checks of the other endpoints are in credentials.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .responses import HttpError
from .resource import ApiResource

from ...core.types import Action

if TYPE_CHECKING:
    from .services import Services


class AdminResource(ApiResource):
    """A management resource: only an administrator may use it (a subclass may ask for
    less with ``needs``)."""

    needs: Action | None = "administer"
    audited = True

    def __init__(self, services: Services) -> None:
        super().__init__()
        self.services = services
        self.doors = services.doors
        self.admin = services.admin


def path_name(raw: bytes, what: str) -> str:
    """One URL path segment (already percent-decoded by twisted.web) as text, or 400."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise HttpError(400, "bad_request", f"{what} name {raw!r} is not UTF-8") from None
