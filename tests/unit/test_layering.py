"""The arrows of docs/architecture.md section 1, checked over the source: ``logbus/core``
imports no gateway, no protocol codec (pamqp, kafka-python's protocol classes) and not
the server, and holds no protocol's vocabulary (no ``amqp_``/``mqtt_`` name of its own, no
``x-`` name); ``logbus/retry`` imports nothing but the standard library; no gateway
imports another; every gateway imports of ``logbus.core`` only ``ports`` (the typed ports it
is given: core/ports.py), ``errors`` and ``types`` (the public types the ports take and
return), never the broker, never names an attribute behind a port (``broker.log``,
``broker.state``, a vhost's ``service`` or ``router``, ...) and checks access only through
``Doors.authenticate`` and ``Doors.authorize``. What the gateways hold, object by object,
is checked by tests/core/test_gateway_ports.py."""

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


# A gateway holds ports and nothing behind them: from logbus.core it imports the ports
# (core/ports.py), the error vocabulary and the public types of their methods (core/types.py).
GATEWAY_MAY_IMPORT = ("logbus.core.errors", "logbus.core.types", "logbus.core.ports")
# an attribute behind the broker's methods: its log, producer registry, group coordinator,
# vhosts, state store, queue services, timers, queue journal; a vhost's queue service and
# router; the user store's checks (gateways call Doors.authenticate / authorize)
BEHIND_THE_BROKER = re.compile(
    r"\bbroker\s*\.\s*(log|_log|producers|groups|vhosts|state|feed|pop|timers|queue_store|connections)\b"
    r"|\bvhost\s*\.\s*(service|router|defs|log)\b"
    r"|\baccess\s*\.\s*(check|check_topic|topic_allowed|authenticate|permission|loopback_only|restricts_topics)\b")
GATEWAYS = ("amqp", "mqtt", "kafka", "http")


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


def gateway_files() -> list[Path]:
    return sorted((ROOT / "logbus/gateway").rglob("*.py"))


def test_gateways_import_only_the_facade_from_core() -> None:
    bad = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in gateway_files()
        for name in core_modules(path)
        if name not in GATEWAY_MAY_IMPORT
    ]
    assert bad == []


def test_no_gateway_imports_another() -> None:
    bad = []
    for own in GATEWAYS:
        others = tuple(f"logbus.gateway.{g}" for g in GATEWAYS if g != own)
        bad += offenders(f"logbus/gateway/{own}", others)
    assert bad == []


def test_gateways_never_reach_past_the_broker() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in gateway_files()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if BEHIND_THE_BROKER.search(line)
    ]
    assert bad == []


def protocol_vocabulary(path: Path) -> list[str]:
    """Names ``path`` defines that start with ``amqp_`` or ``mqtt_`` (functions, classes,
    fields, variables, attributes it assigns, parameters) and string constants that are
    ``x-`` names (``"x-match"``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.arg):
            names.append(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.append(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.append(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"x-[a-z-]+", node.value):
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
        out += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names  # type: ignore[attr-defined]
                if n.lower().startswith(("amqp_", "mqtt_"))]
    return out


def test_core_holds_no_protocol_vocabulary() -> None:
    bad = [hit for path in sorted((ROOT / "logbus/core").rglob("*.py")) if not path.name.endswith("_pb2.py")
           for hit in protocol_vocabulary(path)]
    assert bad == []


def test_the_checks_see_what_they_look_for() -> None:
    assert core_modules(ROOT / "logbus/gateway/kafka/errors.py") == ["logbus.core.errors", "logbus.core.types"]
    lines = ["lm = self.broker.log", "self.handlers.broker.producers.new_producer_id()", "broker.vhosts[name]",
             "vhost.service.consume(q, c)", "self.vhost.router.bind()", "self.access.check(u, v, p, k, n)",
             "self.broker.produce(t, p, data)", "broker.logins", "vhost.consume(q, c)", "broker.access.put_user(n)"]
    assert [bool(BEHIND_THE_BROKER.search(line)) for line in lines] == [True] * 6 + [False] * 4
    sample = ROOT / "tests/unit/layering_sample.py"
    assert [hit.split(": ", 1)[1] for hit in protocol_vocabulary(sample)] == [
        "amqp_wire", "mqtt_topic", "'x-match'", "amqp_thing"]
