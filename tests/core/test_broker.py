"""The broker facade on a temp dir: topic admin through the state store and the log."""

from __future__ import annotations

from typing import Any

import pytest

from logbus.core.broker import Broker
from logbus.core.errors import InvalidConfig, UnknownTopic
from tests.loop import LoopReactor


def test_grow_topic_is_recorded_and_survives_restart(tmp_path: Any) -> None:
    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop)
    b.start()
    b.create_topic("t", {"partitions": 2, "flush": "none"})
    assert len(b.grow_topic("t", 5).partitions) == 5
    with pytest.raises(InvalidConfig):
        b.grow_topic("t", 3)
    with pytest.raises(UnknownTopic):
        b.grow_topic("nope", 3)
    b.stop()
    b2 = Broker(tmp_path, reactor=loop)
    b2.start()
    info = b2.describe_topic("t")
    assert len(info.partitions) == 5 and info.config["flush"] == "none"
    b2.stop()
