"""How the `logbus pop` and `logbus dlq` commands print what the HTTP API answers."""

from __future__ import annotations

from logbus.cli import build_parser, error_line, message_row, replay_summary, show_bytes


def test_a_message_row_keeps_to_one_line() -> None:
    m = {"handle": "3.1.0.7", "partition": 0, "offset": 7, "deliveries": 2, "key": None, "value": "a\tb\nc",
         "headers": {}, "timestamp": 1}
    assert message_row(m) == ["3.1.0.7", "0", "7", "2", "-", "a\\tb\\nc"]
    assert show_bytes({"value_base64": "/w=="}, "value") == "base64:/w=="
    assert show_bytes({"key": "k é"}, "key") == "k é"


def test_replay_summary() -> None:
    assert replay_summary({"pop_group": "billing", "replayed": 3, "topics": {"refunds": 1, "orders": 2},
                           "skipped": 0}) == "replayed 3 messages of %DLQ%billing (orders: 2, refunds: 1)"
    assert replay_summary({"pop_group": "g", "replayed": 0, "topics": {}, "skipped": 0}) == "nothing to replay in %DLQ%g"
    assert replay_summary({"pop_group": "g", "replayed": 1, "topics": {"t": 1}, "skipped": 2}).endswith(
        "; 2 skipped (no topic to publish them to; see the broker's log)")


def test_a_stale_receipt_says_what_it_means() -> None:
    line = error_line("stale_receipt", "receipt handle '1.1.0.0' names no current lease")
    assert line.startswith("receipt handle '1.1.0.0' names no current lease (") and "lapsed" in line
    assert error_line("unknown_topic", "unknown topic 'x'") == "unknown topic 'x'"


def test_the_pop_and_dlq_arguments() -> None:
    parser = build_parser()
    args = parser.parse_args(["pop", "receive", "g", "t", "--max", "5", "--invisible-ms", "100", "--member", "w"])
    assert (args.group, args.topic, args.max, args.invisible_ms, args.member) == ("g", "t", 5, 100, "w")
    args = parser.parse_args(["pop", "nack", "g", "t", "1.1.0.0", "2.1.0.1"])
    assert args.action == "nack" and args.handles == ["1.1.0.0", "2.1.0.1"]
    args = parser.parse_args(["pop", "invisible", "g", "t", "1.1.0.0", "60000"])
    assert (args.handle, args.ms) == ("1.1.0.0", 60000)
    args = parser.parse_args(["dlq", "replay", "g", "--topic", "orders", "--max", "10"])
    assert (args.group, args.topic, args.max) == ("g", "orders", 10)
