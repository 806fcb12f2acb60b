"""The HTTP gateway is built from ports (gateway/http/services.py, decision 0050): every
object reachable from the site the server builds (its resources, the console, their
attributes, closures and bound methods, recursively) is gateway-owned or a port's
service, never the Broker, a VHost or any other core object behind the broker."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any, Iterator

from prometheus_client.registry import CollectorRegistry

from logbus.config import Settings
from logbus.core.admin import AdminService
from logbus.core.broker import Broker
from logbus.core.metrics import Metrics
from logbus.core.pop_service import PopService
from logbus.server import _http
from tests.loop import LoopReactor

# ports.Doors and ports.Topics: the broker serves them until their own services land
STILL_THE_BROKER = ("doors", "topics")
# where a walk stops: a port's service, the Metrics object and its registries
SERVICES = (AdminService, PopService, Metrics, CollectorRegistry)
LEAVES = (str, bytes, int, float, bool, type(None), type, types.ModuleType, types.BuiltinFunctionType)


def attributes(obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        yield from ((repr(k), v) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        yield from ((f"[{i}]", v) for i, v in enumerate(obj))
    elif isinstance(obj, types.MethodType):
        yield "__self__", obj.__self__
    elif isinstance(obj, types.FunctionType):
        for i, cell in enumerate(obj.__closure__ or ()):
            yield f"<closure {i}>", cell.cell_contents
    else:
        yield from getattr(obj, "__dict__", {}).items()
        for name in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, name):
                yield name, getattr(obj, name)


def behind_the_ports(root: Any, reactor: Any) -> list[str]:
    """Paths from ``root`` to a Broker (but in a slot of STILL_THE_BROKER) or any other
    object of logbus.core that is no port's service."""
    bad, seen, stack = [], {id(reactor)}, [(root, "site")]
    while stack:
        obj, path = stack.pop()
        if isinstance(obj, Broker):  # wherever it is held (so: before the seen check)
            if path.rsplit(".", 1)[-1] not in STILL_THE_BROKER:
                bad.append(f"{path}: the Broker")
            continue
        if isinstance(obj, LEAVES) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, SERVICES):
            continue
        if type(obj).__module__.startswith("logbus.core"):
            bad.append(f"{path}: {type(obj).__module__}.{type(obj).__name__}")
            continue
        stack += [(value, f"{path}.{name}") for name, value in attributes(obj)]
    return sorted(bad)


def test_the_http_site_holds_ports_not_the_broker(tmp_path: Path) -> None:
    loop = LoopReactor()
    broker = Broker(tmp_path, reactor=loop)
    broker.start()
    try:
        broker.admin.create_vhost("other")  # a second open VHost to find, if anything held them
        site = _http(broker, Settings(data_dir=tmp_path), loop)
        assert behind_the_ports(site, loop) == []
        # the walk finds what it looks for
        site.resource.children[b"api"].children[b"overview"].vhosts = broker.vhosts  # type: ignore[attr-defined]
        site.resource.held = [broker]  # type: ignore[attr-defined]
        assert behind_the_ports(site, loop) == [
            "site.resource.children.b'api'.children.b'overview'.vhosts.'/': logbus.core.vhost.VHost",
            "site.resource.children.b'api'.children.b'overview'.vhosts.'other': logbus.core.vhost.VHost",
            "site.resource.held.[0]: the Broker"]
    finally:
        loop.wait(broker.stop())
