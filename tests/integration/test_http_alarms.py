"""Resource alarms on the HTTP API against a real `logbus serve` (docs/operations.md,
"Resource alarms"): while the disk alarm is set (raised over PUT /api/limits), a publish
answers 503 with Retry-After and a JSON error, reads go on, and the same publish is 200
once the alarm clears."""

from __future__ import annotations

from typing import Any

from tests.integration.alarms import ABOVE_ANY_DISK, metric, set_limits
from tests.integration.mgmt import Mgmt


def test_publish_is_503_with_retry_after_while_the_alarm_is_set(logbus_server: Any) -> None:
    server = logbus_server(listeners={"amqp": "off", "mqtt": "off", "kafka": "off"}, args=["--disk-free-limit", "1"])
    api = Mgmt(server)
    assert api.call("POST", "/api/topics", {"name": "alarm-http", "partitions": 1}).status == 201
    publish = {"messages": [{"key": "k", "value": "v"}]}
    assert api.call("POST", "/api/topics/alarm-http/messages", publish).status == 200
    set_limits(server, disk_free_limit=ABOVE_ANY_DISK)
    try:
        refused = api.call("POST", "/api/topics/alarm-http/messages", publish)
        assert refused.status == 503 and refused.headers["Retry-After"] == "5"
        assert refused.json()["error"] == "resource_alarm" and "disk" in refused.json()["message"]
        replay = api.call("POST", "/api/pop/g/dlq/replay", {})
        assert replay.status == 503 and replay.json()["error"] == "resource_alarm"
        assert metric(server, "logbus_http_alarm_refusals") == 2
        described = api.call("GET", "/api/topics/alarm-http")  # reads go on
        assert described.status == 200
        assert api.call("GET", "/healthz").status == 503  # says why (the alarm)
    finally:
        set_limits(server, disk_free_limit=1)
    done = api.call("POST", "/api/topics/alarm-http/messages", publish)
    assert done.status == 200 and done.json() == {"partition": 0, "offsets": [1]}
