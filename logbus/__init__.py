"""logbus: one broker for AMQP 0-9-1, MQTT and Kafka clients over one partitioned log."""

from . import compiled as _compiled

# which build of the compiled modules this process runs (logbus/compiled.py)
_compiled.install()
