"""The arrows of docs/architecture.md section 1, checked over the source: ``logbus/core``
imports no gateway, no protocol codec (pamqp, kafka-python's protocol classes) and not
the server; ``logbus/retry`` imports nothing but the standard library."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imports(path: Path) -> list[str]:
    """Every module ``path`` imports, relative imports resolved to absolute names."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                out.append(".".join(base + ([node.module] if node.module else [])))
            else:
                out.append(node.module or "")
    return out


def offenders(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for name in imports(path):
            if name.startswith(forbidden):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    return bad


def test_core_imports_no_gateway_and_no_protocol_codec() -> None:
    assert offenders("logbus/core", ("logbus.gateway", "logbus.server", "logbus.cli", "logbus.spark", "pamqp",
                                     "kafka.protocol", "kafka")) == []


def test_retry_policies_import_only_the_standard_library() -> None:
    assert offenders("logbus/retry", ("logbus", "twisted", "rocksdict", "google")) == []


def test_the_check_sees_relative_imports() -> None:
    names = imports(ROOT / "logbus/core/queues/service.py")
    assert "logbus.core.queues.queue" in names and "logbus.retry.policy" in names
