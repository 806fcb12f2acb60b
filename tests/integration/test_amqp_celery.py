"""Celery over the AMQP gateway: a real worker process (solo pool) consumes tasks that a
Celery app in the test sends through kombu/py-amqp, with late acks and the rpc://
result backend (replies through a queue of the sender's)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery  # type: ignore[import-untyped]

from tests.integration import amqp_target
from tests.integration.amqp_target import AmqpBroker, unique, wait_until
from tests.integration.celery_tasks import BACKEND_ENV, BROKER_ENV
from tests.serverproc import REPO_ROOT

amqp_broker = amqp_target.amqp_broker  # the fixture, by the name tests ask for

TASK_COUNT = 5


def celery_url(broker: AmqpBroker) -> str:
    return f"amqp://guest:guest@{broker.host}:{broker.port}//"  # "//": the vhost "/"


class Worker:
    """``celery worker`` in its own process (and session), stopped by its pid."""

    def __init__(self, broker: AmqpBroker, queue: str, log_path: Path) -> None:
        self.log_path = log_path
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOGBUS_", "CELERY_"))}
        env.update({
            BROKER_ENV: celery_url(broker),
            BACKEND_ENV: "rpc://",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
        })
        with log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "tests.integration.celery_tasks", "worker",
                 # not --without-heartbeat: with no event-heartbeat timer the worker's
                 # loop sleeps up to 10 s between looks at its signal flags, so every
                 # stop took 10 s (RabbitMQ or not); the heartbeat events themselves
                 # are not sent without -E
                 "--pool=solo", "--concurrency=1", "--without-mingle", "--without-gossip", "-Q", queue, "--loglevel=INFO", "--hostname", f"{queue}@%h"],
                cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True,
            )

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM (Celery's warm shutdown, ~2 s), SIGKILL after 20 s; the exit code."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode


@pytest.fixture
def sender(amqp_broker: AmqpBroker) -> Iterator[Celery]:
    app = Celery("logbus_amqp_tests_sender", broker=celery_url(amqp_broker), backend="rpc://")
    app.conf.update(broker_connection_retry_on_startup=False, broker_connection_timeout=10,
                    broker_connection_max_retries=1, task_ignore_result=True)
    try:
        yield app
    finally:
        app.close()


def test_celery_worker_runs_every_task(amqp_broker: AmqpBroker, sender: Celery, tmp_path: Path) -> None:
    queue = unique("celery")
    out = tmp_path / "lines.txt"
    out.touch()
    worker = Worker(amqp_broker, queue, tmp_path / "worker.log")
    try:
        # sent before the worker is up, or after: the queue holds them either way
        for i in range(TASK_COUNT):
            sender.send_task("logbus_tests.append_line", args=[str(out), f"line {i}"], queue=queue)

        def all_ran() -> bool:
            if worker.proc.poll() is not None:
                raise AssertionError(f"celery worker exited {worker.proc.returncode}:\n{worker.log_text()}")
            return len(out.read_text().splitlines()) >= TASK_COUNT

        try:
            wait_until(all_ran, 60, f"{TASK_COUNT} tasks to run")
        except AssertionError as e:
            raise AssertionError(f"{e}; lines: {out.read_text()!r}\nworker log:\n{worker.log_text()}") from None
        # the solo pool runs them one at a time, in the order they were queued
        assert out.read_text().splitlines() == [f"line {i}" for i in range(TASK_COUNT)]

        # a result through the rpc:// backend: the worker publishes the reply to the
        # sender's own queue (reply_to + correlation_id)
        result = sender.send_task("logbus_tests.add", args=[2, 3], queue=queue, ignore_result=False)
        assert result.get(timeout=30) == 5
        time.sleep(0.5)
        assert len(out.read_text().splitlines()) == TASK_COUNT  # ran once each
    finally:
        code = worker.stop()
    # a warm shutdown after the tasks: exit 0, no task failed
    log = worker.log_text()
    assert code == 0, log
    assert "Traceback" not in log and "ERROR" not in log, log
    assert log.count("succeeded in") == TASK_COUNT + 1, log
