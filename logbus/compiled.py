"""The modules mypyc compiles, and which build of them this process runs.

``MODULES`` is the one list of compiled modules: setup.py compiles them (one mypyc group,
its shared library ``logbus__mypyc`` beside the package), and this module decides at the
import of ``logbus`` whether the process runs them compiled or from their ``.py`` files,
which stay the source. A module joins the list only when a measurement shows a gain
(docs/benchmarks.md, "mypyc"; decision 0044).

The build writes ``logbus/compiled.json`` (the manifest) after it built the extensions: a
SHA-256 of each compiled module's source as it was compiled. The process runs every
module of the list compiled only when the manifest says so, each source still has its
hash and each extension is there for this interpreter; otherwise it runs all of them pure
(mypyc calls between modules of one group bypass Python, so the group is never mixed):

- ``LOGBUS_PURE=1`` at run time: pure, silently (asked for);
- no manifest, or one from a pure build (``LOGBUS_PURE=1`` or no C compiler at build
  time): pure, silently (nothing compiled to run);
- a source changed since its extension was built, or an extension missing: pure, with one
  line on stderr naming the module and ``make`` (``make run`` and ``make test`` rebuild).

Pure means a finder at the head of ``sys.meta_path`` that loads these modules from their
``.py``: CPython's own finder would prefer the extension beside it. ``status()`` says
which build runs and why (tests/unit/test_compiled.py, ``python -m logbus.compiled``).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from types import ModuleType
from typing import Sequence

# the per-message modules, here for the gains measured with them (decisions 0044, 0053):
# the MQTT codec and the topic trie; the session machine and what it calls per message,
# the pipeline, the queue model, the log's append path, the tick and Message; then the
# key indexer, the flusher, the batch format, the state store, timers, routing, metrics.
# A mixin is compiled with its subclass (log.failures, queues.views).
MODULES: tuple[str, ...] = (
    "logbus.gateway.mqtt.decoder",
    "logbus.gateway.mqtt.encoder",
    "logbus.gateway.mqtt.wire",
    "logbus.gateway.mqtt.properties",
    "logbus.gateway.mqtt.topics",
    "logbus.gateway.mqtt.packets",
    "logbus.core.routing.topic_trie",
    "logbus.gateway.mqtt.machine",
    "logbus.gateway.mqtt.inbound",
    "logbus.gateway.mqtt.outbound",
    "logbus.gateway.mqtt.delivery",
    "logbus.gateway.mqtt.publishing",
    "logbus.gateway.mqtt.subscriptions",
    "logbus.gateway.mqtt.turn",
    "logbus.gateway.mqtt.mapping",
    "logbus.gateway.mqtt.protocol",
    "logbus.gateway.mqtt.room",
    "logbus.gateway.mqtt.session",
    "logbus.core.queues.pins",
    "logbus.gateway.output",
    "logbus.reactor",
    "logbus.core.pipeline",
    "logbus.core.queues.service",
    "logbus.core.queues.views",
    "logbus.core.queues.queue",
    "logbus.core.queues.ready",
    "logbus.core.queues.entry",
    "logbus.core.queues.journal",
    "logbus.core.log.failures",
    "logbus.core.log.partition",
    "logbus.core.log.segment",
    "logbus.core.log.manager",
    "logbus.core.tick",
    "logbus.core.message",
    "logbus.core.log.keyindexer",
    "logbus.core.log.flusher",
    "logbus.core.log.batch",
    "logbus.core.log.format",
    "logbus.core.log.filecache",
    "logbus.core.state",
    "logbus.core.queues.msgstore",
    "logbus.core.queues.timers",
    "logbus.core.routing.router",
    "logbus.core.routing.matchers",
    "logbus.core.routing.filtered",
    "logbus.core.metrics",
    "logbus.gateway.amqp.fastpath",
    "logbus.gateway.amqp.codec",
    "logbus.gateway.amqp.mapping",
    "logbus.gateway.amqp.confirms",
    "logbus.gateway.amqp.handshake",
    "logbus.gateway.amqp.connection",
    "logbus.gateway.amqp.declarations",
    "logbus.gateway.amqp.consumers",
    "logbus.gateway.amqp.publishing",
    "logbus.gateway.amqp.channel",
    "logbus.gateway.amqp.session",
)
GROUP = "logbus"  # mypyc's shared library: logbus__mypyc<EXT_SUFFIX> beside the package
MANIFEST = "compiled.json"
PURE_ENV = "LOGBUS_PURE"

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def source_path(module: str, package_dir: str = PACKAGE_DIR) -> str:
    """The ``.py`` of ``module`` (a name in ``logbus``)."""
    return os.path.join(package_dir, *module.split(".")[1:]) + ".py"


def digest(path: str) -> str | None:
    """The SHA-256 of a file's bytes (None: no such file)."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def pure_asked(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    return environ.get(PURE_ENV, "") not in ("", "0")


