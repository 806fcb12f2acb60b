"""Message filters: tag expressions (``tags``) and SQL92 selectors over message
properties (``selector``), each parsed and checked once, then cheap to evaluate. Used by
the queue service at routing time, by every gateway to read what a client asks for, and
by Spark's reader; imports no gateway, no Twisted and no broker."""

from .errors import FilterError
from .selector import Selector
from .tags import TagFilter

__all__ = ["FilterError", "Selector", "TagFilter"]
