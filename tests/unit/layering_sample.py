"""What test_layering.protocol_vocabulary must find (and must not): read, never run."""

from typing import Any


class Sample:
    amqp_wire: bytes = b""  # found: a field

    def f(self, mqtt_topic: str, env: Any) -> str:  # found: a parameter
        self.kind = "x-match"  # found: an x- name
        amqp_thing = env.amqp_headers  # found: a variable; reading an envelope field is not
        return str(amqp_thing) + "x-"  # not an x- name
