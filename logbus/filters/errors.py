"""The one error type of ``logbus.filters``."""

from __future__ import annotations


class FilterError(ValueError):
    """A tag expression or selector that cannot be used: what is wrong, and where
    (``position``, the 0-based index in the text)."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} (at position {position})")
        self.reason = message
        self.position = position
