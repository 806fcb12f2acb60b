"""The compiled build (logbus/compiled.py, setup.py): the modules of ``MODULES`` run
compiled when the in-place build is current, pure under ``LOGBUS_PURE=1``, and pure with
a line naming ``make`` when a source changed after its extension was built.

`make test` runs the suite compiled and the unit and core tiers again with LOGBUS_PURE=1:
the first test here then checks that each run is the build it claims to be."""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from logbus import compiled

ROOT = Path(__file__).resolve().parents[2]
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _compiled_build() -> bool:
    manifest = compiled.read_manifest()
    return manifest is not None and bool(manifest.get("compiled"))


def test_this_run_is_the_build_it_claims() -> None:
    built, why = compiled.status()
    modules = [importlib.import_module(m) for m in compiled.MODULES]
    loaded = {m.__name__: compiled.loaded_compiled(m) for m in modules}
    if compiled.pure_asked():
        assert not built and loaded == dict.fromkeys(compiled.MODULES, False), why
    elif _compiled_build():
        assert built and loaded == dict.fromkeys(compiled.MODULES, True), why
    else:
        # a pure build (LOGBUS_PURE=1 or no C compiler at build time): nothing compiled to run
        assert not built and loaded == dict.fromkeys(compiled.MODULES, False), why
        pytest.skip(f"a pure build: {why}")


