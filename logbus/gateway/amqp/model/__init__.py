"""The AMQP room: AMQP's words for the neutral vhost model (``core/vhost.py``).

RabbitMQ's vocabulary lives here and nowhere in ``logbus/core``: ``queue_args.py``
(``x-`` queue arguments with RabbitMQ's checks and wording, to neutral
``QueueSettings``), ``translate.py`` (the delayed-message exchange type, ``x-delay``,
binding filters), ``forms.py`` (typed AMQP headers, dead letters with ``x-death``: the
``Forms`` the server hands the broker), ``upgrade.py`` (definitions stored with AMQP
field tables, rewritten in the neutral form at start).
"""
