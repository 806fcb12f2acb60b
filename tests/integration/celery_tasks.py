"""The Celery app of tests/integration/test_amqp_celery.py, imported both by the test
(to send tasks) and by the worker it starts (``celery -A tests.integration.celery_tasks
worker``). The broker and result backend come from the environment, so one module
serves any broker the test starts."""

from __future__ import annotations

import os

from celery import Celery  # type: ignore[import-untyped]

BROKER_ENV = "LOGBUS_TEST_CELERY_BROKER"
BACKEND_ENV = "LOGBUS_TEST_CELERY_BACKEND"

app = Celery("logbus_amqp_tests")
app.conf.update(
    broker_url=os.environ.get(BROKER_ENV, "amqp://guest:guest@127.0.0.1:5672//"),
    result_backend=os.environ.get(BACKEND_ENV) or None,
    task_ignore_result=True,  # a task that returns something opts back in
    broker_connection_retry_on_startup=True,
    broker_connection_timeout=10,
    worker_hijack_root_logger=False,
    # ack after running: the broker sees a basic.ack per task. (Not with
    # worker_prefetch_multiplier=1: with the solo pool that pair stalls the worker for
    # 10 s after a few tasks, against RabbitMQ too.)
    task_acks_late=True,
)


@app.task(name="logbus_tests.append_line")
def append_line(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


@app.task(name="logbus_tests.add", ignore_result=False)
def add(x: int, y: int) -> int:
    return x + y
