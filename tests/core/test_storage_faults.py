"""Storage faults on a real broker in the test's thread (core tier): a full disk is a
small tmpfs the test mounts, filled by a ballast file it later removes.

What must hold (issue 30): a publish whose confirm came is in its queue, before and after
a restart; a refused publish leaves no entry in any queue; ``health()`` names the fault
while it lasts; writes resume without a restart once there is space again.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from logbus.core.errors import RecordGone, StorageError, TopicInUse
from logbus.core.log import TopicConfig
from logbus.core.log import failures as failures_module
from logbus.core.message import Envelope, Message
from tests.core.amqp_terms import AmqpTerms
from tests.core.brokers import Brokers


def mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs: the broker's whole data directory."""
    fs = tmp_path / "fs"
    mount_tmpfs(fs, "24m")
    try:
        yield fs
    finally:
        subprocess.run(["umount", "-l", str(fs)], check=False)


def fill(fs: Path, leave: int = 0) -> Path:
    """A ballast file that takes all but ``leave`` bytes of ``fs``."""
    ballast = fs / "ballast"
    with open(ballast, "wb") as f:
        chunk = b"\0" * (1 << 20)
        while True:
            st = os.statvfs(fs)
            free = st.f_bavail * st.f_frsize - leave
            if free <= 0:
                break
            try:
                f.write(chunk[: min(len(chunk), free)])
                f.flush()
            except OSError:
                break
    return ballast


def message(n: int, size: int) -> Message:
    return Message(None, b"m%06d-" % n + b"x" * size, None, [], Envelope())


class Publisher:
    """Publishes to queue ``q`` through the default exchange and keeps what came back."""

    def __init__(self, brokers: Brokers) -> None:
        self.brokers = brokers
        self.confirmed: list[bytes] = []
        self.refused: list[bytes] = []
        self.n = 0  # numbers the bodies
        self.sent = 0

    def publish(self, size: int) -> None:
        self.n += 1
        self.sent += 1
        m = message(self.n, size)
        body = m.value or b""

        def on_durable(result: Any) -> None:
            (self.refused if isinstance(result, Exception) else self.confirmed).append(body)

        v = AmqpTerms(self.brokers.current.vhost("/"))  # type: ignore[union-attr]
        v.publish("", "q", m, on_durable=on_durable)

    def settle(self) -> None:
        """Until every publish was answered (the flusher's thread answers some)."""
        self.brokers.loop.run_until(lambda: self.answered() == self.sent)

    def answered(self) -> int:
        return len(self.confirmed) + len(self.refused)


def queue_bodies(brokers: Brokers, name: str = "q") -> list[bytes]:
    broker = brokers.current
    assert broker is not None
    v = broker.vhost("/")
    out = []
    while True:
        d = v.get(name, None, True)
        if d is None:
            return out
        out.append(d.message.value or b"")


def start(brokers: Brokers) -> None:
    b = brokers.start(topic_defaults=TopicConfig(flush="sync"), disk_free_limit=1 << 20)
    AmqpTerms(b.vhost("/")).declare_queue("q", durable=True)


def test_a_full_disk_refuses_cleanly_and_writes_resume_without_a_restart(small_fs: Path,
                                                                          monkeypatch: Any) -> None:
    monkeypatch.setattr(failures_module, "WRITE_RETRY_SECONDS", 0.05)
    brokers = Brokers(small_fs / "data")
    start(brokers)
    p = Publisher(brokers)
    for _ in range(50):
        p.publish(200)
    p.settle()
    assert len(p.confirmed) == 50
    ballast = fill(small_fs, leave=64 << 10)
    # publish until refusals come: large and small messages, so both the log's write
    # and the state store's may be the first to fail
    for i in range(400):
        p.publish(150_000 if i % 3 == 0 else 100)
        if i % 10 == 9:
            p.settle()
    p.settle()
    assert p.refused, "the disk never filled"
    broker = brokers.current
    assert broker is not None
    reasons = broker.admin.health()
    assert reasons and any("could not be written" in r or "state store" in r for r in reasons), reasons
    # every confirmed publish is in the queue, no refused one is
    assert p.answered() == p.sent
    ballast.unlink()
    time.sleep(0.1)  # past WRITE_RETRY_SECONDS: the next append tries a new segment
    broker._check_resources()  # once a second: the alarms, and a failed state store reopened
    after = Publisher(brokers)
    after.n = 10_000
    for _ in range(20):
        after.publish(100)
    after.settle()
    assert len(after.confirmed) == 20, after.refused[:1]
    assert broker.admin.health() == []
    got = queue_bodies(brokers)
    assert got == p.confirmed + after.confirmed
    assert not set(got) & set(p.refused)


