#!/usr/bin/env python3
"""The interpreter `make` builds .venv with: an optimised CPython >= 3.11 where one is installed.

Prints one line, tab-separated: the interpreter's path, then why it was chosen (the
Makefile says it). Optimised means built with profile-guided optimisation and link-time
optimisation (the interpreter loop runs 1.1-1.9x faster: decision 0043):

- a source build shows it in sysconfig's CONFIG_ARGS: `--enable-optimizations --with-lto`;
- Debian's (and Ubuntu's) python3.X packages are built with PGO and LTO by the package's own
  rules on amd64 and arm64, which CONFIG_ARGS does not show (Debian keeps the LTO flags out of
  _sysconfigdata on purpose, #934771); the sign is the interpreter's file belonging to the
  package python3.X-minimal (`dpkg -S`).

Candidates, in this order, each found along PATH then in /usr/local/bin and /usr/bin:
python3.11, python3.12, python3.13, python3.14, python3. The first optimised one wins;
with none, the first CPython >= 3.11 (as before: `python3.11`, else `python3`).

    python3 tools/choose_python.py            # the choice
    python3 tools/choose_python.py --all      # every candidate and what was found
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

NAMES = ("python3.11", "python3.12", "python3.13", "python3.14", "python3")
DEBIAN_PGO_LTO_ARCHES = ("amd64", "arm64")
PROBE = (
    "import json, os, sys, sysconfig; print(json.dumps({"
    "'impl': sys.implementation.name, 'version': list(sys.version_info[:3]),"
    "'executable': os.path.realpath(getattr(sys, '_base_executable', sys.executable)),"
    "'config_args': sysconfig.get_config_var('CONFIG_ARGS') or ''}))"
)


def candidates() -> list[str]:
    dirs = os.environ.get("PATH", "").split(os.pathsep) + ["/usr/local/bin", "/usr/bin"]
    found: list[str] = []
    for name in NAMES:
        for d in dirs:
            path = shutil.which(name, path=d) if d else None
            if path and path not in found:
                found.append(path)
    return found


def probe(path: str) -> dict | None:
    try:
        out = subprocess.run([path, "-c", PROBE], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    try:
        return json.loads(out.stdout)
    except ValueError:
        return None


def debian_package(executable: str) -> str | None:
    """`python3.X-minimal (version)` when Debian's package owns ``executable``."""
    if not shutil.which("dpkg"):
        return None
    try:
        owner = subprocess.run(["dpkg", "-S", executable], capture_output=True, text=True, timeout=20)
        arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if owner.returncode != 0 or arch.stdout.strip() not in DEBIAN_PGO_LTO_ARCHES:
        return None
    package = owner.stdout.split(":", 1)[0].strip()
    if not (package.startswith("python3.") and package.endswith("-minimal")):
        return None
    version = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package],
                             capture_output=True, text=True, timeout=20).stdout.strip()  # fmt: skip
    return f"{package} {version}".strip()


def optimised(info: dict) -> str | None:
    """How ``info``'s interpreter is known to be built with PGO and LTO, or None."""
    args = info["config_args"]
    if "--enable-optimizations" in args and "--with-lto" in args:
        return "built with --enable-optimizations --with-lto (its CONFIG_ARGS)"
    package = debian_package(info["executable"])
    if package is not None:
        return f"Debian's {package}, built with PGO and LTO by the package's rules"
    return None


def version(info: dict) -> str:
    return f"CPython {'.'.join(map(str, info['version']))}"


def choose() -> tuple[str, str] | None:
    first: dict | None = None
    probed: set[str] = set()
    for path in candidates():
        real = os.path.realpath(path)
        if real in probed:
            continue
        probed.add(real)
        info = probe(path)
        if info is None or info["impl"] != "cpython" or tuple(info["version"][:2]) < (3, 11):
            continue
        if info["executable"] in probed and info["executable"] != real:
            continue  # a shim or link to an interpreter already judged
        probed.add(info["executable"])
        if first is None:
            first = info
        how = optimised(info)
        if how is not None:
            why = f"{version(info)}, optimised: {how}"
            if info is not first:
                why += f"; {first['executable']} ({version(first)}), first on PATH, is not"
            return info["executable"], why
    if first is None:
        return None
    return first["executable"], (f"{version(first)}, the first CPython >= 3.11 found; none is "
                                 "known to be optimised (PGO and LTO): docs/development.md")  # fmt: skip


def main() -> int:
    if sys.argv[1:] == ["--all"]:
        for path in candidates():
            info = probe(path)
            print(path, info and info["executable"], info and version(info), info and optimised(info))
        return 0
    chosen = choose()
    if chosen is None:
        print("no CPython >= 3.11 found on PATH", file=sys.stderr)
        return 1
    print("\t".join(chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
