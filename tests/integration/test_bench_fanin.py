"""bench/fanin_bench.py still runs: every workload with a tiny fleet against a `logbus
serve` of its own, checking the JSON's shape and that the counts add up (nothing
acknowledged is lost). No timing is asserted (STYLE.md 11g)."""

from __future__ import annotations

import pytest

from tests.integration.test_bench_scripts import run_bench

TINY = ("--devices", "20", "--rate", "5", "--seconds", "1", "--warmup", "0.4", "--rounds", "1",
        "--target", "logbus", "--drain-timeout", "15", "--timeout", "30")


@pytest.mark.parametrize("workload", [("mqtt", "0"), ("mqtt", "1"), ("mqtt", "2"), ("amqp", None),
                                      ("kafka", None)], ids=lambda w: w[0] + (f"-qos{w[1]}" if w[1] else ""))
def test_fanin_bench_counts_add_up(workload: tuple[str, str | None]) -> None:
    protocol, qos = workload
    extra = ("--qos", qos) if qos else ()
    processes = ("--client-processes", "2") if protocol == "kafka" else ()  # the split, once
    out = run_bench("fanin_bench.py", "--protocol", protocol, *extra, *processes, *TINY)
    assert out["bench"] == "fanin_bench" and out["errors"] == []
    assert out["broker_log_problems"]["logbus"]["count"] == 0, out["broker_log_problems"]
    (rnd,) = out["rounds"]
    assert rnd["order"] == ["logbus"]
    r = rnd["logbus"]
    total = 20 * 5 * 1.4  # devices x rate x (warm-up + window)
    assert r["sent"] == r["acked"] == r["delivered"] == total, r
    assert r["lost"] == r["duplicates"] == r["unacked"] == r["unsent"] == r["never_sent_delivered"] == 0
    assert r["measured_msgs"] == 100 and r["rate_kept"] is True
    for key in ("broker_cpu_us_per_msg", "broker_user_us_per_msg", "broker_system_us_per_msg", "broker_cores",
                "client_cpu_us_per_msg"):
        assert r[key] >= 0, key
    assert len(r["client_cores"]["devices"]) == (2 if processes else 1)
    assert r["delivery_latency"]["count"] == 100 and r["delivery_latency"]["p99_ms"] > 0
    if qos == "0":
        assert r["ack_latency"] is None
    else:
        assert r["ack_latency"]["count"] == 100
        assert set(r["ack_latency"]) >= {"p50_ms", "p99_ms", "max_ms"}
    assert r["broker_memory"]["end"]["vmrss_mb"] > 0
    summary = out["summary"]["logbus"]
    assert summary["rounds"] == 1 and summary["lost"] == 0
    assert summary["broker_cpu_us_per_msg"] == r["broker_cpu_us_per_msg"]


def test_fanin_bench_sends_by_epoll_timeout_too() -> None:
    """``--send-clock poll`` (sends woken by epoll's millisecond timeout, the method before
    the timerfd) still runs and its counts add up."""
    out = run_bench("fanin_bench.py", "--protocol", "mqtt", "--qos", "1", "--send-clock", "poll", *TINY)
    assert out["errors"] == [] and out["args"]["send_clock"] == "poll"
    r = out["rounds"][0]["logbus"]
    assert r["sent"] == r["acked"] == r["delivered"] == 20 * 5 * 1.4 and r["lost"] == 0, r