def test_what_was_confirmed_on_a_full_disk_is_there_after_a_restart(small_fs: Path) -> None:
    brokers = Brokers(small_fs / "data")
    start(brokers)
    p = Publisher(brokers)
    fill(small_fs, leave=2 << 20)
    for i in range(2000):
        p.publish(20_000 if i % 2 else 50)
        if i % 20 == 19:
            p.settle()
    p.settle()
    assert p.refused and p.confirmed
    (small_fs / "ballast").unlink()
    brokers.restart(topic_defaults=TopicConfig(flush="sync"), disk_free_limit=1 << 20)
    got = queue_bodies(brokers)
    assert got == p.confirmed


def test_an_entry_whose_record_is_gone_is_dropped_and_the_next_one_delivered(tmp_path: Path) -> None:
    brokers = Brokers(tmp_path)
    b = brokers.start()
    v = AmqpTerms(b.vhost("/"))
    v.declare_queue("q", durable=True)
    for i in range(3):
        v.publish("", "q", message(i, 10))
    leased = b.vhost("/").get("q", "consumer", False)  # delivered, not acked
    assert leased is not None
    b.topics.delete_topic(leased.entry.topic, force=True)  # the two ready entries go at once
    v.publish("", "q", message(3, 10))  # the topic comes back: a new record at offset 0
    b.vhost("/").service.release("q", "consumer")  # the leased one is ready again: its record is gone
    got = b.vhost("/").get("q", None, True)
    assert got is not None and got.message.value == message(3, 10).value
    assert b.vhost("/").get("q", None, True) is None
    assert b.vhost("/").service.records_gone == 3


def test_a_log_cut_by_recovery_takes_the_entries_past_the_cut(tmp_path: Path, caplog: Any) -> None:
    brokers = Brokers(tmp_path)
    b = brokers.start()
    v = AmqpTerms(b.vhost("/"))
    v.declare_queue("q", durable=True)
    for i in range(6):
        v.publish("", "q", message(i, 100))
        while brokers.loop.run_once():  # one batch per message
            pass
    entries = sorted(b.vhost("/").service.queues["q"].queue.entries.values(), key=lambda e: e.seq)
    p = b._log.partition(entries[0].topic, 0)
    position = p.active.position_of(entries[2].offset)
    assert position is not None
    brokers.stop()
    with open(p.active.log_path, "r+b") as f:  # damage in the middle: records 2.. are cut
        f.seek(position[0] + 30)
        f.write(b"\xff" * 40)
    with caplog.at_level("WARNING"):
        b = brokers.start()
    text = caplog.text
    assert "now ends at offset 2: records 3..5 (3) dropped; 4 queue entries and 0 timers" in text, text
    v = AmqpTerms(b.vhost("/"))
    v.publish("", "q", message(6, 100))  # given offset 2 again
    got = [b.vhost("/").get("q", None, True) for _ in range(4)]
    assert [d.message.value if d else None for d in got] == [
        message(0, 100).value, message(1, 100).value, message(6, 100).value, None]


