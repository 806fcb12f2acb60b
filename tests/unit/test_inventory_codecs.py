"""The operator's view's pieces that need no broker: the Kafka consumer-protocol
assignment decoder (against kafka-python's encoder, and on any bytes), the payload
encoding of a browse, JSON of argument values, the JSON log format, the overview's rate
sampler on a fake clock."""

from __future__ import annotations

import io
import json
import logging

from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.old.consumer_protocol import ConsumerProtocolMemberAssignment_v0  # type: ignore[import-untyped]
from twisted.internet.task import Clock

from logbus.cli_output import Progress
from logbus.core.inventory import consumer_assignment, jsonable, text_or_base64
from logbus.gateway.http.overview import SAMPLE_SECONDS, RateSampler
from logbus.logformat import JsonFormatter

topics = st.dictionaries(st.text(min_size=1, max_size=20), st.lists(st.integers(0, 2**31 - 1), max_size=8),
                         max_size=5)


@given(topics, st.binary(max_size=16))
def test_assignment_decodes_what_kafka_python_encodes(assigned: dict[str, list[int]], user_data: bytes) -> None:
    raw = ConsumerProtocolMemberAssignment_v0(0, list(assigned.items()), user_data).encode()
    assert consumer_assignment(raw) == [(t, p) for t, parts in assigned.items() for p in parts]


@given(st.binary(max_size=200))
def test_assignment_decoder_takes_any_bytes(raw: bytes) -> None:
    out = consumer_assignment(raw)
    assert isinstance(out, list)


def test_payloads_are_text_when_utf8_else_base64() -> None:
    assert text_or_base64("héllo".encode()) == ("héllo", "string")
    assert text_or_base64(b"\xff\x00") == ("/wA=", "base64")


def test_argument_values_become_json() -> None:
    assert jsonable({"x-max-length": 10, "b": b"\xff", "l": (1, b"a"), "n": None}) == {
        "x-max-length": 10, "b": "/w==", "l": [1, "a"], "n": None}
    json.dumps(jsonable(object()))  # anything else: its text


def test_json_log_lines_carry_the_fields() -> None:
    record = logging.LogRecord("logbus.connections", logging.INFO, __file__, 1, "amqp connection %d closed", (7,),
                               None)
    record.fields = {"connection": {"event": "closed", "id": 7, "reason": "closed cleanly"}}
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "amqp connection 7 closed" and line["level"] == "info"
    assert line["connection"] == {"event": "closed", "id": 7, "reason": "closed cleanly"}
    assert line["time"].endswith("Z")


class Totals:
    def __init__(self) -> None:
        self.received = 0

    def message_totals(self) -> dict[str, dict[str, int]]:
        return {"amqp": {"received": self.received}}

    def topic_append_counts(self) -> dict[str, int]:
        return {"orders": self.received * 2}


def test_rates_over_the_last_sample_interval() -> None:
    clock, totals = Clock(), Totals()
    sampler = RateSampler(totals, clock)  # type: ignore[arg-type]
    sampler.start()
    assert sampler.rates() == {}  # one sample: no rate yet
    assert sampler.topic_rate("orders") is None
    totals.received = 50
    clock.advance(SAMPLE_SECONDS)
    assert sampler.rates() == {"amqp": {"received": 10.0}}
    assert (sampler.topic_rate("orders"), sampler.topic_rate("other")) == (20.0, 0.0)
    clock.advance(SAMPLE_SECONDS)
    assert sampler.rates() == {"amqp": {"received": 0.0}}
    sampler.stop()
    assert not clock.getDelayedCalls()




class Terminal(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_bars_draw_on_a_terminal_only() -> None:
    term = Terminal(True)
    bar = Progress("exporting t", term)
    bar.update(5, 20)
    bar.update(20, 20)
    bar.close()
    out = term.getvalue()
    assert out.startswith("\rexporting t [" + "#" * 7 + "." * 23 + "] 5/20")
    assert "] 20/20\x1b[K\n" in out
    pipe = Terminal(False)
    bar = Progress("exporting t", pipe)
    bar.update(5, 20)
    bar.close()
    assert pipe.getvalue() == ""
