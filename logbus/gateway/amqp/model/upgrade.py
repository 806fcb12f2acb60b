"""Definitions stored before the neutral form, read in AMQP's words (decision 0021).

Before, a durable exchange, queue or binding was stored with the AMQP field table the
client sent (``legacy_arguments``) and read back through the AMQP gateway's model. The
neutral form (``core/definitions.py``) keeps typed values, a queue's settings and a
binding's filter, so the broker reads it with no protocol. ``AMQP_LEGACY`` is how the
broker's ``definitions.upgrade`` reads the old records: the field table decoded, then
the translations the AMQP gateway applies to a declare today (``x-`` queue arguments to
settings, ``x-delayed-message`` to a delayed exchange of its ``x-delayed-type``,
``x-filter-tag``/``x-filter-sql`` to a binding's filter). The server hands it to the
broker, which runs the upgrade at start, before the vhosts are opened.
"""

from __future__ import annotations

import logging
from typing import Any

from pamqp import decode

from ....core.errors import LegacyDefinitions, LogbusError
from ....core.types import HeaderMatch, QueueSettings, freeze_arguments
from ....filters.message_filter import FilterSpec
from .queue_args import parse_queue_arguments
from .translate import binding_filter, exchange_kind, header_match

log = logging.getLogger(__name__)


def _table(raw: bytes) -> dict[str, Any]:
    """A stored AMQP field table; LegacyDefinitions when it does not decode (the broker
    then refuses to start, changing nothing, rather than lose the definition)."""
    if not raw:
        return {}
    try:
        return dict(decode.field_table(raw)[1])
    except Exception as e:  # pamqp raises several kinds on bad bytes
        raise LegacyDefinitions(f"stored AMQP arguments do not decode ({type(e).__name__}: {e}): "
                                f"{raw[:64]!r}") from None


class AmqpLegacy:
    """``core.definitions.LegacyTranslation`` for AMQP field tables."""

    def exchange(self, kind: str, arguments: bytes) -> tuple[str, bool, dict[str, Any]]:
        args = _table(arguments)
        routing, delayed = exchange_kind(kind, args)
        return routing, delayed, args

    def queue(self, name: str, vhost: str, arguments: bytes) -> tuple[QueueSettings, dict[str, Any]]:
        args = _table(arguments)
        try:
            return parse_queue_arguments(name, vhost, args).settings(), args
        except LogbusError as e:  # accepted when it was declared: not expected
            log.warning("queue %r in vhost %r: stored arguments refused (%s): default settings", name, vhost, e)
            return QueueSettings(), args

    def binding(self, arguments: bytes, to_queue: bool,
                headers: bool) -> tuple[dict[str, Any], FilterSpec | None, HeaderMatch | None]:
        args, spec = binding_filter(_table(arguments), to_queue)
        return args, spec, header_match(freeze_arguments(args)) if headers else None


AMQP_LEGACY = AmqpLegacy()
