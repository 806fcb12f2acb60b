"""Unit tests of bench/ scripts import their modules by name, as the scripts do: bench/
is on ``sys.path`` while a test module uses them (``with bench_on_path(): yield ...`` in
a module-scoped fixture), and off it after."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tests.serverproc import REPO_ROOT

BENCH = str(REPO_ROOT / "bench")


@contextmanager
def bench_on_path() -> Iterator[None]:
    sys.path.insert(0, BENCH)
    try:
        yield
    finally:
        sys.path.remove(BENCH)
