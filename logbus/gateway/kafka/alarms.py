"""Resource alarms on the Kafka listener: produce requests held, large unfinished
requests not read.

Kafka has two ways to slow a producer, both from its client quotas: delay the answer
(brokers before 2.0, and every broker still mutes the channel meanwhile), or answer at
once with ``throttle_time_ms`` and let the client wait (KIP-219, Produce v6 and later).
An answer at once would have to append the records first, which is what an alarm must
prevent, so logbus delays: while an alarm (core/pressure.py) is set, a Produce request is
held, neither appended nor answered, and the connection is not read meanwhile (one
request at a time, protocol.py), as Kafka mutes a throttled channel. When every alarm
has cleared the request is handled as usual, so nothing held is lost or written twice.
Fetch and every other request go on, so consumers drain.

A client gives up on an unanswered request after its own timeout (kafka-python and
librdkafka: ``request.timeout.ms`` 30 s, aiokafka 40 s), which they also send as the
Produce's ``timeout_ms``. So a Produce is held for at most ``HOLD_FRACTION`` of its
``timeout_ms``, then answered REQUEST_TIMED_OUT (retriable, nothing appended) for every
partition, with ``throttle_time_ms`` set: every client retries, kafka-python also waits
the throttle time before sending to the broker again (KIP-219), and the retry is held in
turn while the alarm lasts. An acks=0 Produce expects no answer: it is held until the
alarm clears. A connection closed meanwhile (the client's own timeout) drops what it held,
never appended.

Memory: while the memory alarm is set, a connection in the middle of a request of
``LARGE_UNFINISHED`` bytes or more is not read until it clears: the unfinished bytes are
in the resident memory the alarm measures, and reading on would only add to them (as
RabbitMQ blocks a publishing connection).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import ProduceResponse

from .errors import REQUEST_TIMED_OUT

PRODUCE = 0  # API key
HOLD_FRACTION = 0.8  # of a Produce's timeout_ms: answered before the client gives up
RETRY_THROTTLE_MS = 1000  # throttle_time_ms of a held Produce answered REQUEST_TIMED_OUT
LARGE_UNFINISHED = 1 << 20  # bytes of one unfinished request: not read under the memory alarm


def hold_seconds(body: Any) -> float | None:
    """How long a held Produce may wait for the alarm to clear; None: until it clears
    (acks=0, no answer expected, or no timeout given)."""
    if body.acks == 0 or body.timeout_ms <= 0:
        return None
    return body.timeout_ms * HOLD_FRACTION / 1000


def timed_out(body: Any, throttle_ms: int = RETRY_THROTTLE_MS) -> Any:
    """The answer to a Produce held past its time: REQUEST_TIMED_OUT for every partition,
    nothing appended. Topic names are the request's own (Kafka's, never renamed)."""
    T = ProduceResponse.TopicProduceResponse
    P = T.PartitionProduceResponse
    topics = [T(name=td.name, partition_responses=[
        P(index=pd.index, error_code=REQUEST_TIMED_OUT, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1,
          record_errors=[], error_message="resource alarm: the broker takes no writes now; retry")
        for pd in td.partition_data]) for td in body.topic_data]
    return ProduceResponse(responses=topics, throttle_time_ms=throttle_ms)
