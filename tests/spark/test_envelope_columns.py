"""The envelope as Spark's protocol, tag and properties columns: MQTT 5 user properties
by their own names, never over an envelope field, the last of a repeated name."""

from __future__ import annotations

from logbus.core.envelope_pb2 import Envelope
from logbus.spark.decode import envelope_columns


def test_user_properties_by_name() -> None:
    env = Envelope(protocol=Envelope.MQTT, mqtt_topic="a/b", tag="t")
    for k, v in (("unit", "C"), ("mqtt_topic", "spoof"), ("unit", "K"), ("site", "lyon")):
        env.user_properties.add(key=k, value=v)
    protocol, tag, props = envelope_columns(env)
    assert (protocol, tag) == ("MQTT", "t")
    assert dict(props) == {"mqtt_topic": "a/b", "unit": "K", "site": "lyon"}
    assert len(props) == 3  # no duplicate keys: Spark refuses maps with them
