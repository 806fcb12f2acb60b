"""Queue arguments as RabbitMQ checks them (gateway/amqp/model/queue_args.py)."""

from __future__ import annotations

import pytest

from logbus.core.queues.queue import REJECT_PUBLISH, QueueLimits
from logbus.core.message import per_message_ttl
from logbus.gateway.amqp.model.queue_args import QueueArgs, parse_queue_arguments
from logbus.core.queues.service import DeadLetterTarget
from logbus.core.routing.router import PreconditionFailed
from logbus.retry.policy import RetryPolicy


def test_every_argument() -> None:
    got = parse_queue_arguments("q", "/", {
        "x-max-length": 10, "x-max-length-bytes": 1000, "x-overflow": b"reject-publish", "x-delivery-limit": 3,
        "x-max-priority": 9, "x-message-ttl": 0, "x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead",
        "x-expires": 60_000, "x-single-active-consumer": True, "x-queue-type": "quorum", "x-queue-mode": "lazy",
    })
    assert got == QueueArgs(QueueLimits(10, 1000, REJECT_PUBLISH, 9, 0), "dlx", "dead", 60_000, True, "quorum", 3)
    assert parse_queue_arguments("q", "/", None) == QueueArgs()
    settings = got.settings()
    assert settings.retry == RetryPolicy(max_deliveries=4)  # given back after 3 + 1 deliveries: dead-lettered
    assert settings.dead_letter == DeadLetterTarget("dlx", "dead")
    assert (settings.expires_ms, settings.single_active_consumer) == (60_000, True)


def test_retry_backoff_argument() -> None:
    got = parse_queue_arguments("q", "/", {"x-retry-backoff": "1s 5s 1m", "x-delivery-limit": 5}).settings()
    assert got.retry == RetryPolicy(levels_ms=(1000, 5000, 60_000), max_deliveries=6)
    assert [got.retry.delay_ms(n) for n in (1, 2, 3, 4)] == [1000, 5000, 60_000, 60_000]
    exp = parse_queue_arguments("q", "/", {"x-retry-backoff": "exponential:100ms:3:1s"}).settings().retry
    assert [exp.delay_ms(n) for n in (1, 2, 3, 4)] == [100, 300, 900, 1000]
    assert parse_queue_arguments("q", "/", {"x-retry-backoff": "immediate"}).settings().retry.immediate


@pytest.mark.parametrize("args, text", [
    ({"x-max-length": -1}, "invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}"),
    ({"x-expires": 0}, "invalid arg 'x-expires' for queue 'q' in vhost '/': {value_zero,0}"),
    ({"x-max-priority": 256}, "{value_too_large,256,255}"),
    ({"x-message-ttl": "10"}, "{unacceptable_type,str}"),
    ({"x-max-length": True}, "{unacceptable_type,bool}"),
    ({"x-overflow": "sometimes"}, "invalid arg 'x-overflow'"),
    ({"x-queue-type": "stream"}, "invalid arg 'x-queue-type'"),
    ({"x-dead-letter-routing-key": "k"}, "should be specified together with x-dead-letter-exchange"),
    ({"x-retry-backoff": "soon"}, "invalid arg 'x-retry-backoff' for queue 'q' in vhost '/': 'soon' is not a duration"),
    ({"x-retry-backoff": "41d"}, "invalid arg 'x-retry-backoff'"),
    ({"x-retry-backoff": 5}, "{unacceptable_type,int}"),
])
def test_invalid_arguments_are_precondition_failed(args: dict, text: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        parse_queue_arguments("q", "/", args)
    assert info.value.code == "precondition_failed" and text in str(info.value)


def test_per_message_expiration() -> None:
    assert per_message_ttl(None) is None and per_message_ttl("") is None
    assert per_message_ttl("1500") == 1500
    for bad in ("-1", "1.5", "soon"):
        with pytest.raises(PreconditionFailed):
            per_message_ttl(bad)
