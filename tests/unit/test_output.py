"""gateway/output.py where sendfile cannot be used (a transport without its own socket,
as under TLS): file ranges are read and written as bytes, in order."""

from __future__ import annotations

from pathlib import Path

from twisted.internet.testing import StringTransport

from logbus.core.log.partition import FileSpan
from logbus.gateway.output import FileOutput


def test_file_ranges_are_read_in_order_without_a_socket(tmp_path: Path) -> None:
    f = tmp_path / "seg.log"
    f.write_bytes(b"0123456789")
    t = StringTransport()
    out = FileOutput(t, on_error=lambda reason: None)
    assert out.sock is None
    out.write([b"<", FileSpan(str(f), 2, 3), b"|", FileSpan(str(f), 8, 2), b">"])
    out.write([b"next"])
    assert t.value() == b"<234|89>next"


def test_a_missing_or_short_file_is_an_error_not_a_short_answer(tmp_path: Path) -> None:
    f = tmp_path / "seg.log"
    f.write_bytes(b"0123")
    errors: list[str] = []
    for span in (FileSpan(str(f), 2, 5), FileSpan(str(tmp_path / "gone.log"), 0, 1)):
        t = StringTransport()
        out = FileOutput(t, on_error=errors.append)
        out.write([b"head", span])
        out.write([b"after the error: dropped"])
        assert t.value() == b""
    assert len(errors) == 2 and "shorter" in errors[0] and "gone.log" in errors[1]
