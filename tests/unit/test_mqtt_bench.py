"""bench/mqtt_bench.py without a network: its command line, the peers' configs, the
figures it derives (medians, logbus/peer ratios) and the shape of the JSON, with the
brokers and workloads replaced by stand-ins. The real runs are by hand (docs/benchmarks.md)."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from tests.bench_path import bench_on_path


@pytest.fixture(scope="module")
def mb() -> Iterator[Any]:
    pytest.importorskip("paho.mqtt")
    with bench_on_path():
        import mqtt_bench
        yield mqtt_bench


def test_defaults_are_issue_17s(mb: Any) -> None:
    a = mb.parse_args([])
    assert a.target == "all" and a.rounds == 1
    assert a.workloads == ["qos0", "qos1", "fanout", "latency", "idle"]
    assert (a.messages, a.size) == (50_000, 64)
    assert a.fanout_subscribers == 10
    assert a.latency_rate == 1000.0 and a.latency_warmup > 0
    assert a.idle_connections == 10_000 and a.idle_processes > 1


def test_flags(mb: Any) -> None:
    a = mb.parse_args(["--target", "mosquitto", "--rounds", "3", "--workloads", "idle,qos1",
                       "--messages", "5000", "--idle-connections", "100"])
    assert a.target == "mosquitto" and a.rounds == 3
    assert a.workloads == ["qos1", "idle"]  # in the script's order
    assert a.messages == 5000 and a.idle_connections == 100


@pytest.mark.parametrize("argv", [
    ["--target", "rabbitmq"], ["--workloads", "qos2"], ["--rounds", "0"],
    ["--messages", "0"], ["--size", "8"],  # the latency workload needs its 24-byte head
])
def test_bad_flags_are_refused(mb: Any, argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        mb.parse_args(argv)


def test_peer_configs(mb: Any) -> None:
    import mqtt_peers

    conf = mqtt_peers.mosquitto_config(18830)
    assert "listener 18830 127.0.0.1\n" in conf
    assert "allow_anonymous true\n" in conf and "persistence false\n" in conf
    assert "max_connections" not in conf and "memory_limit" not in conf
    yaml = mqtt_peers.amqtt_config(18831)
    assert "bind: 127.0.0.1:18831" in yaml and "allow_anonymous: true" in yaml
    assert mqtt_peers.CONNECT[0] == 0x10 and mqtt_peers.CONNECT[1] == len(mqtt_peers.CONNECT) - 2


def fake_result(name: str, x: float) -> dict[str, Any]:
    if name == "latency":
        return {"latency": {"p50_ms": x, "p99_ms": 2 * x, "max_ms": 3 * x},
                "broker_cpu_us_per_msg": x}
    if name == "idle":
        return {"connections": 100, "rss_growth_mb": x, "rss_kib_per_connection": x}
    return {k: x for k in {"qos0": ["msgs_per_s", "broker_cpu_us_per_msg"],
                           "qos1": ["msgs_per_s", "broker_cpu_us_per_msg"],
                           "fanout": ["deliveries_per_s", "broker_cpu_us_per_delivery"]}[name]}


def test_median_ratios(mb: Any) -> None:
    rounds = [{"order": ["logbus", "mosquitto"],
               "logbus": {"qos1": fake_result("qos1", lb), "latency": fake_result("latency", lb)},
               "mosquitto": {"qos1": fake_result("qos1", 10.0),
                             "latency": fake_result("latency", 10.0)}}
              for lb in (10.0, 20.0, 40.0)]
    r = mb.median_ratios(rounds, "mosquitto")
    assert r["qos1"] == {"msgs_per_s": 2.0, "broker_cpu_us_per_msg": 2.0}
    assert r["latency"]["p99_ms"] == 2.0
    assert mb.medians(rounds, "logbus")["latency"]["max_ms"] == 60.0
    rounds[0]["logbus"]["qos1"] = {"error": "boom"}  # a failed run: no median of that one
    assert "qos1" not in mb.median_ratios(rounds, "mosquitto")


def run_main(mb: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
             gateway: bool, argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """main() with stand-in brokers and workloads (each result's figures: 1 + its index
    in the order run). Returns the JSON and the brokers in the order their workloads ran."""

    class FakeBroker:
        error: dict[str, str] | None = None
        port, pid = 1883, 1

        def __init__(self, *_a: Any) -> None:
            pass

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *_a: Any) -> None:
            pass

        def info(self) -> dict[str, Any]:
            return {"port": self.port, "pid": self.pid}

    class FakeLogbus(FakeBroker):
        error = None if gateway else {"error": mb.NO_GATEWAY, "detail": "nothing answers"}

    ran: list[str] = []

    def workload(name: str) -> Any:
        def run(_a: Any, _port: int, _pid: int) -> dict[str, Any]:
            ran.append(name)
            return fake_result(name, float(len(ran)))
        return run

    monkeypatch.setattr(mb, "LogbusBroker", FakeLogbus)
    monkeypatch.setattr(mb, "PEERS", {"mosquitto": FakeBroker, "amqtt": FakeBroker})
    monkeypatch.setattr(mb, "WORKLOADS", {n: workload(n) for n in mb.WORKLOADS})
    old = signal.getsignal(signal.SIGTERM)
    try:
        assert mb.main(argv) == 0
    finally:
        signal.signal(signal.SIGTERM, old)  # main() sets its own
    return json.loads(capsys.readouterr().out), ran


def test_json_shape_without_a_gateway(mb: Any, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """--target all: logbus reports the missing gateway, the peers are measured in rotated
    order, and the JSON says which."""
    out, ran = run_main(mb, monkeypatch, capsys, False,
                        ["--rounds", "2", "--workloads", "qos0,idle"])
    assert out["bench"] == "mqtt_bench"
    assert out["logbus"] == {"error": "no MQTT gateway", "detail": "nothing answers"}
    assert [r["order"] for r in out["rounds"]] == [["mosquitto", "amqtt"], ["amqtt", "mosquitto"]]
    assert len(ran) == 2 * 2 * 2
    for peer in ("mosquitto", "amqtt"):
        assert out[peer]["broker"] == {"port": 1883, "pid": 1}
        assert set(out[peer]["median"]) == {"qos0", "idle"}
        assert set(out["rounds"][0][peer]) == {"qos0", "idle"}
    assert not any(k.startswith("median_ratios") for k in out)  # nothing to divide by
    assert out["errors"] == []
    assert out["limits"]["nofile_hard"] >= out["limits"]["nofile_soft"] > 0


def test_json_shape_with_a_gateway(mb: Any, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    out, ran = run_main(mb, monkeypatch, capsys, True, ["--rounds", "3", "--workloads", "qos1"])
    assert [r["order"] for r in out["rounds"]] == [
        ["logbus", "mosquitto", "amqtt"], ["mosquitto", "amqtt", "logbus"],
        ["amqtt", "logbus", "mosquitto"]]
    # figures = run index: round 1 lb 1, mq 2, am 3; round 2 mq 4, am 5, lb 6; round 3 am 7,
    # lb 8, mq 9: logbus/mosquitto 1/2, 6/4, 8/9; logbus/amqtt 1/3, 6/5, 8/7
    assert len(ran) == 9
    assert out["median_ratios_logbus_over_mosquitto"]["qos1"]["msgs_per_s"] == pytest.approx(8 / 9)
    assert out["median_ratios_logbus_over_amqtt"]["qos1"]["msgs_per_s"] == pytest.approx(8 / 7)
    assert out["logbus"]["median"]["qos1"]["msgs_per_s"] == 6.0
