"""The arrows of docs/architecture.md section 1, checked over the source: ``logbus/core``
imports no gateway, no protocol codec (pamqp, kafka-python's protocol classes) and not
the server; ``logbus/retry`` imports nothing but the standard library; the Kafka gateway
imports of ``logbus.core`` only the broker facade, ``errors`` and ``types``, and never
names an attribute behind the broker (``broker.log``, ``broker.producers``, ...)."""

from __future__ import annotations

import ast
import re
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


# The Kafka gateway holds the broker and nothing behind it: from logbus.core it imports the
# facade, the error vocabulary and the value types of the facade's methods (core/types.py).
KAFKA_GATEWAY_MAY_IMPORT = ("logbus.core.broker", "logbus.core.errors", "logbus.core.types")
# an attribute of the broker behind its methods: its log, producer registry, group
# coordinator, vhosts, state store, queue services
BEHIND_THE_BROKER = re.compile(r"\bbroker\s*\.\s*(log|_log|producers|groups|vhosts|state|feed|pop|timers|queue_store)\b")


def core_modules(path: Path) -> list[str]:
    """The ``logbus.core`` modules ``path`` imports, sorted; ``from logbus.core import
    errors`` counts as ``logbus.core.errors``."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = [f"{module}.{a.name}" for a in node.names] if module == "logbus.core" else [module]
        else:
            continue
        out.update(n for n in names if n == "logbus.core" or n.startswith("logbus.core."))
    return sorted(out)


def kafka_gateway_files() -> list[Path]:
    return [*sorted((ROOT / "logbus/gateway/kafka").rglob("*.py")), ROOT / "logbus/gateway/output.py"]


def test_kafka_gateway_imports_only_the_facade_from_core() -> None:
    bad = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in kafka_gateway_files()
        for name in core_modules(path)
        if name not in KAFKA_GATEWAY_MAY_IMPORT
    ]
    assert bad == []


def test_kafka_gateway_never_reaches_past_the_broker() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in kafka_gateway_files()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if BEHIND_THE_BROKER.search(line)
    ]
    assert bad == []


def test_the_kafka_checks_see_what_they_look_for() -> None:
    assert core_modules(ROOT / "logbus/gateway/kafka/errors.py") == ["logbus.core.errors", "logbus.core.types"]
    assert "logbus.core.queues.pop" in core_modules(ROOT / "logbus/gateway/http/pop.py")
    lines = ["lm = self.broker.log", "self.handlers.broker.producers.new_producer_id()", "broker.vhosts[name]",
             "self.broker.produce(t, p, data)", "broker.logins"]
    assert [bool(BEHIND_THE_BROKER.search(line)) for line in lines] == [True, True, True, False, False]
