"""The clients of tests/fault/test_kafka_exactly_once.py, in a process of their own: a
feeder producing the inputs and two consume-transform-produce workers (kafka-python), run
until the file ``stop`` appears in the work directory; ``fed`` appears there once every
input was produced. Prints a JSON summary. Apart from the test so that what kafka-python
leaves to the garbage collector while the broker is down (the sockets of refused
connects) ends with this process, never in a later test.

    python -m tests.fault.eo_clients HOST:PORT WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable

from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import OffsetAndMetadata

INPUTS = 1500
TXN_TIMEOUT_MS = 10_000
FAST_RETRY = {"reconnect_backoff_ms": 50, "reconnect_backoff_max_ms": 500, "retry_backoff_ms": 50}


class Worker(threading.Thread):
    def __init__(self, index: int, addr: Callable[[], str], stop: threading.Event) -> None:
        super().__init__(name=f"eo-worker-{index}", daemon=True)
        self.index, self.addr, self.stop_event = index, addr, stop
        self.commits = self.restarts = self.turns = self.aborts = 0
        self.errors: Counter[str] = Counter()

    def run(self) -> None:
        while not self.stop_event.is_set():
            consumer = producer = None
            try:
                consumer = KafkaConsumer(
                    bootstrap_servers=self.addr(), group_id="eo", isolation_level="read_committed",
                    enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=100,
                    session_timeout_ms=6000, heartbeat_interval_ms=500, request_timeout_ms=10000, **FAST_RETRY)
                consumer.subscribe(["eo-in"])
                # a transaction a kill left open, whose worker does not come back before the
                # test stops (the other finished the inputs), is aborted by the broker after this
                producer = KafkaProducer(bootstrap_servers=self.addr(), transactional_id=f"eo-{self.index}",
                                         request_timeout_ms=10000, max_block_ms=10000,
                                         transaction_timeout_ms=TXN_TIMEOUT_MS, **FAST_RETRY)
                producer.init_transactions()
                while not self.stop_event.is_set():
                    batch = consumer.poll(timeout_ms=300)
                    if not batch:
                        continue
                    producer.begin_transaction()
                    offsets = {}
                    for tp, msgs in batch.items():
                        for m in msgs:
                            producer.send("eo-out", key=m.key, value=b"out:" + m.value, partition=tp.partition)
                        offsets[tp] = OffsetAndMetadata(msgs[-1].offset + 1, "", -1)
                    self.turns += 1
                    if self.turns % 4 == 0:  # the transform "fails" after its outputs were appended
                        producer.flush()
                        producer.abort_transaction()
                        self.aborts += 1
                        for tp, msgs in batch.items():  # processed again
                            consumer.seek(tp, msgs[0].offset)
                        continue
                    producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
                    producer.commit_transaction()
                    self.commits += 1
            except Exception as e:  # noqa: BLE001 -- a dead broker surfaces as many kinds: start over
                self.errors[type(e).__name__] += 1
                self.restarts += 1
                if producer is not None:
                    try:
                        producer.abort_transaction()
                    except Exception:  # noqa: BLE001 -- fenced, or no transaction: the next init aborts it
                        pass
            finally:
                for client in (producer, consumer):
                    if client is not None:
                        try:
                            client.close(timeout=2) if client is producer else client.close()
                        except Exception:  # noqa: BLE001
                            pass
            if not self.stop_event.is_set():
                time.sleep(0.2)


class Feeder(threading.Thread):
    """Produces the inputs at a pace through the kills (idempotent, acks=all): input i is
    sent as ``i:attempt``, again with the next attempt when a send fails, so every record
    in the input topic is unique and the checker needs no guess about lost answers."""

    def __init__(self, addr: Callable[[], str]) -> None:
        super().__init__(name="eo-feeder", daemon=True)
        self.addr = addr
        self.sent = 0
        self.failures = 0

    def run(self) -> None:
        i = attempt = 0
        producer: KafkaProducer | None = None
        while i < INPUTS:
            try:
                if producer is None:
                    producer = KafkaProducer(bootstrap_servers=self.addr(), acks="all", request_timeout_ms=5000,
                                             max_block_ms=5000, **FAST_RETRY)
                producer.send("eo-in", key=b"%d" % i, value=b"%d:%d" % (i, attempt)).get(timeout=15)
                i, attempt = i + 1, 0
                self.sent = i
                time.sleep(0.004)
            except Exception:  # noqa: BLE001 -- the broker is down: again, as a new attempt
                self.failures += 1
                attempt += 1
                if producer is not None:
                    producer.close(timeout=1)
                producer = None
                time.sleep(0.2)
        if producer is not None:
            producer.close()


def main() -> None:
    warnings.simplefilter("ignore", ResourceWarning)
    addr, work = sys.argv[1], sys.argv[2]
    stop = threading.Event()
    feeder = Feeder(lambda: addr)
    workers = [Worker(i, lambda: addr, stop) for i in range(2)]
    for t in [feeder, *workers]:
        t.start()
    while not os.path.exists(os.path.join(work, "stop")):
        if not feeder.is_alive() and not os.path.exists(os.path.join(work, "fed")):
            open(os.path.join(work, "fed"), "w").close()
        time.sleep(0.1)
    stop.set()
    for t in [*workers, feeder]:
        t.join(timeout=30)
    json.dump({"sent": feeder.sent, "failed_sends": feeder.failures, "workers": [
        {"commits": w.commits, "aborts": w.aborts, "restarts": w.restarts, "errors": dict(w.errors)}
        for w in workers]}, sys.stdout)


if __name__ == "__main__":
    main()
