"""Every code example in README.md and docs/*.md runs as pasted, so a doc that stops
working fails CI.

Each fenced block must name its language. ``sh`` blocks run in bash (``set -e``) from
the repository root and ``python`` blocks with this interpreter, both against a fresh
``logbus serve`` on free loopback ports (python blocks in a temporary directory): the standard ports an example names
(``localhost:8080``, ``127.0.0.1:5672``, ...) are rewritten to the ones the server got,
and ``LOGBUS_SERVER`` points the ``logbus topic`` commands at it. A ``logbus serve``
command is started as written (ports made free, a ready file added), with the file's
``toml`` block as ``logbus.toml`` beside it, and must come up and stop cleanly. ``toml``
blocks must load as settings, ``json`` blocks must parse; ``text`` blocks are prose.
The ``make`` set-up commands are what CI itself runs, so they are not run again here.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from logbus.cli import build_parser
from logbus.config import KEYS, load_settings
from tests.serverproc import REPO_ROOT, LogbusServer, logbus_env

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
RUN = {"sh", "python"}
CHECK = {"toml", "json"}
PROSE = {"text"}
STANDARD_PORTS = {"8080": "http", "5672": "amqp", "9092": "kafka", "1883": "mqtt"}
ADDRESS = re.compile(r"\b(localhost|127\.0\.0\.1):(8080|5672|9092|1883)\b")
FENCE = re.compile(r"^```(.*)$")
BLOCK_TIMEOUT = 240.0


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    lang: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(REPO_ROOT)}:{self.line}-{self.lang}"


def blocks(doc: Path) -> list[Block]:
    out: list[Block] = []
    lang: str | None = None
    start, body = 0, []
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        m = FENCE.match(line)
        if m is None:
            if lang is not None:
                body.append(line)
            continue
        if lang is None:
            lang, start, body = m.group(1).strip(), n, []
        else:
            out.append(Block(doc, start, lang, "\n".join(body) + "\n"))
            lang = None
    assert lang is None, f"{doc}: a fence opened at line {start} is never closed"
    return out


ALL = [b for doc in DOCS for b in blocks(doc)]


def test_every_block_names_a_known_language() -> None:
    unknown = [b.id for b in ALL if b.lang not in RUN | CHECK | PROSE]
    assert not unknown, f"fenced blocks need one of {sorted(RUN | CHECK | PROSE)}: {unknown}"


def test_the_readme_lists_every_setting() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    missing = [k for k in KEYS if f"| `{k}` |" not in readme]
    assert not missing, f"README.md's settings table lacks {missing}"


def test_the_readme_links_every_doc() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    missing = [d.name for d in DOCS[1:] if f"docs/{d.name}" not in readme]
    assert not missing, f"README.md's Documentation list lacks {missing}"


# Sentences that described logbus before the thing they say is missing was built: none may
# come back (the decision records and benchmarks are history, and are not checked).
STALE = [
    "when the MQTT gateway is built",
    "has no endpoint yet",
    "the HTTP gateway has no web console",
    "No `queue` commands",
    "Kafka clients are not authenticated yet",
    "editable_mode=compat",
    "which `make install-test` installs",
    "tags and keys that nothing sets yet",
    "and what does not yet:",
    "needs `pip install 'twisted[tls]'`",
    "HTTP auth backends or x509 (EXTERNAL) logins",
    "permissions and `/api/whoami` endpoints only",
]


@pytest.mark.parametrize("sentence", STALE)
def test_no_stale_sentence(sentence: str) -> None:
    found = [str(doc.relative_to(REPO_ROOT)) for doc in DOCS if sentence in " ".join(doc.read_text().split())]
    assert not found, f"{sentence!r} in {found}"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_the_readme_lists_every_command() -> None:
    """Each command of the CLI, with each of its subcommands, in one row of the README's
    table of commands."""
    readme = (REPO_ROOT / "README.md").read_text()
    table = readme[readme.index("Its commands:"):readme.index("Every command but")]
    rows = [row for row in table.splitlines() if row.startswith("| `")]
    missing = []
    for command, parser in _subcommands(build_parser()).items():
        for sub in _subcommands(parser) or [""]:
            if not any(re.search(rf"\b{command}\b", row) and re.search(rf"\b{sub}\b", row) for row in rows):
                missing.append(f"{command} {sub}".strip())
    assert not missing, f"README's table of commands lacks {missing}"


@pytest.mark.parametrize("block", [b for b in ALL if b.lang in CHECK], ids=lambda b: b.id)
def test_config_and_json_blocks_load(block: Block, tmp_path: Path) -> None:
    if block.lang == "json":
        json.loads(block.text)
        return
    path = tmp_path / "logbus.toml"
    path.write_text(block.text)
    load_settings({"config": str(path)}, environ={})


def _commands(block: Block) -> str:
    """The block's shell text without the set-up commands CI itself runs."""
    lines = [ln for ln in block.text.splitlines() if not re.match(r"\s*make (run|spark|test)\b", ln)]
    return "\n".join(lines).strip()