def test_deleting_a_topic_queues_read_is_refused_unless_forced(tmp_path: Path) -> None:
    brokers = Brokers(tmp_path)
    b = brokers.start()
    v = AmqpTerms(b.vhost("/"))
    v.declare_queue("q", durable=True)
    v.declare_queue("other", durable=True)
    for i in range(4):
        v.publish("", "q", message(i, 10))
    topic = next(iter(b.vhost("/").service.queues["q"].queue.entries.values())).topic
    with pytest.raises(TopicInUse, match="queue 'q' of vhost '/' \\(4 messages\\)"):
        b.topics.delete_topic(topic)
    assert b.vhost("/").service.queues["q"].queue.message_count == 4
    assert b.topics.delete_topic(topic, force=True) == 4
    assert b.vhost("/").service.queues["q"].queue.message_count == 0
    brokers.restart()
    assert brokers.current is not None
    assert brokers.current.vhost("/").service.queues["q"].queue.message_count == 0


def test_msgstore_says_a_missing_record_is_gone(tmp_path: Path) -> None:
    brokers = Brokers(tmp_path)
    b = brokers.start()
    with pytest.raises(RecordGone):
        b.vhost("/").service.messages.get("no-such-topic", 0, 0)


def test_a_state_store_that_failed_a_write_refuses_until_reopened(small_fs: Path) -> None:
    from logbus.core.state import CF_QUEUES, StateStore

    store = StateStore(small_fs / "state")
    store.put(CF_QUEUES, b"before", b"v")
    ballast = fill(small_fs)
    with pytest.raises(StorageError):
        for i in range(10_000):
            with store.batch() as b:
                b.put(CF_QUEUES, b"k%d" % i, b"v" * 1000)
    assert store.failed is not None
    assert not store.recover()  # still full
    with pytest.raises(StorageError):
        store.put(CF_QUEUES, b"during", b"v")
    assert store.get(CF_QUEUES, b"before") == b"v"  # reads go on
    ballast.unlink()
    assert store.recover()
    store.put(CF_QUEUES, b"after", b"v")
    assert store.get(CF_QUEUES, b"after") == b"v"
    store.close()


