"""``log_format = "json"``: one JSON object per log record, for a log shipper.

    {"time": "2026-11-27T22:21:59.425Z", "level": "info", "logger": "logbus.connections",
     "message": "amqp connection 17 from 127.0.0.1:41776 closed: ...",
     "connection": {"event": "closed", "id": 17, "protocol": "amqp", "peer": "127.0.0.1:41776",
                    "user": "guest", "duration_ms": 5, "reason": "closed cleanly", ...}}

A record logged with ``extra={"fields": {...}}`` (the connection registry's open, login and
close lines) carries those fields under their own key; an exception, its traceback as
``"exception"``.
"""

from __future__ import annotations

import json
import logging
import time


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        out: dict[str, object] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)
