"""The compiled build: mypyc compiles the modules of ``logbus/compiled.py`` (``MODULES``).

Metadata is in pyproject.toml; this file only adds the extensions. ``pip install -e .``
(what ``make run`` and ``make test`` run) builds them in place, beside their ``.py``
files, which stay the source; a wheel carries them too. After the extensions are built,
``logbus/compiled.json`` records each source's SHA-256, so that a process finds out when a
source changed after the build (logbus/compiled.py runs the modules pure then).

Built pure, with no extension, when ``LOGBUS_PURE=1`` is set at build time or when no C
compiler (with Python's headers) works: then the manifest says so and why, and the
extensions of an earlier in-place build are removed. ``make`` prints the outcome in one
line (``python -m logbus.compiled``), because pip shows nothing of a build that worked.
"""

from __future__ import annotations

import hashlib
import json
import os
import runpy
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from glob import glob
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
_spec = runpy.run_path(os.path.join(ROOT, "logbus", "compiled.py"))
MODULES: tuple[str, ...] = _spec["MODULES"]
GROUP: str = _spec["GROUP"]
MANIFEST: str = _spec["MANIFEST"]
PURE_ENV: str = _spec["PURE_ENV"]


def _source(module: str) -> str:
    return os.path.join(*module.split(".")) + ".py"


def _say(line: str) -> None:
    print(f"logbus build: {line}", file=sys.stderr, flush=True)


def _compiler_fault() -> str | None:
    """Why no extension can be compiled here (None: a C compiler and Python.h work)."""
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    include = sysconfig.get_paths()["include"]
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as f:
            f.write("#include <Python.h>\nint probe(void) { return Py_IsInitialized(); }\n")
        try:
            proc = subprocess.run([*cc, "-I", include, "-c", src, "-o", os.path.join(tmp, "probe.o")],
                                  capture_output=True, text=True, timeout=120)  # fmt: skip
        except OSError as e:
            return f"no C compiler ({' '.join(cc)}: {e.strerror})"
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["exit status %d" % proc.returncode])[0]
            return f"the C compiler {' '.join(cc)} cannot build against {include}/Python.h ({first})"
    return None


PURE_ASKED = os.environ.get(PURE_ENV, "") not in ("", "0")


def _pure_reason() -> str | None:
    if PURE_ASKED:
        return f"{PURE_ENV}={os.environ[PURE_ENV]} at build time"
    fault = _compiler_fault()
    if fault is not None:
        return f"{fault}; install gcc and python3-dev (make does on Debian) for the compiled build"
    return None


# each source's hash as it is now, before mypyc reads it: a source edited during the build
# is then found stale, never taken for what was compiled
SOURCES = {m: hashlib.sha256(open(os.path.join(ROOT, _source(m)), "rb").read()).hexdigest()
           for m in MODULES}  # fmt: skip
PURE = _pure_reason()


def _write_manifest(package_dir: str, doc: dict[str, Any]) -> None:
    os.makedirs(package_dir, exist_ok=True)
    path = os.path.join(package_dir, MANIFEST)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def _remove_inplace_build() -> None:
    """The extensions and manifest of an earlier in-place build (a pure build replaces it)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    old = [os.path.join(ROOT, _source(m)[: -len(".py")] + suffix) for m in MODULES]
    old += glob(os.path.join(ROOT, f"{GROUP}__mypyc*{suffix}"))
    old.append(os.path.join(ROOT, "logbus", MANIFEST))
    for path in old:
        if os.path.exists(path):
            os.remove(path)


class BuildPy(build_py):
    """A pure build: the manifest says so (and an in-place build's extensions go)."""

    def run(self) -> None:
        super().run()
        if PURE is None:
            return
        _say(f"pure Python, {PURE}")
        if self.editable_mode:
            _remove_inplace_build()
        doc = {"compiled": False, "why": PURE, "asked": PURE_ASKED}
        _write_manifest(os.path.join(ROOT if self.editable_mode else self.build_lib, "logbus"), doc)


class BuildExt(build_ext):
    """The mypyc extensions, then the manifest with the hash of each source compiled."""

    def run(self) -> None:
        if not self.extensions:  # a pure build (BuildPy's manifest), or the in-place one is current
            return
        inplace = self.inplace or self.editable_mode
        if inplace:  # a failed build must not leave the last build's manifest beside new sources
            stale = os.path.join(ROOT, "logbus", MANIFEST)
            if os.path.exists(stale):
                os.remove(stale)
        super().run()
        from mypy.version import __version__ as mypy_version

        doc = {"compiled": True, "mypy": mypy_version, "python": sys.version.split()[0],
               "sources": SOURCES}  # fmt: skip
        _write_manifest(os.path.join(ROOT if inplace else self.build_lib, "logbus"), doc)
        _say(f"compiled {len(MODULES)} modules with mypyc {mypy_version}")

    def build_extension(self, ext: Any) -> None:
        """One extension, its C files compiled side by side, one per core (mypyc's shared
        library is one C file per module: compiled one after another, it took 5 minutes)."""
        compiler = self.compiler
        one_by_one = compiler.compile
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

        def side_by_side(sources: list[str], *args: Any, **kwargs: Any) -> list[str]:
            with ThreadPoolExecutor(workers) as pool:
                parts = list(pool.map(lambda source: one_by_one([source], *args, **kwargs), sources))
            return [obj for objects in parts for obj in objects]

        if len(ext.sources) > 1 and workers > 1:
            compiler.compile = side_by_side
        try:
            super().build_extension(ext)
        finally:
            compiler.compile = one_by_one


def _inplace_current() -> bool:
    """Whether the in-place build is of these very sources, by this mypy (then ``pip install
    -e .`` of an unchanged tree does not compile for minutes, nor rewrite extensions that
    running processes have mapped)."""
    from mypy.version import __version__ as mypy_version

    if PURE is not None:
        return False
    manifest = _spec["read_manifest"](os.path.join(ROOT, "logbus"))
    compiled, _, _ = _spec["decide"](os.path.join(ROOT, "logbus"), MODULES, {})
    return compiled and manifest is not None and manifest.get("mypy") == mypy_version


# the commands that build extensions, and those of them that build in place: pip runs this
# file for its metadata steps too (egg_info, dist_info), where mypy's analysis of the
# modules (20 s) would be wasted
_BUILDING = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop", "bdist_egg"}
_INPLACE = {"editable_wheel", "develop", "--inplace", "-i"}


def _extensions() -> list[Any]:
    if PURE is not None:
        return []
    args = set(sys.argv[1:])
    if not args & _BUILDING:
        return []
    if args & _INPLACE and _inplace_current():
        _say(f"the {len(MODULES)} compiled modules in place are current (logbus/{MANIFEST}): not built again")
        return []
    from mypyc.build import mypycify

    return mypycify([_source(m) for m in MODULES], opt_level="3", group_name=GROUP, multi_file=True)


setup(ext_modules=_extensions(), cmdclass={"build_py": BuildPy, "build_ext": BuildExt})