def read_manifest(package_dir: str = PACKAGE_DIR) -> dict[str, object] | None:
    try:
        with open(os.path.join(package_dir, MANIFEST), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def extension_path(module: str, package_dir: str = PACKAGE_DIR) -> str | None:
    """The extension of ``module`` this interpreter would load, if there is one."""
    base = source_path(module, package_dir)[: -len(".py")]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(base + suffix):
            return base + suffix
    return None


def group_library(package_dir: str = PACKAGE_DIR) -> str | None:
    """mypyc's shared library of the group, beside the package, if there is one."""
    base = os.path.join(os.path.dirname(package_dir), f"{GROUP}__mypyc")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(base + suffix):
            return base + suffix
    return None


def decide(package_dir: str = PACKAGE_DIR, modules: Sequence[str] = MODULES,
           environ: dict[str, str] | os._Environ[str] = os.environ) -> tuple[bool, str, bool]:  # fmt: skip
    """(compiled, why, fault): whether to run ``modules`` compiled, the reason in words, and
    whether the reason is a fault to report (a stale or incomplete build)."""
    if pure_asked(environ):
        return False, f"{PURE_ENV}={environ[PURE_ENV]} at run time", False
    manifest = read_manifest(package_dir)
    if manifest is None:
        return False, "no compiled build (no logbus/compiled.json)", False
    if not manifest.get("compiled"):
        return False, f"a pure build: {manifest.get('why', 'no reason recorded')}", False
    hashes = manifest.get("sources")
    if not isinstance(hashes, dict) or set(hashes) != set(modules):
        return False, "the compiled build is of another list of modules: run `make` to rebuild", True
    changed = [m for m in modules if digest(source_path(m, package_dir)) != hashes[m]]
    if changed:
        names = ", ".join(os.path.relpath(source_path(m, package_dir), os.path.dirname(package_dir))
                          for m in changed)  # fmt: skip
        return False, f"{names} changed since the extensions were built: run `make` to rebuild", True
    missing = [m for m in modules if extension_path(m, package_dir) is None]
    if group_library(package_dir) is None:
        missing.append(f"{GROUP}__mypyc")
    if missing:
        return False, (f"no extension of {', '.join(missing)} for this interpreter "
                       f"({sys.implementation.cache_tag}): run `make` to rebuild"), True  # fmt: skip
    return True, f"compiled by mypyc {manifest.get('mypy', '?')}", False


class PureFinder:
    """Loads the listed modules from their ``.py`` although an extension lies beside it (a
    meta path finder; not importlib.abc's class, whose import costs 50-100 ms here)."""

    def __init__(self, modules: Sequence[str], package_dir: str) -> None:
        self.modules = frozenset(modules)
        self.package_dir = package_dir

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:  # fmt: skip
        if fullname not in self.modules:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname, self.package_dir))


_status: tuple[bool, str] | None = None


def install() -> None:
    """Decide the build this process runs (once, at the import of ``logbus``)."""
    global _status
    if _status is not None:
        return
    compiled, why, fault = decide()
    _status = compiled, why
    if not compiled:
        sys.meta_path.insert(0, PureFinder(MODULES, PACKAGE_DIR))
        if fault:
            sys.stderr.write(f"logbus: running the compiled modules pure (slower): {why}\n")


def status() -> tuple[bool, str]:
    """(compiled, why) for this process."""
    install()
    assert _status is not None
    return _status


def loaded_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from an extension."""
    spec = module.__spec__
    return spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)


def needs_build(package_dir: str = PACKAGE_DIR, modules: Sequence[str] = MODULES,
                environ: dict[str, str] | os._Environ[str] = os.environ) -> str | None:  # fmt: skip
    """Why the in-place build is to be made again (None: it is current). A pure build
    for want of a C compiler is not tried again (``make clean`` does)."""
    manifest = read_manifest(package_dir)
    if manifest is None:
        return f"no build yet (no logbus/{MANIFEST})"
    if pure_asked(environ):
        return f"{PURE_ENV}={environ[PURE_ENV]} asks for a pure build" if manifest.get("compiled") else None
    if not manifest.get("compiled"):
        return f"the last build was pure because {PURE_ENV} was set" if manifest.get("asked") else None
    compiled, why, fault = decide(package_dir, modules, environ)
    return why if fault else None


def describe(compiled: bool, why: str) -> str:
    return f"logbus build: {'compiled' if compiled else 'pure Python'} ({len(MODULES)} modules, logbus/compiled.py): {why}"


if __name__ == "__main__":
    # `python -P logbus/compiled.py [--needs-build]`, as a file (logbus is not imported):
    # the Makefile asks whether to build again (exit 0: yes, and why), or which build a
    # process would run
    if sys.argv[1:] == ["--needs-build"]:
        reason = needs_build()
        if reason is not None:
            print(f"building the compiled modules again: {reason}")
        sys.exit(0 if reason is not None else 1)
    print(describe(*decide()[:2]))
