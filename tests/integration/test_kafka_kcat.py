"""kcat (Debian's librdkafka command-line client, installed by `make test`) against the
Kafka gateway: list metadata, produce lines, consume them back."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest

KCAT = shutil.which("kcat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is installed by `make test` (Debian package kcat)")


def kcat(server: Any, *args: str, stdin: bytes | None = None) -> str:
    proc = subprocess.run(
        [KCAT or "kcat", "-b", server.addresses["kafka"], *args],
        input=stdin, capture_output=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode()


def test_kcat_list_produce_consume(logbus_server: Any) -> None:
    server = logbus_server(args=["--default-partitions", "2"])
    lines = [f"key{i}:line {i}" for i in range(50)]
    kcat(server, "-P", "-t", "lines", "-p", "1", "-K", ":", stdin="\n".join(lines).encode() + b"\n")
    listing = kcat(server, "-L", "-t", "lines")
    assert 'topic "lines" with 2 partitions' in listing
    assert "partition 1, leader 0" in listing
    out = kcat(server, "-C", "-t", "lines", "-p", "1", "-o", "beginning", "-e", "-f", "%k=%s@%o\\n")
    assert out.splitlines() == [f"key{i}=line {i}@{i}" for i in range(50)]
