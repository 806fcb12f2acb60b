"""A new user's first start: `make run`'s install step says nothing alarming, and the
start-up log says where the web console is and how to log in."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

from logbus.compiled import MODULES, decide
from tests.serverproc import REPO_ROOT

# what `pip install` needs of the repository (pyproject's readme is README.md; setup.py
# builds the compiled modules; tools/ has the Makefile's choice of interpreter)
SOURCES = ("pyproject.toml", "setup.py", "README.md", "Makefile", "pyspark_logbus.py", "logbus", "tools")


def _copy_sources(dest: Path) -> Path:
    """The sources, with the work tree's in-place build (extensions and logbus/compiled.json):
    setup.py finds it current and does not compile again (minutes; the fresh build is the
    one `make test` itself makes before the suite)."""
    dest.mkdir()
    for name in SOURCES:
        src = REPO_ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dest / name)
    for library in REPO_ROOT.glob("logbus__mypyc*"):
        shutil.copy2(library, dest / library.name)
    return dest


def test_make_install_prints_no_setuptools_warning_and_spark_finds_the_module(tmp_path: Path) -> None:
    """The recipe `make run` installs with (read from the Makefile by `make -n`), run into a
    fresh venv on a copy of the repository: no setuptools warning block, and PySpark's way
    of finding data sources (the `pyspark_*` modules on sys.path, pkgutil.iter_modules)
    sees the copy's pyspark_logbus from outside the repository."""
    repo = _copy_sources(tmp_path / "repo")
    current = decide(str(repo / "logbus"), MODULES, {})[0]  # the work tree's build, copied, is current
    built = {p: p.stat().st_mtime_ns for p in [*repo.rglob("*.so"), repo / "logbus" / "compiled.json"]}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(subprocess.run([str(venv / "bin/python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    # the test venv's packages (pip, and logbus's dependencies, so nothing is downloaded but
    # the build backend), after the install's own .pth
    (purelib / "zz-test-packages.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # the venv is the interpreter's the Makefile is given, and says so: it is kept
    (venv / ".interpreter").write_text(os.path.realpath(sys.executable) + "\n")
    plan = subprocess.run(["make", "-n", "-C", str(repo), f"VENV={venv}", f"PYTHON={sys.executable}", "install"],
                          capture_output=True, text=True, check=True).stdout
    steps = [line for line in plan.splitlines() if line.strip() and not line.startswith("make")]
    assert any(" pip install " in step for step in steps), plan
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    printed = ""
    for step in steps:  # each in a shell of its own, as make runs them
        # a deadline, not a speed: the install compiles 57 modules with mypyc when the work
        # tree's build is not current (minutes on a busy machine)
        out = subprocess.run(["sh", "-ec", step], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
        printed += out.stdout + out.stderr
        assert out.returncode == 0, printed
    assert "setuptools" not in printed and "Warning" not in printed and "!!" not in printed, printed
    found = subprocess.run(
        [str(venv / "bin/python"), "-c",
         "import json, pkgutil; print(json.dumps([getattr(m.module_finder, 'path', '')"
         " for m in pkgutil.iter_modules() if m.name == 'pyspark_logbus']))"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(found)[:1] == [str(repo)], found
    if current:  # not compiled again: the same files, and the copy runs them
        assert {p: p.stat().st_mtime_ns for p in built} == built
        status = subprocess.run([str(venv / "bin/python"), "-c", "import logbus.compiled as c; print(c.status())"],
                                cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
        assert status.startswith("(True,"), status


def _start_lines(server: Any) -> list[str]:
    """The start-up log's lines about the web console, once the server says it is ready
    (it says so just after writing the ready file the test harness waits for)."""
    deadline = time.monotonic() + 15
    while "logbus ready" not in server.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    return [line for line in server.log_text().splitlines() if "web console" in line]


def test_start_up_log_names_the_console_url_and_the_first_login(logbus_server: Any) -> None:
    server = logbus_server(listeners={"amqp": "off", "mqtt": "off", "kafka": "off"})
    lines = _start_lines(server)
    assert len(lines) == 1, server.log_tail()
    assert f"web console on {server.http_url}/" in lines[0]
    assert re.search(r"'guest' / 'guest'.*docs/security\.md", lines[0]), lines[0]
    log = server.log_text()
    assert log.index("web console on") < log.index("logbus ready")


def test_start_up_log_does_not_print_a_chosen_password(logbus_server: Any) -> None:
    server = logbus_server(listeners={"amqp": "off", "mqtt": "off", "kafka": "off"},
                           args=["--default-user", "admin"], env={"LOGBUS_DEFAULT_PASS": "s3cret-first-pw"})
    lines = _start_lines(server)
    assert len(lines) == 1 and "'admin'" in lines[0], server.log_tail()
    assert "s3cret-first-pw" not in server.log_text()


def test_no_console_line_without_the_http_listener(logbus_server: Any) -> None:
    server = logbus_server(listeners={"http": "off", "kafka": "off", "amqp": "off"})
    assert not _start_lines(server)
    assert "logbus ready" in server.log_text()


def test_make_spark_installs_the_spark_extra_alone(tmp_path: Path) -> None:
    """`make spark` (docs/spark.md) adds the spark extra to `make run`'s venv, not the
    test toolchain: what it would run, by `make -n`."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    plan = subprocess.run(["make", "-n", "-C", str(REPO_ROOT), f"VENV={venv}", "spark"],
                          capture_output=True, text=True, check=True).stdout
    installs = [line for line in plan.splitlines() if " pip install " in line]
    assert installs and installs[-1].endswith("'.[spark]'"), plan
    assert not [line for line in installs if "test," in line or "[test" in line], plan
