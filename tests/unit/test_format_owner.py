"""``logbus/core/log/format.py`` is the one owner of the on-disk format: it loads
without Twisted or aiokafka, the Spark reader imports nothing else of the broker, and
no other module spells the batch header or index entry layouts."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "logbus"
FORMAT = PACKAGE / "core" / "log" / "format.py"

# the struct formats of the batch header and of the .index / .timeindex entries
LAYOUTS = [
    re.compile(r"qiibIhiqqqhii"),
    re.compile(r"""(['"])[>!]II\1"""),
    re.compile(r"""(['"])[>!]qI\1"""),
]


def test_format_and_spark_reader_load_without_twisted_or_aiokafka() -> None:
    code = (
        "import sys\n"
        "import logbus.core.log.format\n"
        "import logbus.spark.logfiles\n"
        "import logbus.spark.options\n"
        "import logbus.spark.plan\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('twisted', 'aiokafka'))\n"
        "print(','.join(bad))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"loaded: {proc.stdout.strip()}"


def _imports(path: Path) -> set[str]:
    """What ``path`` (a module of the logbus package) imports, as absolute names:
    ``from a.b import c`` gives ``a.b.c``."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.update(f"{module}.{a.name}" for a in node.names)
    return names


def test_spark_imports_only_the_format_from_the_broker() -> None:
    # format.py and manifest.py (the bucket's layout, docs/format.md 10.5; it loads only format)
    allowed = {"logbus.core.log.format", "logbus.core.log.manifest", "logbus.core.envelope_pb2"}
    for path in sorted((PACKAGE / "spark").glob("*.py")):
        if path.name == "warm.py":  # run once at install: it writes a sample log with the log's own code
            continue
        names = _imports(path)
        core = {n for n in names if n.split(".")[:2] == ["logbus", "core"]
                and not any(n == a or n.startswith(a + ".") for a in allowed)}
        assert not core, f"{path.name} imports {sorted(core)}"
        assert not any(n.split(".")[0] == "twisted" for n in names), f"{path.name} imports Twisted"


def test_no_module_but_format_spells_the_layouts() -> None:
    assert all(p.search(FORMAT.read_text()) for p in LAYOUTS)
    copies = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == FORMAT:
            continue
        text = path.read_text()
        copies += [f"{path.relative_to(ROOT)}: {p.pattern}" for p in LAYOUTS if p.search(text)]
    assert not copies, "layout copied outside format.py: " + "; ".join(copies)
