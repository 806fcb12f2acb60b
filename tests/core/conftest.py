from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from logbus.core.log import LogManager, TopicConfig
from tests.loop import LoopReactor


@pytest.fixture
def loop() -> LoopReactor:
    return LoopReactor()


@pytest.fixture
def open_log(tmp_path: Any, loop: LoopReactor) -> Iterator[Callable[..., LogManager]]:
    """Factory: a LogManager on ``tmp_path`` (reopenable); all closed at teardown."""
    managers: list[LogManager] = []

    def make(**kw: Any) -> LogManager:
        lm = LogManager(tmp_path, loop, **kw)
        managers.append(lm)
        return lm

    yield make
    for lm in managers:
        lm.flusher.stop()
        lm.cache.close_all()
        while loop.run_once():
            pass


def topic_config(**kw: Any) -> TopicConfig:
    kw.setdefault("flush", "none")
    return TopicConfig(**kw)
