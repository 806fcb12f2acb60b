"""The AMQP room: the queue model as AMQP declares it, over the broker's queue service.

RabbitMQ's vocabulary lives here and nowhere in ``logbus/core``: ``vhost.py`` (a vhost's
exchanges, queues and bindings, publishing and dispatch, dead-lettering with ``x-death``,
the delayed-message exchange), ``queue_args.py`` (``x-`` queue arguments with RabbitMQ's
checks and wording), ``deadletter.py`` (the dead-lettered copy), ``definitions.py`` (the
durable definitions, with their AMQP field tables). The broker opens one ``VHost`` per
stored vhost through the factory the server hands it (``Broker(vhost_model=VHost)``).
"""

from .vhost import VHost

__all__ = ["VHost"]