def test_messages_holding_the_log_past_the_bound_are_dead_lettered_when_retention_runs(tmp_path: Path) -> None:
    brokers = Brokers(tmp_path)
    b = brokers.start(topic_defaults=TopicConfig(flush="none", segment_bytes=2048, retention_bytes=4096),
                      queue_max_pinned_bytes=8192)
    v = AmqpTerms(b.vhost("/"))
    v.declare_exchange("dlx", "fanout", durable=True)  # its own topic: the queue's holds only q's
    v.declare_queue("dlq", durable=True)
    v.bind("dlx", "dlq")
    v.declare_queue("q", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
    for i in range(100):
        v.publish("", "q", message(i, 200))
        while brokers.loop.run_once():  # a batch per message: many segments
            pass
    topic = next(iter(b.vhost("/").service.queues["q"].queue.entries.values())).topic
    p = b._log.partition(topic, 0)
    segments = len(p.segments)
    assert segments > 10
    kept_bytes, start = 0, p.next_offset  # the bound: whole segments from the end, 8 KiB at most
    for seg in reversed(p.segments):
        if kept_bytes + seg.size > 8192:
            break
        kept_bytes, start = kept_bytes + seg.size, seg.base_offset
    b.housekeeping()
    q = b.vhost("/").service.queues["q"].queue
    kept = sorted(e.offset for e in q.entries.values())
    assert kept == list(range(start, 100))
    evicted = start
    assert b.vhost("/").service.queues["dlq"].queue.message_count == evicted  # dead-lettered, reason maxlen
    d = b.vhost("/").get("dlq", None, True)
    assert d is not None and d.message.value == message(0, 200).value  # the oldest first
    assert b.metrics.registry.get_sample_value("logbus_queue_pinned_evicted_total") == evicted
    assert len(p.segments) < segments  # retention ran once they were gone
    assert p.segments[0].base_offset <= start


# -- the expiry tick and the timers while the state store refuses (issue 45) ----------------

# the loggers of the expiry tick, the timers and the feed: what they say while the store refuses
TICK_LOGGERS = ("logbus.core.broker", "logbus.core.queues.timers", "logbus.core.pipeline",
                "logbus.core.queues.service")


def refuse_state_writes(broker: Any) -> None:
    """Durable declares on the full disk until the state store refuses one (a page or two
    of RocksDB's write-ahead log may still be free)."""
    v = AmqpTerms(broker.vhost("/"))
    for n in range(10_000):
        if broker.state.failed is not None:
            return
        try:
            v.declare_queue(f"filler{n}", durable=True)
        except StorageError:
            pass
    raise AssertionError("the state store never refused a write")


def ticks(brokers: Brokers, seconds: float) -> None:
    """The loop's clock moved by ``seconds`` in steps of 100 ms (the expiry tick's
    period), running what each step made due: ``seconds * 10`` expiry ticks."""
    for _ in range(round(seconds * 10)):
        brokers.loop.advance(0.1)
        while brokers.loop.run_once():
            pass


def said(caplog: Any, since: int) -> list[Any]:
    """What the tick's loggers said at WARNING and above since record ``since``."""
    return [r for r in caplog.records[since:] if r.name in TICK_LOGGERS and r.levelno >= 30]


def test_a_lease_lapsing_while_the_state_store_refuses_stops_no_tick_and_loses_nothing(
        small_fs: Path, caplog: Any) -> None:
    """A pop message whose invisible time lapses while the state store refuses writes
    becomes a retry as usual (its timer's id is the first of a block, which needs a
    write): nothing escapes the reactor, the 100 ms expiry loop keeps running, the
    refusal is logged once (not per tick, no traceback), and once the store takes writes
    again the message is received again, once. (Before: StorageError out of the tick,
    the loop stopped for good, the message gone.)"""
    brokers = Brokers(small_fs / "data")
    b = brokers.start(disk_free_limit=0)
    b.topics.create_topic("t", {"flush": "none"})
    assert b.pop_service.receive("g", "t", "m", 1, 1000) == []  # the group reads t from now on
    b.admin.publish("t", [Message(None, b"job")], partition=0)
    [leased] = b.pop_service.receive("g", "t", "m", 1, 1000)
    ballast = fill(small_fs)
    refuse_state_writes(b)
    since = len(caplog.records)
    with caplog.at_level("INFO"):
        ticks(brokers, 3.0)  # past the invisible time and the first retry's backoff: 30 ticks
        assert b._expiry is not None and b._expiry.running
        assert b.admin.pop_groups()[0]["invisible"] == 0  # it lapsed
        [refused] = said(caplog, since)  # once, not per tick
        assert refused.levelno == 30 and refused.exc_info is None and "state store" in refused.getMessage()
        ballast.unlink()
        got: list[Any] = []
        for _ in range(100):  # the store reopens (once a second), then the retry comes (1 s)
            ticks(brokers, 0.5)
            got += b.pop_service.receive("g", "t", "m", 10, 1000)
            if got:
                break
    assert [p.message.value for p in got] == [b"job"] and got[0].offset == leased.offset
    assert b.admin.health() == []
    b.pop_service.ack("g", "t", got[0].handle)
    brokers.restart(disk_free_limit=0)
    assert brokers.current is not None and brokers.current.pop_service.receive("g", "t", "m", 10, 1000) == []


def test_a_retry_asked_for_while_the_state_store_refuses_is_kept(small_fs: Path) -> None:
    """An AMQP nack with requeue on a queue with a backoff (a timer) while the state store
    refuses writes raises nothing (the channel has no answer for it) and loses nothing:
    the message is delivered again once the store takes writes. (Before: StorageError
    out of the nack, and the message gone.)"""
    brokers = Brokers(small_fs / "data")
    b = brokers.start(disk_free_limit=0)
    v = AmqpTerms(b.vhost("/"))
    v.declare_queue("q", durable=True, arguments={"x-retry-backoff": "1s"})
    v.publish("", "q", message(1, 10))
    d = v.get("q", "me", False)
    assert d is not None
    ballast = fill(small_fs)
    refuse_state_writes(b)
    v.reject(d, True)
    ballast.unlink()
    again = None
    for _ in range(100):  # the store reopens (once a second), then the retry comes (1 s)
        ticks(brokers, 0.5)
        again = v.get("q", "me", True)
        if again is not None:
            break
    assert again is not None and again.message.value == message(1, 10).value
    assert v.get("q", "me", True) is None


@pytest.mark.parametrize("error", [StorageError("state store write failed: the test's"), RuntimeError("a bug")])
def test_a_failing_expiry_tick_stops_neither_the_loop_nor_the_other_ticks(tmp_path: Path, caplog: Any,
                                                                          monkeypatch: Any, error: Exception) -> None:
    """Whatever a vhost's expiry raises, the 100 ms loop keeps running and the other ticks
    (the pop groups': a lease lapses and is retried) still run; the failure is logged once
    while it lasts, not per tick: a StorageError as a warning line, anything else (a bug)
    with its traceback. (Before: the loop stopped for good at the first.)"""
    brokers = Brokers(tmp_path)
    b = brokers.start()
    b.topics.create_topic("t", {"flush": "none"})
    assert b.pop_service.receive("g", "t", "m", 1, 1000) == []
    b.admin.publish("t", [Message(None, b"job")], partition=0)
    assert len(b.pop_service.receive("g", "t", "m", 1, 1000)) == 1

    def expire() -> None:
        raise error

    monkeypatch.setattr(b.vhosts["/"], "expire", expire)
    since = len(caplog.records)
    got: list[Any] = []
    with caplog.at_level("INFO"):
        for _ in range(100):  # the lease lapses (1 s), then the retry comes (1 s)
            ticks(brokers, 0.5)
            got += b.pop_service.receive("g", "t", "m", 10, 1000)
            if got:
                break
    assert [p.message.value for p in got] == [b"job"]
    assert b._expiry is not None and b._expiry.running
    [logged] = said(caplog, since)  # once, not per tick
    assert "'/'" in logged.getMessage() and str(error) in logged.getMessage() + str(logged.exc_info)
    assert (logged.exc_info is not None) == (not isinstance(error, StorageError))


@pytest.mark.parametrize("error", [StorageError("state store write failed: the test's"), RuntimeError("a bug")])
def test_routing_a_record_the_store_refused_is_a_warning_line(tmp_path: Path, caplog: Any, monkeypatch: Any,
                                                              error: Exception) -> None:
    """A record appended outside a vhost's own publishes (here: ``Admin.publish``, as HTTP
    does) whose routing in a vhost raises: a StorageError (the disk, not a bug) is one
    warning line naming the record, with no traceback; anything else keeps its traceback.
    The append stands either way."""
    brokers = Brokers(tmp_path)
    b = brokers.start()
    v = AmqpTerms(b.vhost("/"))
    v.declare_exchange("x", "fanout", durable=True)
    v.declare_queue("q", durable=True)
    v.bind("x", "q")

    def record_queues(*args: Any, **kw: Any) -> frozenset[str]:
        raise error

    monkeypatch.setattr(b.vhosts["/"], "record_queues", record_queues)
    since = len(caplog.records)
    with caplog.at_level("INFO"):
        assert brokers.loop.wait(b.admin.publish("x", [Message(None, b"r")], partition=0)) == [0]
    [logged] = said(caplog, since)
    assert "x/0 offset 0" in logged.getMessage() and str(error) in logged.getMessage() + str(logged.exc_info)
    assert (logged.exc_info is not None) == (not isinstance(error, StorageError))
    assert logged.levelno == (30 if isinstance(error, StorageError) else 40)
