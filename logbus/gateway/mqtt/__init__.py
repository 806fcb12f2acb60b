"""The MQTT gateway. So far its sans-I/O codec for MQTT 3.1.1 (and 3.1) and 5.0:

    decoder = Decoder(max_packet_size=...)      # server side: the version comes from CONNECT
    for packet in decoder.feed(data): ...       # raises MqttError(reason_code, text)
    transport.write(encode(ConnAck(), decoder.version))
"""

from .decoder import MAX_PACKET_SIZE, Decoder, decode
from .encoder import encode
from .packets import (
    Auth, ConnAck, Connect, Disconnect, Packet, PingReq, PingResp, PubAck, PubComp, Publish,
    PubRec, PubRel, SubAck, Subscribe, Subscription, UnsubAck, Unsubscribe, Will,
)  # fmt: skip
from .properties import NO_PROPERTIES, Properties
from .reasons import LocalProtocolError, MqttError, UnsupportedProtocolVersion
from .wire import MQTT_3_1, MQTT_3_1_1, MQTT_5

__all__ = [
    "MAX_PACKET_SIZE", "MQTT_3_1", "MQTT_3_1_1", "MQTT_5", "NO_PROPERTIES", "Auth", "ConnAck",
    "Connect", "Decoder", "Disconnect", "LocalProtocolError", "MqttError", "Packet", "PingReq",
    "PingResp", "Properties", "PubAck", "PubComp", "PubRec", "PubRel", "Publish", "SubAck",
    "Subscribe", "Subscription", "UnsubAck", "Unsubscribe", "UnsupportedProtocolVersion",
    "Will", "decode", "encode",
]  # fmt: skip
