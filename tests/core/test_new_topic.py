"""A new topic's directory appears whole or not at all (core/log/new_topic.py), on a temp
dir: a crash's leftover temporary is removed at start, a creation that fails leaves
nothing, and one undone after its rename leaves nothing either."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest

from logbus.core.errors import StorageError
from logbus.core.log import LogManager, Record
from logbus.core.log import new_topic
from logbus.core.log.format import CREATING, LOG_DIR
from tests.core.conftest import topic_config
from tests.loop import LoopReactor

OpenLog = Callable[..., LogManager]


def entries(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_a_leftover_temporary_is_removed_at_start(open_log: OpenLog, tmp_path: Path) -> None:
    open_log().close()
    root = tmp_path / LOG_DIR
    leftover = root / CREATING / "tmpcrashed"  # as a crash in the middle of a creation leaves it
    (leftover / "0").mkdir(parents=True)
    (leftover / "0" / "00000000000000000000.log").write_bytes(b"")
    (leftover / "1").mkdir()
    lm = open_log()
    assert not (root / CREATING).exists()
    lm.open_topic("t", topic_config(partitions=2), create=True)
    assert sorted(os.listdir(root / "t")) == ["0", "1"]


@pytest.mark.parametrize("flush", ["none", "sync"])
def test_a_creation_that_fails_leaves_nothing(open_log: OpenLog, tmp_path: Path, flush: str) -> None:
    lm = open_log()
    root = tmp_path / LOG_DIR
    (root / "t").write_text("a file where the topic's directory goes\n")
    before = entries(root)
    with pytest.raises(StorageError, match="could not be created"):
        lm.open_topic("t", topic_config(partitions=3, flush=flush), create=True)
    assert entries(root) == before
    assert "t" not in lm.topics


def test_a_created_topic_takes_the_place_of_empty_directories(open_log: OpenLog, loop: LoopReactor,
                                                              tmp_path: Path) -> None:
    root = tmp_path / LOG_DIR
    (root / "t" / "0").mkdir(parents=True)
    (root / "t" / "5").mkdir()
    lm = open_log()
    t = lm.open_topic("t", topic_config(partitions=2, flush="sync"), create=True)
    assert sorted(os.listdir(root / "t")) == ["0", "1"]
    loop.wait(t.partition(1).append([Record(None, b"v")]))
    assert [r.value for r in t.partition(1).read_records(0)] == [b"v"]


def test_a_creation_taken_back_after_its_rename_leaves_nothing(tmp_path: Path) -> None:
    root = tmp_path / LOG_DIR
    root.mkdir()
    tdir = root / "t"
    new_topic.build(str(root), str(tdir), 2, sync=True)
    assert entries(root) == {"t", "t/0", "t/0/00000000000000000000.log", "t/1", "t/1/00000000000000000000.log"}
    assert sorted(entries(tdir)) == ["0", "0/00000000000000000000.log", "1", "1/00000000000000000000.log"]
    (tdir / "0" / "00000000000000000000.index").write_bytes(b"")  # what opening the partition may add
    (tdir / "1" / "aborted.txnindex").write_bytes(b"")
    new_topic.take_back(str(root), str(tdir), 2)
    assert entries(root) == set()


def test_what_a_failed_creation_of_an_older_version_left_is_taken(open_log: OpenLog, tmp_path: Path) -> None:
    """Its cleanup needed descriptors it did not have: empty first segments were left, and
    every creation of the name was refused as a directory of foreign files."""
    root = tmp_path / LOG_DIR
    (root / "t" / "0").mkdir(parents=True)
    (root / "t" / "0" / "00000000000000000000.log").write_bytes(b"")
    (root / "t" / "1").mkdir()
    lm = open_log()
    lm.open_topic("t", topic_config(partitions=3), create=True)
    assert sorted(entries(root / "t")) == [f"{i}{f}" for i in range(3)
                                           for f in ("", "/00000000000000000000.log", "/aborted.txnindex")]
