"""The bench scripts still run: each with tiny counts against a `logbus serve` of its
own, checking the shape of the JSON it prints. No timing is asserted (STYLE.md 11g:
benchmarks never as timed assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from tests.serverproc import REPO_ROOT, logbus_env


def run_bench(script: str, *args: str, timeout: float = 180) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / script), *args], cwd=REPO_ROOT,
                          env=logbus_env(), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-5000:]
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def test_pop_bench_runs_every_workload() -> None:
    out = run_bench("pop_bench.py", "--messages", "300", "--batch", "8", "--members", "2",
                    "--publishers", "2", "--publish-batch", "100", "--delayed", "200",
                    "--delay-lead", "2", "--delay-spread-ms", "200", "--pending", "500", "--ready", "100",
                    "--settle", "0.1", "--timeout", "60")
    assert out["bench"] == "pop_bench"
    assert out["broker"]["started_here"] is True
    assert out["broker_log_problems"]["count"] == 0, out["broker_log_problems"]

    pop = out["pop"]
    assert pop["publish"]["messages"] == 300
    ra = pop["receive_ack"]
    assert ra["messages"] == 300 and ra["redelivered"] == 0
    assert ra["left_ready"] == 0 and ra["left_invisible"] == 0
    assert sum(ra["per_member_msgs"]) == 300 and len(ra["per_member_msgs"]) == 2
    assert ra["msgs_per_s"] > 0 and ra["broker_cpu_us_per_msg"] >= 0
    assert set(ra["round_trip"]) >= {"p50_ms", "p99_ms", "max_ms"}

    delay = out["delay"]
    assert delay["received"]["lateness"]["count"] == 200
    assert delay["received"]["lateness"]["min_ms"] >= 0  # none before its due time
    assert set(delay["released"]) >= {"p50_ms", "p99_ms", "max_ms", "samples"}
    assert delay["released_broker"]["count"] == 200  # the broker's histogram: every one

    rss = out["rss"]
    assert rss["publish"]["messages"] == 500
    assert rss["before"]["vmrss_mb"] > 0 and rss["after"]["vmrss_mb"] > 0
    assert "rss_growth_mb" in rss
    assert rss["ready"]["messages"] == 100 and rss["ready"]["after"]["vmrss_mb"] > 0


def test_pop_bench_release_only() -> None:
    out = run_bench("pop_bench.py", "--workloads", "delay", "--delayed", "100", "--delay-members", "0",
                    "--delay-lead", "2", "--delay-spread-ms", "0", "--publishers", "1", "--timeout", "60")
    assert out["delay"]["release_only"]["left_ready"] == 100
    assert out["delay"]["released"]["max_ms"] is not None
    assert out["delay"]["released_broker"]["count"] == 100 and out["delay"]["released_broker"]["max_ms"] is not None


def test_sync_ahead_probe_measures_every_mode(tmp_path: Any) -> None:
    out = run_bench("sync_ahead_probe.py", "--writes", "20", "--rounds", "2", "--dir", str(tmp_path))
    modes = {"append", "zeros", "falloc", "falloc_keep"}
    assert out["bench"] == "sync_ahead_probe" and len(out["rounds"]) == 2
    for r in out["rounds"]:
        assert set(r) == modes
        assert all(0 < m["p50_us"] <= m["p99_us"] <= m["max_us"] for m in r.values())
    assert set(out["median_p50_us"]) == set(out["median_p99_us"]) == modes
    assert list(tmp_path.iterdir()) == []  # its files are removed


def test_uring_sync_probe_measures_every_mode(tmp_path: Any) -> None:
    out = run_bench("uring_sync_probe.py", "--syncs", "20", "--rounds", "2", "--dir", str(tmp_path))
    assert out["bench"] == "uring_sync_probe" and len(out["rounds"]) == 2
    for r in out["rounds"]:
        assert set(r) == {"one", "two", "two_linked"}
        assert all(0 < m["p50_us"] <= m["p99_us"] <= m["max_us"] and m["cpu_us_per_sync"] > 0 for m in r.values())
    assert list(tmp_path.iterdir()) == []  # its files are removed


def test_filter_bench_runs_every_workload(tmp_path: Any) -> None:
    out = run_bench("filter_bench.py", "--messages", "200", "--warmup", "20", "--evals", "20000",
                    "--repeats", "1", "--queues", "0,1,2", "--consumers", "1,3", "--rounds", "1",
                    "--idle-seconds", "0", "--timeout", "60", "--dir", str(tmp_path))
    assert out["bench"] == "filter_bench"
    cases = out["predicate"]["cases"]
    assert set(cases) == {"matching", "non_matching_last_clause", "non_matching_first_clause"}
    assert cases["matching"]["result"] is True and cases["non_matching_last_clause"]["result"] is False
    assert all(c["evals_per_s"] > 0 and c["ns_per_eval"] > 0 for c in cases.values())

    routing = out["routing"]
    configs = {"unmatched-0", "unmatched-1", "unmatched-2", "filtered-1", "filtered-2", "plain-1",
               "plain-2"}
    assert set(routing["configurations"]) == configs and set(routing["median"]) == configs
    assert len(routing["rounds"]) == 1 and set(routing["rounds"][0]["order"]) == configs
    for r in routing["median"].values():
        assert r["messages"] == 200 and r["seconds"] > 0 and r["msgs_per_s"] > 0
        assert r["broker_cpu_us_per_msg"] >= 0  # 200 messages may take under one clock tick
    assert set(routing["filter_cost_us_per_queue"]) == {"1", "2"}
    assert all(isinstance(v, float) for v in routing["filter_cost_us_per_queue"].values())
    assert set(routing["marginal_filter_cost_us_per_queue"]) == {"1-2"}
    consumers = out["consumers"]
    configs = {"shared-plain-1", "shared-filtered-1", "shared-plain-3", "shared-filtered-3"}
    assert set(consumers["median"]) == configs and len(consumers["rounds"]) == 1
    assert all(r["messages"] == 200 and r["msgs_per_s"] > 0 for r in consumers["median"].values())
    assert set(consumers["view_cost_us_per_msg"]) == {"1", "3"}
    assert out["broker_log_problems"]["count"] == 0, out["broker_log_problems"]
    assert set(out["targets"]) == {"predicate_evals_per_s", "filter_cost_us_per_queue"}
    assert list(tmp_path.iterdir()) == []  # the broker's temp dir is removed


def test_mqtt_sessions_bench_runs_every_workload() -> None:
    out = run_bench("mqtt_sessions_bench.py", "--drain-messages", "300", "--live-messages", "100",
                    "--sessions", "4", "--per-session", "20", "--processes", "2", "--settle", "0.2",
                    "--timeout", "60")
    assert out["bench"] == "mqtt_sessions_bench"
    assert out["broker"]["started_here"] is True
    assert all(p["count"] == 0 for p in out["broker_log_problems"].values()), out["broker_log_problems"]
    d = out["drain"]
    assert d["drain"]["missing"] == d["drain"]["duplicates"] == 0
    assert d["live"]["missing"] == d["live"]["duplicates"] == 0
    assert d["drain"]["msgs_per_s"] > 0 and d["live"]["msgs_per_s"] > 0
    assert d["healthz"]["count"] > 0 and set(d["healthz"]) >= {"p50_ms", "p99_ms", "max_ms"}
    m = out["memory"]
    assert m["messages"] == 80 and m["missing"] == m["duplicates"] == 0
    assert all(m[k]["vmrss_mb"] > 0 for k in ("idle", "peak", "drained", "settled"))
    assert set(m["targets"]) == {"peak_rss_le_400mb", "settled_within_25pct_of_idle"}


def test_unfinished_bodies_bench_runs() -> None:
    out = run_bench("unfinished_bodies_bench.py", "--connections", "2", "--body-mib", "8", "--alarm-above-mb", "4",
                    "--send-seconds", "10", "--stall", "0.5", "--alarm-wait", "3", "--idle-wait", "0.5",
                    "--settle-timeout", "5", "--timeout", "30")
    assert out["bench"] == "unfinished_bodies_bench"
    assert out["broker"]["started_here"] is True
    u = out["unfinished"]
    assert "error" not in u, u
    assert u["connections"] == 2 and len(u["sent_mb"]) == 2
    assert all(u[k]["vmrss_mb"] > 0 for k in ("idle", "peak", "after"))
    assert set(u["targets"]) == {"alarm_cleared_within_30s", "rss_within_25pct_of_idle_within_30s"}


def test_amqp_bench_latency_with_each_client() -> None:
    """Both latency clients (aio-pika, and bench/amqp_raw.py's pre-encoded frames) deliver
    every message once, with the latency of each measured one."""
    for client in ("aio-pika", "raw"):
        out = run_bench("amqp_bench.py", "--target", "logbus", "--workloads", "latency",
                        "--latency-client", client, "--latency-rate", "200", "--latency-seconds", "1",
                        "--latency-warmup", "0.25", "--idle-seconds", "0", "--timeout", "60")
        lat = out["logbus"]["latency"]
        assert lat["client"] == client
        assert lat["measured_messages"] == 200, lat
        assert set(lat["latency"]) >= {"p50_ms", "p99_ms", "max_ms"}
        assert lat["latency"]["max_ms"] > 0 and lat["broker_cpu_us_per_msg"] > 0
        assert_slowest(lat)


def test_mqtt_bench_latency_with_each_client() -> None:
    """Both MQTT latency clients (paho, and bench/mqtt_raw.py's packets by hand) get every
    message once, with the latency of each measured one."""
    for client in ("paho", "raw"):
        out = run_bench("mqtt_bench.py", "--target", "logbus", "--workloads", "latency",
                        "--latency-client", client, "--latency-rate", "200", "--latency-seconds", "1",
                        "--latency-warmup", "0.25", "--timeout", "60")
        (lat,) = [r["logbus"]["latency"] for r in out["rounds"]]
        assert lat["client"] == client
        assert lat["measured_messages"] == 200, lat
        assert lat["latency"]["count"] == 200 and lat["latency"]["max_ms"] > 0
        assert lat["broker_cpu_us_per_msg"] > 0
        assert_slowest(lat)


def assert_slowest(lat: dict[str, Any]) -> None:
    """The slowest messages, slowest first, the first of them the maximum, each sent
    within the measured span (CLOCK_MONOTONIC seconds, as the stall trace stamps)."""
    slowest = lat["slowest"]
    assert len(slowest) == 20
    assert [s["ms"] for s in slowest] == sorted((s["ms"] for s in slowest), reverse=True)
    assert abs(slowest[0]["ms"] - lat["latency"]["max_ms"]) < 0.01
    now = time.monotonic()
    assert all(now - 120 < s["sent_s"] < now for s in slowest)


def test_relay_jitter_runs_each_work_in_each_round() -> None:
    out = run_bench("relay_jitter.py", "--rate", "500", "--seconds", "0.5", "--warmup", "0.1",
                    "--work-us", "0,50", "--rounds", "2")
    assert out["bench"] == "relay_jitter"
    assert len(out["rounds"]) == 2
    for rnd in out["rounds"]:
        assert sorted(r["work_us"] for r in rnd) == [0.0, 50.0]
        for r in rnd:
            assert r["latency"]["count"] == 250 and r["latency"]["max_ms"] > 0
    # the relay spends at least the CPU it was told to (tick-counted: over a whole round)
    assert sum(r["relay_cpu_us_per_msg"] for rnd in out["rounds"] for r in rnd if r["work_us"] == 50) > 0


def test_login_storm_measures_each_phase() -> None:
    out = run_bench("login_storm.py", "--users", "3", "--rounds", "1", "--quiet-seconds", "0.3",
                    "--probe-interval-ms", "5")
    assert out["users"] == 3 and len(out["rounds"]) == 1
    phases = out["rounds"][0]
    assert phases["quiet"]["logins"] is None and phases["quiet"]["probe_rtt"]["count"] > 0
    for phase in ("first_logins", "known_logins"):
        assert phases[phase]["logins"]["count"] == 3
        assert phases[phase]["probe_rtt"]["count"] > 0


def test_key_lookup_bench_measures_every_lookup(tmp_path: Any) -> None:
    out = run_bench("key_lookup_bench.py", "--records", "3000", "--keys", "500", "--lookups", "20",
                    "--segment-bytes", "65536", "--dir", str(tmp_path))
    assert out["bench"] == "key_lookup_bench"
    assert out["build"]["records_indexed"] == 3000 and out["build"]["files_written"] >= 1
    lookups = out["lookups"]
    assert lookups["key_hit"]["count"] == 20 and lookups["key_hit"]["found_per_lookup"] >= 1
    assert lookups["key_miss"]["found_per_lookup"] == 0
    assert lookups["message_id_hit"]["found_per_lookup"] == 1
    assert out["disk"]["keyindex_bytes"] > 0
    assert out["rebuild"]["rebuild_from_log_files_rebuilt"] == out["build"]["files_written"]
    assert out["rebuild"]["check_files_at_start_files_rebuilt"] == 0


def test_ab_bench_compares_two_builds_round_by_round() -> None:
    """Both builds are this tree: every workload measured on each, and each build's whole
    turn, a ratio per round; pinned, the brokers run on CPU 1 only."""
    out = run_bench("ab_bench.py", "--a", str(REPO_ROOT), "--b", str(REPO_ROOT), "--rounds", "2", "--pin",
                    "--amqp", "publish", "--mqtt", "qos0", "--messages", "3000", "--fanout-messages", "100")
    assert out["bench"] == "ab_bench"
    assert set(out["summary"]) == {"amqp publish", "mqtt qos0", "turn"}
    for figures in out["summary"].values():
        assert len(figures["ratios"]) == 2 and figures["a_median"] > 0 and figures["b_median"] > 0
        assert figures["geomean_low"] <= figures["geomean_ratio"] <= figures["geomean_high"]
    assert out["summary"]["turn"]["a_median"] > 3000 * 2 * 1e-3  # ms: more than 1 us a message
    assert {b: f["workloads"] for b, f in out["benches"].items()} == {"amqp": ["amqp publish"], "mqtt": ["mqtt qos0"]}


def test_redo_bench_routes_again_what_the_loss_took() -> None:
    out = run_bench("redo_bench.py", "--messages", "2000", "--queues", "2", "--rounds", "1")
    assert out["bench"] == "redo_bench"
    assert out["records_routed_again"] == 2000 and out["entries_made_again"] == 4000
    assert [n for _, n, _ in out["runs"]["intact"]] == [0]


def test_calls_per_message_counts_each_path() -> None:
    out = run_bench("calls_per_message.py", "--messages", "20")
    assert out["bench"] == "calls_per_message" and out["messages"] == 20
    for path in (out["amqp"]["publish_confirm_deliver"], out["amqp"]["ack"],
                 out["mqtt"]["qos1_publish_puback_deliver"], out["mqtt"]["puback"]):
        assert path["python_calls_per_message"] > 0 and path["c_calls_per_message"] > 0


def test_txn_bench_compares_transactions_with_plain_produce() -> None:
    out = run_bench("txn_bench.py", "--rounds", "2", "--records", "200", "--txn-size", "50")
    assert len(out["rounds"]) == 2 and out["method"]["txn_size"] == 50
    for r in out["rounds"]:
        assert r["plain"]["records_per_s"] > 0 and r["txn"]["records_per_s"] > 0
        assert r["txn"]["end_txn"]["count"] == 4  # 200 records in transactions of 50
    assert out["summary"]["txn_over_plain"] > 0 and out["summary"]["txn"]["end_txn_p99_ms"] > 0


def test_tier_bench_reads_remote_and_local() -> None:
    out = run_bench("tier_bench.py", "--rounds", "1", "--mb", "20", timeout=300)
    assert out["records"] == (20 << 20) // 10_000
    [r] = out["rounds"]
    assert set(r) == {"remote_cold", "remote_warm", "local"}
    assert all(x["mb_s"] > 0 and x["broker_cpu_s"] >= 0 for x in r.values())
    assert out["remote_cold_over_local"] > 0 and out["remote_warm_over_local"] > 0


def test_console_bench_compares_the_console_open_and_closed() -> None:
    out = run_bench("console_bench.py", "--rounds", "2", "--rate", "500", "--seconds", "1", timeout=300)
    assert len(out["ratios"]) == 2 and all(r > 0 for r in out["ratios"])
    assert len(out["rounds"]["open"]) == len(out["rounds"]["closed"]) == 2
    assert out["page_was_live"] is True
