"""Hold a running server at exactly ``n`` free file descriptors.

The kernel hands out the lowest free descriptor number and refuses (EMFILE) one at or
above the soft RLIMIT_NOFILE, so the descriptors a process can still open are the free
numbers below its limit. ``descriptors_free(pid, n)`` reads the server's open
descriptors from /proc/<pid>/fd, lowers its soft limit (``resource.prlimit``) to the
smallest one that leaves ``n`` free numbers below it, and puts the old limits back on
leaving:

    with descriptors_free(server.pid, 2):
        ...   # the server can open two more files or sockets
"""

from __future__ import annotations

import contextlib
import os
import resource
from typing import Iterator


def open_descriptors(pid: int) -> set[int]:
    return {int(name) for name in os.listdir(f"/proc/{pid}/fd")}


def limit_leaving(open_fds: set[int], n: int) -> int:
    """The soft limit under which exactly ``n`` descriptor numbers are free: the
    (n+1)-th free number, so every open descriptor below it frees one when closed."""
    limit = free = 0
    while True:
        if limit not in open_fds:
            if free == n:
                return limit
            free += 1
        limit += 1


@contextlib.contextmanager
def descriptors_free(pid: int, n: int) -> Iterator[int]:
    """The server at ``pid`` with ``n`` descriptors free; yields the soft limit set."""
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    limit = limit_leaving(open_descriptors(pid), n)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, old[1]))
    try:
        yield limit
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
