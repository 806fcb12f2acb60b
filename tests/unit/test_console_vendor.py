"""The web console's vendored JavaScript is what its VERSIONS file says: every file listed
with its SHA-256 (as fetched by `make console-vendor` from the npm registry), each
package with its licence, and nothing in vendor/ that is not listed."""

from __future__ import annotations

import hashlib
from pathlib import Path

VENDOR = Path(__file__).resolve().parents[2] / "logbus/gateway/http/console/static/vendor"


def listed() -> dict[str, str]:
    rows = [line.split() for line in (VENDOR / "VERSIONS").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    return {r[0]: r[1] for r in rows if len(r) == 2}


def test_every_vendored_file_matches_its_recorded_hash() -> None:
    files = listed()
    assert set(files) == {p.relative_to(VENDOR).as_posix() for p in VENDOR.rglob("*")
                          if p.is_file() and p.name != "VERSIONS"}
    for name, digest in files.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name


def test_each_package_comes_with_its_licence() -> None:
    assert {n.split("/")[0] for n in listed() if n.endswith("/LICENSE")} == {"htmx", "uplot"}
