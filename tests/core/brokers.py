"""Start, stop and restart brokers on one data directory, in the test's thread (the core
tier: a real broker on a temp dir, no sockets), with the AMQP gateway's forms as the
server hands them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from logbus.core.broker import Broker
from logbus.core.log import TopicConfig
from logbus.gateway.amqp.model.forms import AMQP_FORMS
from tests.loop import LoopReactor


class Brokers:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.loop = LoopReactor()
        self.current: Broker | None = None

    def start(self, **kw: Any) -> Broker:
        kw.setdefault("topic_defaults", TopicConfig(flush="none"))
        kw.setdefault("forms", AMQP_FORMS)
        b = Broker(self.path, reactor=self.loop, **kw)
        b.start()
        self.current = b
        return b

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None
        while self.loop.run_once():
            pass

    def restart(self, **kw: Any) -> Broker:
        self.stop()
        return self.start(**kw)