def _rewrite(text: str, server: LogbusServer) -> str:
    def to(m: re.Match[str]) -> str:
        host, port = server.host_port(STANDARD_PORTS[m.group(2)])
        return f"{host}:{port}"

    return ADDRESS.sub(to, text)


def _run(argv: list[str], env: dict[str, str], cwd: Path, what: str) -> None:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=BLOCK_TIMEOUT,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{what} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"


def _serve_as_written(block: Block, command: str, tmp_path: Path) -> None:
    tomls = [b for b in blocks(block.doc) if b.lang == "toml"]
    if tomls:
        (tmp_path / "logbus.toml").write_text(tomls[0].text)
    ready = tmp_path / "ready.json"
    command = re.sub(r"tcp:\d+:", "tcp:0:", command).replace(".venv/bin/logbus", str(REPO_ROOT / ".venv/bin/logbus"))
    cmd = command.split("#", 1)[0].strip() + f" --ready-file {ready}"
    for name in STANDARD_PORTS.values():  # listeners the example leaves to the file or defaults: free ports
        if f"--{name} " not in cmd:
            cmd += f" --{name} tcp:0:interface=127.0.0.1"
    proc = subprocess.Popen(["bash", "-c", f"exec {cmd}"], cwd=tmp_path, env=logbus_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, f"{block.id}: `{cmd}` exited {proc.returncode}:\n{proc.stdout.read()}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, f"{block.id}: `{cmd}` not ready within 30 s"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, f"{block.id}: `{cmd}` stopped with {proc.returncode}:\n{out}"


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in ALL if b.lang in RUN], ids=lambda b: b.id)
def test_examples_run_as_pasted(block: Block, logbus_server: Callable[..., LogbusServer], tmp_path: Path) -> None:
    text = _commands(block) if block.lang == "sh" else block.text
    if not text:
        pytest.skip("only the set-up commands CI runs itself")
    if block.lang == "sh" and re.search(r"\blogbus serve\b", text):
        for command in text.splitlines():
            if re.search(r"\blogbus serve\b", command):
                _serve_as_written(block, command, tmp_path)
        return
    server = logbus_server(anonymous_admin=False)  # as `make run` starts it: anonymous is not guest
    env: dict[str, Any] = logbus_env({"LOGBUS_SERVER": server.http_url, "PYSPARK_PYTHON": sys.executable})
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    script = tmp_path / ("example.sh" if block.lang == "sh" else "example.py")
    script.write_text(_rewrite(text, server))
    if block.lang == "sh":  # from the repository root, where `make` put .venv/bin/logbus
        _run(["bash", "-e", str(script)], env, REPO_ROOT, block.id)
    else:  # in a directory of its own: whatever it writes stays out of the repository
        _run([sys.executable, str(script)], env, tmp_path, block.id)
