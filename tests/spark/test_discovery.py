"""``spark.read.format("logbus")`` works without ``register(spark)`` wherever logbus is
installed the way ``make install`` installs it: PySpark looks for top-level modules
named ``pyspark_*`` with ``pkgutil.iter_modules()`` in its Python worker
(pyspark/sql/worker/lookup_data_sources.py), so ``pyspark_logbus`` must be on a
``sys.path`` entry, not only behind an import hook.

The test installs this work tree with the Makefile's own pip command into a throwaway
venv (its dependencies are this environment's, linked in, and never changed), then runs
a Spark job from a directory outside the repository with no PYTHONPATH."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

from logbus.core.log import Record
from tests.serverproc import REPO_ROOT
from tests.spark.conftest import LogWriter

JOB = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
import logbus
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
df = spark.read.format("logbus").option("path", sys.argv[1]).option("subscribe", "t").load()
print("logbus:", logbus.__file__)
print("records:", df.count())
spark.stop()
"""


def makefile_install_command(venv: Path, target: str = "install") -> list[str]:
    """The pip command ``make <target>`` runs for a venv at ``venv``."""
    plan = subprocess.run(["make", "-n", "-s", f"VENV={venv}", target], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=True).stdout
    lines = [shlex.split(line) for line in plan.splitlines() if " -m pip install " in line]
    assert len(lines) == 1, plan
    return lines[0]


def throwaway_venv(where: Path) -> Path:
    """A venv whose site-packages sees this environment's packages (linked, minus logbus)."""
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    deps = where / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        name = entry.name
        if name.startswith(("logbus", "__editable__", "pyspark_logbus")) or name.endswith(".pth"):
            continue
        (deps / name).symlink_to(entry)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "deps.pth").write_text(f"{deps}\n")
    return venv


def test_the_data_source_is_found_outside_the_repository_without_register(tmp_path: Path) -> None:
    w = LogWriter(tmp_path / "data")
    w.topic("t")
    w.append("t", 0, [Record(None, b"v%d" % i, 1000) for i in range(7)])
    w.close()
    venv = throwaway_venv(tmp_path)
    command = makefile_install_command(venv)
    assert makefile_install_command(venv, "install-test")[:-1] == command[:-1]  # the same mode, with extras
    installed = subprocess.run([*command, "--no-deps", "--no-build-isolation"], cwd=REPO_ROOT,
                               capture_output=True, text=True)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "job.py").write_text(JOB)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    done = subprocess.run([str(venv / "bin" / "python"), "job.py", str(w.data_dir)], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    errors = [line for line in done.stderr.splitlines() if "Exception" in line or "Error" in line]
    assert done.returncode == 0, "\n".join(errors[:5]) or done.stderr[-4000:]
    assert f"logbus: {REPO_ROOT / 'logbus' / '__init__.py'}" in done.stdout
    assert "records: 7" in done.stdout
