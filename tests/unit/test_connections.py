"""The connection registry (core/connections.py): ids never reused, records listed by
protocol, closed through the callable their gateway gave, gone once closed."""

from __future__ import annotations

import pytest

from logbus.core.connections import Connections


def test_register_list_close_forget() -> None:
    now = [1000]
    reg = Connections(lambda: now[0])
    closed: list[str] = []
    a = reg.open("amqp", "127.0.0.1:1", tls=False, close=closed.append)
    now[0] = 2000
    m = reg.open("mqtt", "127.0.0.1:2", tls=True, close=closed.append)
    assert (a.id, m.id, a.opened_ms, m.opened_ms) == (1, 2, 1000, 2000)
    m.user, m.vhost, m.client_id = "guest", "/", "dev-1"
    m.received += 3
    m.bytes_out += 7
    assert [c.id for c in reg.list()] == [1, 2] and reg.list("mqtt") == [m] and len(reg) == 2
    assert m.to_json() == {"id": 2, "protocol": "mqtt", "peer": "127.0.0.1:2", "tls": True, "opened_ms": 2000,
                           "connected_at": "1970-01-01T00:00:02.000Z", "user": "guest", "vhost": "/",
                           "client_id": "dev-1", "client_product": "", "client_version": "", "received": 3,
                           "sent": 0, "bytes_in": 0, "bytes_out": 7}
    a.client_said(name="n" * 300, product="pika", version="1.4.4")
    assert (len(a.client_id), a.client_product, a.client_version) == (255, "pika", "1.4.4")
    a.client_said(product="kafka-python", version="3")  # no name: the one given stays
    assert (len(a.client_id), a.client_product) == (255, "kafka-python")
    assert reg.close(2, "bye") and closed == ["bye"]
    assert reg.get(2) is m  # closing asks the gateway; the record goes when the connection ends
    reg.closed(m)
    assert reg.get(2) is None and not reg.close(2) and closed == ["bye"]
    assert reg.open("kafka", "h:3", tls=False, close=closed.append).id == 3  # never reused
    reg.closed(m)  # twice: no error


def test_unknown_protocol_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown protocol"):
        Connections(lambda: 0).open("smtp", "h:1", tls=False, close=print)


def test_connected_at_is_utc_to_the_millisecond() -> None:
    from logbus.core.connections import utc_iso

    assert utc_iso(0) == "1970-01-01T00:00:00.000Z"
    assert utc_iso(1_796_572_509_576) == "2026-12-06T15:55:09.576Z"
    assert utc_iso(999) == "1970-01-01T00:00:00.999Z"
