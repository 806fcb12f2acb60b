"""ruff over everything Python in the repository, with the rule set pinned in
pyproject.toml, as STYLE.md 12 asks (mypy is tests/unit/test_typing.py)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_ruff_is_clean() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "logbus", "tests", "bench", "examples",
         "pyspark_logbus.py", "setup.py", "tools"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
