"""MQTT publishes read by Spark (docs/interop.md): paho publishes to a real ``logbus serve``,
which is then stopped, and ``spark.read.format("logbus")`` reads its data directory. An
MQTT publish is a record of the topic ``amq.topic`` keyed by the MQTT topic name itself
(not the AMQP routing key), its MQTT 5 user properties the record headers and, by name, in
``properties`` beside the rest of what it carried (routing key, MQTT topic, QoS, client,
content type)."""

from __future__ import annotations

from typing import Any

from paho.mqtt.packettypes import PacketTypes

from tests.integration.mqtt_clients import Paho, props, unique


def test_mqtt_publishes_as_spark_rows(spark: Any, logbus_server: Any) -> None:
    server = logbus_server(listeners={"amqp": "off", "kafka": "off", "http": "off"})
    base = unique("sensors")
    topic5, topic4 = f"{base}/v1.2/temp", f"{base}/with space/température"
    cid5, cid4 = unique("pub5"), unique("pub4")
    pub5 = Paho(server, cid5, version=5)
    pub4 = Paho(server, cid4, version=4)
    try:
        p = props(PacketTypes.PUBLISH, ContentType="text/plain", UserProperty=[("unit", "°C"), ("k", "v")])
        pub5.publish(topic5, b"21.5", 1, properties=p)
        pub4.publish(topic4, b"40", 0)
    finally:
        for c in (pub5, pub4):
            c.close()
    assert server.stop() == 0

    df = (spark.read.format("logbus").option("path", str(server.data_dir))
          .option("subscribe", "amq.topic").option("includeHeaders", "true").load())
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    assert [(r.topic, r.key, r.value, r.protocol) for r in rows] == [
        ("amq.topic", topic5.encode(), b"21.5", "MQTT"),
        ("amq.topic", topic4.encode(), b"40", "MQTT"),
    ]
    five, four = rows
    assert [(h.key, h.value) for h in five.headers] == [("unit", "°C".encode()), ("k", b"v")]
    assert list(four.headers) == []
    assert five.properties == {
        "exchange": "amq.topic", "routing_key": f"{base}.v1/2.temp", "mqtt_topic": topic5,
        "content_type": "text/plain", "mqtt_qos": "1", "mqtt_client_id": cid5, "unit": "°C", "k": "v",
    }
    assert four.properties == {
        "exchange": "amq.topic", "routing_key": f"{base}.with space.température", "mqtt_topic": topic4,
        "mqtt_qos": "0", "mqtt_client_id": cid4,
    }
