"""A bounded LRU of open segment file descriptors.

Many partitions must not mean many open files: every segment read or write goes through
this cache, which keeps at most ``max_open`` descriptors, closing the least recently used.
A handle that a pending flush still needs is *pinned* and never closed until unpinned.
Used on the reactor thread only (the flusher thread reads ``Handle.fd`` of pinned handles).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Callable


class Handle:
    __slots__ = ("path", "fd", "writable", "pins")

    def __init__(self, path: str, fd: int, writable: bool) -> None:
        self.path = path
        self.fd = fd
        self.writable = writable
        self.pins = 0


class FileCache:
    def __init__(self, max_open: int = 1024, on_change: Callable[[int], None] | None = None) -> None:
        if max_open < 2:
            raise ValueError("max_open must be at least 2")
        self.max_open = max_open
        self._handles: OrderedDict[str, Handle] = OrderedDict()
        self._on_change = on_change

    def __len__(self) -> int:
        return len(self._handles)

    def get(self, path: str, writable: bool = False) -> Handle:
        h = self._handles.get(path)
        if h is not None and (h.writable or not writable):
            self._handles.move_to_end(path)
            return h
        if h is not None:  # open read-only, now wanted for writing
            self._close(h)
        flags = (os.O_RDWR | os.O_CREAT) if writable else os.O_RDONLY
        h = Handle(path, os.open(path, flags | os.O_CLOEXEC, 0o644), writable)
        self._handles[path] = h
        self._shrink()
        if self._on_change:
            self._on_change(len(self._handles))
        return h

    def _shrink(self) -> None:
        if len(self._handles) <= self.max_open:
            return
        for path in list(self._handles):
            if len(self._handles) <= self.max_open:
                break
            h = self._handles[path]
            if h.pins == 0:
                self._close(h)

    def _close(self, h: Handle) -> None:
        del self._handles[h.path]
        os.close(h.fd)

    def pinned(self, path: str) -> bool:
        h = self._handles.get(path)
        return h is not None and h.pins > 0

    def discard(self, path: str) -> None:
        """Close ``path``'s descriptor if open and unpinned (before delete or rename)."""
        h = self._handles.get(path)
        if h is not None and h.pins == 0:
            self._close(h)
            if self._on_change:
                self._on_change(len(self._handles))

    def close_all(self) -> None:
        for h in list(self._handles.values()):
            self._close(h)
        if self._on_change:
            self._on_change(0)


def fsync_dir(path: str) -> None:
    """Make the entries of directory ``path`` durable (a file created, renamed or removed)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
