"""Resource alarms on MQTT against a real `logbus serve` (docs/operations.md, "Resource
alarms"): the disk alarm is set for real by raising the disk free limit over HTTP (as
test_amqp_alarms.py does). A paho publisher is not read while it is set, so its QoS 1
PUBLISH is not acknowledged until the alarm clears; a subscriber on another connection
goes on being read and receives (past the in-flight limit, so its PUBACKs are read)."""

from __future__ import annotations

from typing import Any

from tests.integration.alarms import ABOVE_ANY_DISK, metric, set_limits, wait_for
from tests.integration.mqtt_clients import Paho, unique

QUEUED = 50  # more than the in-flight limit (20): the subscriber's PUBACKs must be read
BLOCKED_WAIT = 1.0  # how long an unacknowledged publish is shown to wait


def test_a_publisher_is_not_read_while_a_subscriber_drains(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "amqp": "off"}, args=["--disk-free-limit", "1"])
    base = unique("alarm")
    sub_id = unique("sub")
    sub = Paho(server, sub_id, clean=False)
    sub.subscribe(f"{base}/#", 1)
    sub.close()  # its session keeps what comes meanwhile
    pub = Paho(server, unique("pub"))
    try:
        for i in range(QUEUED):
            pub.publish(f"{base}/t", b"%d" % i, 1)  # PUBACKed: a publisher now

        assert set_limits(server, disk_free_limit=ABOVE_ANY_DISK)["alarms"] == ["disk"]
        wait_for(lambda: metric(server, "logbus_mqtt_blocked_publishers") >= 1)
        during = pub.client.publish(f"{base}/t", b"during", 1)
        during.wait_for_publish(BLOCKED_WAIT)
        assert not during.is_published()  # not read: no PUBACK

        sub = Paho(server, sub_id, clean=False)  # a new connection, read under the alarm
        got = sub.take(QUEUED)
        assert [m.payload for m in got] == [b"%d" % i for i in range(QUEUED)]
        sub.assert_quiet(0.2)
        assert not during.is_published()

        set_limits(server, disk_free_limit=1)
        during.wait_for_publish(10)
        assert during.is_published()
        assert sub.next_message().payload == b"during"
        pub.publish(f"{base}/t", b"after", 1)  # read as before
        assert sub.next_message().payload == b"after"
    finally:
        set_limits(server, disk_free_limit=1)
        pub.close()
        sub.close()


def test_a_subscriber_that_never_published_is_read_under_the_alarm(logbus_server: Any) -> None:
    server = logbus_server(listeners={"kafka": "off", "amqp": "off"}, args=["--disk-free-limit", "1"])
    set_limits(server, disk_free_limit=ABOVE_ANY_DISK)
    client = Paho(server, unique("c"), version=5)
    try:
        client.subscribe(unique("a") + "/#", 1)  # SUBACK under the alarm
        client.unsubscribe("x/#")
        assert metric(server, "logbus_mqtt_blocked_publishers") == 0
    finally:
        set_limits(server, disk_free_limit=1)
        client.close()
