"""The AMQP exceptions the queue model raises (core/routing/router.py, vhost.py, auth.py,
queue_args.py): each carries RabbitMQ's reply code and text, and the gateway maps it to
channel.close or connection.close (gateway/amqp/errors.py). Importable from
``core.routing.router`` too, where they were first defined."""

from __future__ import annotations

from .errors import LogbusError

__all__ = ["AccessRefused", "CommandInvalid", "NotFound", "PreconditionFailed", "ResourceLocked", "RouterError"]


class RouterError(LogbusError):
    """An AMQP exception: ``reply_code`` and RabbitMQ's ``reply_text``; a ``hard`` one
    closes the connection, the others the channel."""

    reply_code = 541
    reply_name = "INTERNAL_ERROR"
    hard = False

    def __init__(self, text: str) -> None:
        self.reply_text = f"{self.reply_name} - {text}"
        super().__init__(self.reply_text)


class NotFound(RouterError):
    code, reply_code, reply_name = "not_found", 404, "NOT_FOUND"


class AccessRefused(RouterError):
    code, reply_code, reply_name = "access_refused", 403, "ACCESS_REFUSED"


class PreconditionFailed(RouterError):
    code, reply_code, reply_name = "precondition_failed", 406, "PRECONDITION_FAILED"


class ResourceLocked(RouterError):
    code, reply_code, reply_name = "resource_locked", 405, "RESOURCE_LOCKED"


class CommandInvalid(RouterError):
    code, reply_code, reply_name, hard = "command_invalid", 503, "COMMAND_INVALID", True
