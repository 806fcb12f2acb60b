"""The committed ``_pb2.py`` files are exactly what ``make proto`` generates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ["logbus/core/envelope.proto", "logbus/core/state.proto"]  # as in the Makefile


def test_makefile_lists_the_same_protos() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert f"PROTOS := {' '.join(PROTOS)}" in makefile, "Makefile PROTOS changed: update this test"


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    # The Makefile's command (run from the repository root), with output to tmp_path.
    cmd = [sys.executable, "-m", "grpc_tools.protoc", "-I.", f"--python_out={tmp_path}", *PROTOS]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"protoc failed: {done.stderr}"
    for proto in PROTOS:
        pb2 = proto.removesuffix(".proto") + "_pb2.py"
        committed = ROOT / pb2
        assert committed.exists(), f"{pb2} is missing: run make proto"
        assert (tmp_path / pb2).read_bytes() == committed.read_bytes(), (
            f"{pb2} is stale: run make proto"
        )