def _run(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    environ.update(env, PYTHONPATH=str(cwd))
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


WHICH = ("import json, importlib; from logbus import compiled; "
         "print(json.dumps([compiled.status()[0]] + [compiled.loaded_compiled(importlib.import_module(m)) "
         "for m in compiled.MODULES]))")  # fmt: skip


def test_logbus_pure_at_run_time_loads_every_module_from_its_source() -> None:
    proc = _run(WHICH, ROOT, LOGBUS_PURE="1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [False] + [False] * len(compiled.MODULES)
    assert proc.stderr == ""


def _copy_of_the_build(tmp_path: Path) -> Path:
    """The package, its extensions and mypyc's shared library, in a tree of their own."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "logbus", tree / "logbus", ignore=shutil.ignore_patterns("__pycache__"))
    for lib in ROOT.glob(f"{compiled.GROUP}__mypyc*{SUFFIX}"):
        shutil.copy2(lib, tree / lib.name)
    return tree


@pytest.mark.skipif(not _compiled_build(), reason="no compiled in-place build")
def test_a_source_changed_after_the_build_runs_pure_and_says_so(tmp_path: Path) -> None:
    tree = _copy_of_the_build(tmp_path)
    proc = _run(WHICH, tree)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [True] + [True] * len(compiled.MODULES), "the copy runs compiled"

    changed = compiled.MODULES[-1]
    source = Path(compiled.source_path(changed, str(tree / "logbus")))
    source.write_text(source.read_text() + "\n# edited after the build\n")
    proc = _run(WHICH, tree)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [False] + [False] * len(compiled.MODULES)
    lines = proc.stderr.splitlines()
    relative = source.relative_to(tree)
    assert len(lines) == 1 and str(relative) in lines[0] and "`make`" in lines[0], proc.stderr


def _package(tmp_path: Path, modules: tuple[str, ...]) -> Path:
    """A package directory with the sources and (empty) extension files of ``modules``
    and a manifest of a compiled build of them: what decide() reads, nothing loaded."""
    package = tmp_path / "logbus"
    hashes = {}
    for module in modules:
        source = Path(compiled.source_path(module, str(package)))
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(f"NAME = {module!r}\n")
        source.with_name(source.stem + SUFFIX).write_bytes(b"")
        hashes[module] = hashlib.sha256(source.read_bytes()).hexdigest()
    (tmp_path / f"{compiled.GROUP}__mypyc{SUFFIX}").write_bytes(b"")
    (package / compiled.MANIFEST).write_text(json.dumps({"compiled": True, "mypy": "x", "sources": hashes}))
    return package


MODULES = ("logbus.a.one", "logbus.two")


def test_decide_runs_compiled_only_with_a_current_complete_build(tmp_path: Path) -> None:
    package = _package(tmp_path, MODULES)
    assert compiled.decide(str(package), MODULES, {}) == (True, "compiled by mypyc x", False)
    assert compiled.needs_build(str(package), MODULES, {}) is None
    assert compiled.needs_build(str(package), MODULES, {"LOGBUS_PURE": "1"}) is not None
    assert compiled.needs_build(str(package), environ={}) is not None  # built for another list
    built, why, fault = compiled.decide(str(package), MODULES, {"LOGBUS_PURE": "1"})
    assert (built, fault) == (False, False) and "LOGBUS_PURE=1" in why
    assert compiled.decide(str(package), MODULES, {"LOGBUS_PURE": "0"})[0]

    (package / "a" / f"one{SUFFIX}").unlink()
    built, why, fault = compiled.decide(str(package), MODULES, {})
    assert (built, fault) == (False, True) and "logbus.a.one" in why and "`make`" in why
    assert compiled.needs_build(str(package), MODULES, {}) == why
    (tmp_path / f"{compiled.GROUP}__mypyc{SUFFIX}").unlink()
    built, why, fault = compiled.decide(str(package), MODULES, {})
    assert (built, fault) == (False, True) and f"{compiled.GROUP}__mypyc" in why


def test_decide_finds_a_removed_source(tmp_path: Path) -> None:
    package = _package(tmp_path, MODULES)
    (package / "two.py").unlink()
    built, why, fault = compiled.decide(str(package), MODULES, {})
    assert (built, fault) == (False, True) and "logbus/two.py" in why


def test_decide_finds_a_changed_source(tmp_path: Path) -> None:
    package = _package(tmp_path, MODULES)
    source = package / "two.py"
    source.write_text(source.read_text() + "X = 1\n")
    built, why, fault = compiled.decide(str(package), MODULES, {})
    assert (built, fault) == (False, True)
    assert why.startswith("logbus/two.py changed") and "`make`" in why
    assert compiled.needs_build(str(package), MODULES, {}) == why


def test_decide_without_a_compiled_build_runs_pure_quietly(tmp_path: Path) -> None:
    package = _package(tmp_path, MODULES)
    manifest = package / compiled.MANIFEST
    manifest.write_text(json.dumps({"compiled": False, "why": "no C compiler", "asked": False}))
    assert compiled.decide(str(package), MODULES, {}) == (False, "a pure build: no C compiler", False)
    assert compiled.needs_build(str(package), MODULES, {}) is None  # not tried again: make clean does
    manifest.write_text(json.dumps({"compiled": False, "why": "LOGBUS_PURE=1", "asked": True}))
    assert compiled.needs_build(str(package), MODULES, {}) is not None
    assert compiled.needs_build(str(package), MODULES, {"LOGBUS_PURE": "1"}) is None
    manifest.unlink()
    built, why, fault = compiled.decide(str(package), MODULES, {})
    assert (built, fault) == (False, False) and "no compiled build" in why
    assert compiled.needs_build(str(package), MODULES, {}) is not None


def test_every_package_the_compiled_modules_import_is_in_the_build_requirements() -> None:
    """mypyc reads the compiled modules' imports in pip's isolated build environment, which
    has only ``[build-system] requires``: a package missing there (pamqp, when the AMQP
    gateway was first compiled) fails a fresh clone's install, while an existing ``.venv``
    builds. Packages mypy is told to skip (``ignore_missing_imports``) need not be there."""
    import ast
    import re
    import tomllib

    root = Path(compiled.__file__).resolve().parent.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())
    required = {re.split(r"[<>=!~\[ ]", r)[0].lower().replace("-", "_") for r in project["build-system"]["requires"]}
    skipped = [m.rstrip(".*") for o in project["tool"]["mypy"]["overrides"] if o.get("ignore_missing_imports")
               for m in o["module"]]
    missing = set()
    for name in compiled.MODULES:
        tree = ast.parse((root / (name.replace(".", "/") + ".py")).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found = [node.module]
            else:
                continue
            for module in found:
                top = module.split(".")[0]
                if top in sys.stdlib_module_names or top in ("logbus", "mypy_extensions", "typing_extensions"):
                    continue
                if any(module == s or module.startswith(s + ".") for s in skipped):
                    continue
                if top.lower() not in required:
                    missing.add(f"{name}: {module}")
    assert not missing, sorted(missing)


def test_no_except_name_of_a_compiled_function_is_bound_to_unrelated_types() -> None:
    """mypyc (2.4.1) gives a name bound by ``except A as e`` the type of its first except
    clause in the function: a later ``except B as e`` with a B that is no A raises
    TypeError ("A object expected; got B") in the compiled build, where the pure build
    handles it (a full disk's StorageError under an MQTT SUBSCRIBE closed the connection
    with no DISCONNECT). Each such clause needs a name of its own."""
    import ast

    found = []
    for name in compiled.MODULES:
        module = importlib.import_module(name)
        source = ROOT / (name.replace(".", "/") + ".py")
        for fn in ast.walk(ast.parse(source.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            first: dict[str, tuple[type, ...]] = {}
            handlers = [h for h in ast.walk(fn) if isinstance(h, ast.ExceptHandler) and h.name and h.type]
            for h in sorted(handlers, key=lambda h: h.lineno):
                assert h.name is not None and h.type is not None
                caught = eval(compile(ast.Expression(h.type), str(source), "eval"), vars(module))  # noqa: S307
                types = caught if isinstance(caught, tuple) else (caught,)
                if h.name not in first:
                    first[h.name] = types
                elif not all(issubclass(t, first[h.name]) for t in types):
                    found.append(f"{source.relative_to(ROOT)}:{h.lineno} {fn.name}: "
                                 f"`except {ast.unparse(h.type)} as {h.name}` after "
                                 f"`{' | '.join(t.__name__ for t in first[h.name])}`")
    assert not found, "\n".join(found)
