"""mypy over the whole package (``logbus``) and the ``pyspark_logbus`` data source module,
with the settings in pyproject.toml, as STYLE.md 12 asks."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_mypy_is_clean() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "logbus", "pyspark_logbus.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
