"""How the `logbus mqtt` commands print what the HTTP API answers, and their arguments."""

from __future__ import annotations

import pytest

from logbus.cli import build_parser, cmd_mqtt_list, expiry, session_row


def session(**changes: object) -> dict[str, object]:
    s: dict[str, object] = {"client_id": "sensor-1", "user": "guest", "connected": False, "peer": None,
                            "protocol": "5.0", "clean": False, "expiry_interval": 3600,
                            "subscriptions": [{"filter": "home/#", "qos": 1}, {"filter": "a/+", "qos": 0}],
                            "queued": 4, "in_flight": 1}
    s.update(changes)
    return s


def test_a_session_row() -> None:
    assert session_row(session()) == ["sensor-1", "guest", "offline", "5.0", "1h", "home/#:1, a/+:0", "4", "1"]
    row = session_row(session(connected=True, peer="127.0.0.1:5000", subscriptions=[], user="",
                              client_id="tab\there\n"))
    assert row[:3] == ["tab\\there\\n", "-", "127.0.0.1:5000"] and row[5] == "-"


def test_expiry() -> None:
    assert [expiry(s) for s in (0, 1, 90, 600, 86400, 0xFFFFFFFF)] == ["0s", "1s", "90s", "10m", "1d", "never"]


@pytest.mark.parametrize("env", [{}, {"LOGBUS_USER": "ops", "LOGBUS_PASSWORD": "s3cret"}])
def test_the_mqtt_arguments(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    monkeypatch.delenv("LOGBUS_USER", raising=False)
    monkeypatch.delenv("LOGBUS_PASSWORD", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    args = build_parser().parse_args(["mqtt", "kick", "a/b c"])
    assert (args.client_id, args.user, args.password) == ("a/b c", env.get("LOGBUS_USER", "guest"),
                                                          env.get("LOGBUS_PASSWORD", "guest"))
    args = build_parser().parse_args(["mqtt", "sessions", "--json", "--user", "u", "--password", "p",
                                      "--server", "http://h:1"])
    assert (args.command, args.what, args.json, args.user, args.password, args.server) == (
        cmd_mqtt_list, "sessions", True, "u", "p", "http://h:1")
    assert build_parser().parse_args(["mqtt", "delete-session", "x"]).client_id == "x"
