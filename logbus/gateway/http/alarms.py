"""Resource alarms on the HTTP API: the endpoints that append to the log answer
``503 Service Unavailable`` with ``Retry-After`` and ``{"error": "resource_alarm", ...}``
while an alarm (core/pressure.py) is set; every read goes on.

HTTP has no way to slow a client but to refuse it, and 503 with Retry-After is the
status for "overloaded, come back later" (RFC 9110 section 15.6.4): clients and proxies
that retry do so after the delay. The body has been read by then (twisted.web reads it
before the handler, bounded by the API's body size limit)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .responses import HttpError

if TYPE_CHECKING:
    from ...core.ports import Doors
    from ...core.types import Metrics

log = logging.getLogger(__name__)

RETRY_AFTER = 5  # seconds: the alarms are checked once a second; a client should not spin


class AlarmGate:
    """Follows the broker's alarms; ``check()`` raises the 503 while any is set."""

    def __init__(self, doors: Doors, metrics: Metrics) -> None:
        self.refused = metrics.counter(
            "logbus_http_alarm_refusals", "HTTP publishes refused (503) while a resource alarm was set")
        self._logged = False
        self.alarms: frozenset[str] = doors.on_alarms(self._changed)

    def _changed(self, alarms: frozenset[str]) -> None:
        if alarms - self.alarms:
            self._logged = False
        self.alarms = alarms

    def check(self) -> None:
        alarms = self.alarms
        if not alarms:
            return
        self.refused.inc()
        names = " & ".join(sorted(alarms))
        if not self._logged:
            self._logged = True
            log.warning("%s alarm: HTTP publishes are refused (503) until it clears", names)
        raise HttpError(503, "resource_alarm", f"{names} alarm: the broker takes no writes now; retry later",
                        (("Retry-After", str(RETRY_AFTER)),))
