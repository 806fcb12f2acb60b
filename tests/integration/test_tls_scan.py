"""sslyze (PyPI; ``make test`` installs it in .venv-sslyze) against every TLS listener of
a real `logbus serve`: AMQP, MQTT, MQTT over secure WebSocket, Kafka and HTTP. None
speaks SSL 2/3, TLS 1.0 or 1.1; TLS 1.2 offers only forward-secret AEAD suites (ECDHE or
DHE with AES-GCM or ChaCha20-Poly1305); no TLS compression, no Heartbleed."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.certs import self_signed
from tests.serverproc import REPO_ROOT, LogbusServer, module_server

SSLYZE = REPO_ROOT / ".venv-sslyze" / "bin" / "python"
TLS_LISTENERS = ("amqp", "mqtt", "mqtt_ws", "kafka", "http")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    cert, key = self_signed(tmp_path_factory.mktemp("scan-certs"))
    tls = f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}"
    yield from module_server(tmp_path_factory, "tls-scan", listeners={name: tls for name in TLS_LISTENERS})


def scan(address: str, out: Path) -> dict[str, Any]:
    assert SSLYZE.exists(), f"{SSLYZE} is missing: `make test` (or `make sslyze`) installs sslyze"
    subprocess.run([str(SSLYZE), "-m", "sslyze", "--quiet", f"--json_out={out}", "--sslv2", "--sslv3", "--tlsv1",
                    "--tlsv1_1", "--tlsv1_2", "--tlsv1_3", "--compression", "--heartbleed", address],
                   check=True, timeout=120, capture_output=True)
    (result,) = json.loads(out.read_text())["server_scan_results"]
    assert result["scan_status"] == "COMPLETED", result
    scan_result: dict[str, Any] = result["scan_result"]
    return scan_result


def accepted(scan_result: dict[str, Any], key: str) -> list[str]:
    part = scan_result[key]
    assert part["status"] == "COMPLETED", part
    return [c["cipher_suite"]["name"] for c in part["result"]["accepted_cipher_suites"]]


@pytest.mark.parametrize("listener", TLS_LISTENERS)
def test_no_old_protocol_and_no_weak_suite(server: LogbusServer, listener: str, tmp_path: Path) -> None:
    r = scan(server.addresses[listener], tmp_path / "scan.json")
    for old in ("ssl_2_0_cipher_suites", "ssl_3_0_cipher_suites", "tls_1_0_cipher_suites", "tls_1_1_cipher_suites"):
        assert accepted(r, old) == [], (listener, old)
    tls12 = accepted(r, "tls_1_2_cipher_suites")
    assert tls12, listener
    for suite in tls12:
        assert suite.startswith(("TLS_ECDHE_", "TLS_DHE_")), (listener, suite)  # forward secret
        assert "_GCM_" in suite or "CHACHA20_POLY1305" in suite, (listener, suite)  # AEAD, no CBC
    assert accepted(r, "tls_1_3_cipher_suites"), listener
    assert r["tls_compression"]["result"]["supports_compression"] is False
    assert r["heartbleed"]["result"]["is_vulnerable_to_heartbleed"] is False
