"""A full disk under a real `logbus serve`, with every protocol's real client publishing
(pika with confirms, paho MQTT 5 at QoS 1, confluent-kafka with acks=all, HTTP).

The data directory is a small tmpfs this test mounts; a ballast file fills it, then goes.
Counted throughout: every message the broker confirmed must be read back, after the
fault, after writes resumed without a restart, and after a kill -9; /healthz must say
what is wrong while it is, and answer all along, with its status (how fast it answers is
a bench's business, not a test's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.fault.faultkit import HealthProbe, Publishers, Tmpfs, on_a_small_disk, read_back
from tests.serverproc import LogbusServer


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[LogbusServer, Tmpfs]]:
    with on_a_small_disk(tmp_path / "srv", "96m") as both:
        yield both


def assert_healthz_answered(probe: HealthProbe) -> None:
    """Every look at /healthz was answered, with its status: 200 ok, or 503 failing with
    its reasons (never a refused or dropped connection, a timeout or another status)."""
    assert probe.samples, "/healthz was never asked"
    for _, status, body in probe.samples:
        if status == 200:
            assert body == {"status": "ok"}, body
        else:
            assert status == 503 and body["status"] == "failing" and body["reasons"], (status, body)


def test_a_full_disk_loses_no_confirmed_message_and_writes_resume_by_themselves(
        server: tuple[LogbusServer, Tmpfs]) -> None:
    s, fs = server
    with HealthProbe(s) as probe:
        pubs = Publishers(s)
        pubs.round(20)
        assert pubs.refused == {"amqp": 0, "mqtt": 0, "kafka": 0, "http": 0}
        probe.wait_for(200)

        ballast = fs.fill(leave=128 << 10)
        for _ in range(30):  # until every protocol was refused at least once
            pubs.round(5)
            if all(pubs.refused.values()):
                break
        assert all(pubs.refused.values()), pubs.refused
        failing = probe.wait_for(503)
        assert any("could not be written" in r or "state store" in r for r in failing["reasons"]), failing

        ballast.unlink()  # space again: no restart
        probe.wait_for(200)
        before = dict(pubs.refused)
        pubs.round(20)
        assert pubs.refused == before, "writes did not resume by themselves"

        got = read_back(s)
        for protocol, bodies in pubs.confirmed.items():
            missing = set(bodies) - set(got[protocol])
            assert not missing, f"{protocol}: {len(missing)} confirmed messages lost"
        pubs.close()
        assert_healthz_answered(probe)

    # a kill -9 right after a full disk: what was confirmed (and not yet read) survives
    ballast = fs.fill(leave=128 << 10)
    pubs = Publishers(s)
    for _ in range(30):
        pubs.round(5)
        if all(pubs.refused.values()):
            break
    assert all(pubs.refused.values()), pubs.refused
    s.kill()
    ballast.unlink()
    s.start()
    got = read_back(s)
    for protocol, bodies in pubs.confirmed.items():
        missing = set(bodies) - set(got[protocol])
        assert not missing, f"{protocol}: {len(missing)} confirmed messages lost across kill -9"
    pubs.close()
