"""Shared fixtures.

``logbus_server`` starts real ``logbus serve`` processes (see tests/serverproc.py):

    def test_x(logbus_server):
        server = logbus_server()                           # all listeners on tcp:0, loopback
        server = logbus_server(listeners={"amqp": "off"}, args=["--default-partitions", "3"],
                               env={"LOGBUS_LOG_LEVEL": "debug"})
        server.http_url; server.ports["http"]; server.data_dir; server.pid
        server.stop(); server.kill(); server.restart()

Every server a test started is stopped (SIGTERM, then SIGKILL) when the test ends. For one
server shared by a module, use ``ServerFactory`` in a module-scoped fixture the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Generator, Iterator

import pytest
from hypothesis import settings

from tests.serverproc import LogbusServer, ServerFactory

# No Hypothesis deadline: a test asserts behaviour, never a time (STYLE.md), and one slow
# example on a loaded 2-core CI machine is not a failure.
settings.register_profile("logbus", deadline=None)
settings.load_profile("logbus")


# Tests that share one costly thing per worker run on one worker, as one unit of work
# (pytest-xdist, `make test` runs `-n auto --dist loadscope`): the Spark tests share a JVM
# and a SparkSession, the browser tests a Chromium and a server. Every other module is a
# unit of its own (its module-scoped server is started once). Units are handed out
# longest first, so the run does not end waiting on one long unit started last.
SHARED_UNITS = ("tests/spark/", "tests/browser/")
LONG_FIRST = ("tests/spark/", "tests/browser/", "tests/fault/", "tests/integration/", "tests/core/")


@pytest.hookimpl(optionalhook=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``pure_only`` tests put a fault or a mutant in by replacing a method, which a class
    compiled by mypyc does not allow: they run in `make test`'s pure pass (tests/unit and
    tests/core with LOGBUS_PURE=1), and are skipped when the compiled build runs."""
    from logbus.compiled import status

    if not status()[0]:
        return
    skip = pytest.mark.skip(reason="replaces a compiled method: runs in the pure pass (LOGBUS_PURE=1)")
    for item in items:
        if item.get_closest_marker("pure_only") is not None:
            item.add_marker(skip)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            shared = next((unit for unit in SHARED_UNITS if nodeid.startswith(unit)), None)
            return shared or nodeid.split("::", 1)[0]

        def _assign_work_unit(self, node: Any) -> None:
            if not getattr(self, "_ordered", False):
                self._ordered = True
                rank = {scope: (_rank(scope), -len(ids)) for scope, ids in self.workqueue.items()}
                for scope in sorted(self.workqueue, key=rank.__getitem__):
                    self.workqueue.move_to_end(scope)
            super()._assign_work_unit(node)

    return Units(config, log)


def _rank(scope: str) -> int:
    return next((i for i, prefix in enumerate(LONG_FIRST) if scope.startswith(prefix)), len(LONG_FIRST))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A failed test's report carries the log of every server still running for it (its
    own and its module's): a flaky failure is diagnosed from the CI output, not re-run."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for factory in ServerFactory.live:
            for server in factory.servers:
                report.sections.append((f"logbus serve log: {server.workdir}", server.log_tail()))


@pytest.fixture(autouse=True)
def _close_mqtt_clients() -> Iterator[None]:
    """MQTT test clients a failed test left open are closed when it ends (only if the
    MQTT test helpers were imported at all); those of wider-scoped fixtures stay."""
    helpers = sys.modules.get("tests.integration.mqtt_clients")
    before = helpers.open_clients() if helpers is not None else set()
    yield
    helpers = sys.modules.get("tests.integration.mqtt_clients")
    if helpers is not None:
        helpers.close_leftovers(before)


@pytest.fixture
def logbus_server(tmp_path: Path) -> Iterator[Any]:
    factory = ServerFactory(tmp_path)

    def start(**kwargs: Any) -> LogbusServer:
        return factory.start(**kwargs)

    try:
        yield start
    finally:
        factory.cleanup()
