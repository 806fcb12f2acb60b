"""mypy over the core (log, state, broker), the config and the Kafka codec and
handlers, as STYLE.md 12 asks."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_mypy_core_is_clean() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "logbus/core", "logbus/config.py", "logbus/gateway/kafka", "logbus/gateway/output.py", "logbus/gateway/amqp"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
