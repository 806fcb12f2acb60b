"""The queue service (core/queues/service.py) with its journal and timer index on real
RocksDB, against a plain model, under random publish / take with and without an
invisible time / ack / requeue / retry / dead-letter / change-invisible-time / stale
receipts / delayed messages / time passing (lapses, retries and delays due) / restarts.

The model: every message is ready, leased (owner, delivery, deadline) or scheduled (due
time); ready ones are taken in order (a requeue keeps its place, a retry that is due
goes to the back); a settle with a delivery that is not the current lease is refused
and changes nothing. A restart keeps every unsettled message and its delivery count;
leases with a deadline survive it (named from outside by a ``Receipt``, as a pop receipt
handle names them, they still settle; the delivery objects from before are stale), the
others end.

``test_a_stale_receipt_mutant_fails`` runs the same machine against a queue that does
not check which lease a delivery is, and expects the machine to catch it.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from logbus.core.log.batch import Record
from logbus.core.message import Message
from logbus.core.queues.journal import QueueStore
from logbus.core.queues.msgstore import MessageStore
from logbus.core.queues.queue import (
    DELIVERY_LIMIT,
    Delivery,
    Entry,
    REJECTED,
    RESTORED,
    Outcome,
    Queue,
    Receipt,
    StaleReceipt,
)
from logbus.core.queues.service import DeadLetterTarget, QueueService, QueueSettings, QueueState
from logbus.core.queues.timers import Timers
from logbus.core.state import StateStore
from logbus.core.state_pb2 import TimerRecord
from logbus.retry.policy import RetryPolicy

OWNERS = ("a", "b")
READY, LEASED, SCHEDULED = "ready", "leased", "scheduled"


@dataclass
class M:
    order: int  # place among ready messages (a requeue keeps it; a due retry gets a new one)
    state: str = READY
    deliveries: int = 0
    owner: str | None = None
    delivery: Delivery | None = None  # the current lease
    deadline: int = 0
    due: int = 0
    scheduled_as: int = 0  # the order timers due at the same time are released in


class ServiceMachine(RuleBasedStateMachine):
    @initialize(
        backoff=st.sampled_from([(), (10,), (10, 40)]),
        max_deliveries=st.none() | st.integers(1, 4),
    )
    def setup(self, backoff: tuple[int, ...], max_deliveries: int | None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="logbus-qservice-"))
        self.now = 1_000_000
        self.settings = QueueSettings(retry=RetryPolicy(levels_ms=backoff, max_deliveries=max_deliveries),
                                      dead_letter=DeadLetterTarget(topic="%DLQ%g"))
        self.records: dict[int, Record] = {}  # offset -> what the log holds
        self.store = StateStore(self.dir / "state")
        self._open()
        self.model: dict[int, M] = {}  # offset -> message
        self.next_offset = 0
        self.next_order = 0
        self.next_scheduled = 0
        self.dead: list[tuple[int, str]] = []  # (offset, reason) the service dead-lettered
        self.expect_dead: list[tuple[int, str]] = []
        self.stale: list[Delivery] = []  # deliveries that are no current lease

    def _open(self) -> None:
        self.qs = QueueStore(self.store)
        # pins of single offsets, not blocks: the invariant below checks them exactly
        self.timers = Timers(self.qs, self.store, lambda: self.now, pin_shift=0)
        messages = MessageStore(self._read_batch)
        self.svc = QueueService("/", self.qs, self.timers, messages, clock=lambda: self.now,
                                dead_letter=self._dead_letter, pin_shift=0)
        self.svc.create("q", self.settings, durable=True)

    def _read_batch(self, topic: str, partition: int, offset: int) -> list[tuple[int, Record]]:
        return [(offset, self.records[offset])]

    def _dead_letter(self, qs: QueueState, message: Message, reason: str, entry: Entry | None) -> None:
        assert entry is not None and entry.offset == int(message.value or b"-1")
        self.dead.append((int(message.value or b"-1"), reason))

    def teardown(self) -> None:
        if hasattr(self, "store"):
            self.store.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- the model's rules -------------------------------------------------------------

    def _in(self, state: str) -> list[int]:
        return sorted((o for o, m in self.model.items() if m.state == state), key=lambda o: self.model[o].order)

    def _give_back(self, offset: int, backoff: bool) -> None:
        """A lease ended without an ack (requeue, retry, lapse)."""
        m = self.model[offset]
        self.stale.append(m.delivery)  # type: ignore[arg-type]
        m.owner, m.delivery, m.deadline = None, None, 0
        policy = self.settings.retry
        if policy.exhausted(m.deliveries):
            del self.model[offset]
            self.expect_dead.append((offset, DELIVERY_LIMIT))
            return
        delay = policy.delay_ms(m.deliveries) if backoff else 0
        if delay:
            m.state, m.due, m.scheduled_as = SCHEDULED, self.now + delay, self.next_scheduled
            self.next_scheduled += 1
        else:
            m.state = READY

    # -- rules ---------------------------------------------------------------------------

    @rule()
    def publish(self) -> None:
        offset = self.next_offset
        self.next_offset += 1
        message = Message(value=str(offset).encode())
        self.records[offset] = message.to_record()
        assert self.svc.enqueue(["q"], "t", 0, offset, message) is False
        self.model[offset] = M(self.next_order)
        self.next_order += 1

    @rule(delay=st.integers(1, 80))
    def publish_delayed(self, delay: int) -> None:
        """A message with a deliver-at time: appended now, a DELAY timer until due (what
        the broker writes), entered into the queue when due."""
        offset = self.next_offset
        self.next_offset += 1
        self.records[offset] = Message(value=str(offset).encode()).to_record()
        self.timers.add(self.now + delay, TimerRecord(kind=TimerRecord.DELAY, topic="t", partition=0, offset=offset))
        self.model[offset] = M(-1, SCHEDULED, due=self.now + delay, scheduled_as=self.next_scheduled)
        self.next_scheduled += 1

    @rule(owner=st.sampled_from(OWNERS), n=st.integers(1, 3), invisible=st.sampled_from([0, 0, 20, 100]))
    def take(self, owner: str, n: int, invisible: int) -> None:
        got = self.svc.take("q", owner, n, invisible_ms=invisible)
        expect = self._in(READY)[:n]
        assert [int(d.message.value or b"") for d in got if d.message is not None] == expect
        for d in got:
            m = self.model[d.entry.offset]
            m.state, m.owner, m.deliveries = LEASED, owner, m.deliveries + 1
            m.deadline = self.now + invisible if invisible else 0
            assert d.entry.deliveries == m.deliveries
            assert (d.delivery, d.owner, d.deadline_ms) == (m.deliveries, owner, m.deadline)
            m.delivery = d
        assert [d.remaining for d in got] == [0] * (len(got) - 1) + [len(self._in(READY))] if got else True

    @precondition(lambda self: any(m.state == LEASED for m in self.model.values()))
    @rule(data=st.data(), outcome=st.sampled_from(list(Outcome)))
    def settle(self, data: st.DataObject, outcome: Outcome) -> None:
        offset = data.draw(st.sampled_from(self._in(LEASED)))
        m = self.model[offset]
        assert m.delivery is not None
        self.svc.settle(m.delivery, outcome)
        if outcome is Outcome.ACK:
            self.stale.append(m.delivery)
            del self.model[offset]
        elif outcome is Outcome.DEAD_LETTER:
            self.stale.append(m.delivery)
            del self.model[offset]
            self.expect_dead.append((offset, REJECTED))
        else:
            self._give_back(offset, outcome is Outcome.RETRY)

    @precondition(lambda self: bool(self.stale))
    @rule(data=st.data(), outcome=st.sampled_from(list(Outcome)))
    def settle_stale(self, data: st.DataObject, outcome: Outcome, d: Delivery | None = None) -> None:
        if d is None:
            d = data.draw(st.sampled_from(self.stale))
        with pytest.raises(StaleReceipt):
            self.svc.settle(d, outcome)
        with pytest.raises(StaleReceipt):
            self.svc.change_invisible(d, 50)

    def _stale_of_leased(self) -> list[Delivery]:
        """Stale deliveries whose seq is leased again (the case the check exists for)."""
        leased = {m.delivery.entry.seq for m in self.model.values() if m.state == LEASED and m.delivery is not None}
        return [d for d in self.stale if d.entry.seq in leased]

    @precondition(lambda self: bool(self._stale_of_leased()))
    @rule(data=st.data(), outcome=st.sampled_from(list(Outcome)))
    def settle_stale_of_leased_again(self, data: st.DataObject, outcome: Outcome) -> None:
        self.settle_stale(data, outcome, data.draw(st.sampled_from(self._stale_of_leased())))

    @precondition(lambda self: any(m.state == LEASED for m in self.model.values()))
    @rule(data=st.data(), invisible=st.sampled_from([0, 5, 60]))
    def change_invisible(self, data: st.DataObject, invisible: int) -> None:
        offset = data.draw(st.sampled_from(self._in(LEASED)))
        m = self.model[offset]
        assert m.delivery is not None
        self.svc.change_invisible(m.delivery, invisible)
        m.deadline = self.now + invisible if invisible else 0

    @rule(owner=st.sampled_from(OWNERS))
    def release(self, owner: str) -> None:
        self.svc.release("q", owner)
        for offset in sorted(self._in(LEASED), key=lambda o: self.model[o].delivery.entry.seq):  # type: ignore[union-attr]
            if self.model[offset].owner == owner:
                self._give_back(offset, False)

    @rule(dt=st.integers(0, 60), lead=st.sampled_from([0, 0, 30]))
    def time_passes(self, dt: int, lead: int) -> None:
        """Time passes; timers due within ``lead`` are released, as the broker releases
        them ahead of due time: staged in the queue until due."""
        self.now += dt
        for key, due, rec in self.timers.due(self.now + lead):
            self.timers.remove(key, rec)
            if rec.kind == TimerRecord.RETRY:
                assert self.svc.retry_due(rec, due)
            else:  # as the broker releases a delayed message to a pop group
                message = Message.from_record(self.records[rec.offset])
                self.svc.enqueue(["q"], rec.topic, rec.partition, rec.offset, message, visible_ms=due)
        self.svc.tick(self.now)
        lapsed = [o for o in self._in(LEASED) if 0 < self.model[o].deadline <= self.now]
        for offset in sorted(lapsed, key=lambda o: (self.model[o].deadline, self.model[o].delivery.entry.seq)):  # type: ignore[union-attr]
            self._give_back(offset, True)
        due = [o for o in self._in(SCHEDULED) if self.model[o].due <= self.now]
        for offset in sorted(due, key=lambda o: (self.model[o].due, self.model[o].scheduled_as)):
            m = self.model[offset]
            m.state, m.order, m.due = READY, self.next_order, 0
            self.next_order += 1

    @rule()
    def restart(self) -> None:
        self.qs.commit()
        self.store.close()
        self.store = StateStore(self.dir / "state")
        self._open()
        q = self.svc.state("q").queue
        for offset in self._in(LEASED):
            m = self.model[offset]
            old = m.delivery
            assert old is not None
            self.stale.append(old)  # of the process before: no lease of this one
            if m.deadline:  # kept, under no owner of this process, named from outside by its receipt
                m.owner = RESTORED
                m.delivery = q.lease(Receipt(old.entry.seq, old.delivery))
                assert m.delivery is not old and m.delivery.owner == RESTORED
            else:  # a lease without a deadline ends with the process
                m.state, m.owner, m.delivery = READY, None, None

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def same_state(self) -> None:
        q = self.svc.state("q").queue
        ready, leased = self._in(READY), self._in(LEASED)
        assert q.message_count == len(ready)
        assert q.unacked_count == len(leased)
        staged = {e.offset for e in q.staged()}
        by_offset = {e.offset: e for e in q.entries.values() if e.offset not in staged}
        assert set(by_offset) == set(ready) | set(leased)
        for offset, e in by_offset.items():
            assert e.deliveries == self.model[offset].deliveries
        for offset in leased:
            m = self.model[offset]
            lease = q.leases[by_offset[offset].seq]
            assert lease is m.delivery and lease.delivery == m.deliveries
            assert lease.deadline_ms == m.deadline
        assert self.dead == self.expect_dead

    @invariant()
    def tick_looks_at_every_queue_that_is_not_idle(self) -> None:
        """``tick`` visits only the queues it was told stopped being idle (``on_busy``):
        whatever leases and readies did, none that can expire or lapse is missed."""
        assert {n for n, qs in self.svc.queues.items() if not qs.queue.idle} <= self.svc._busy

    @invariant()
    def scheduled_are_timers(self) -> None:
        """A scheduled message is a timer, or an entry staged until its due time."""
        due = sorted([(d, rec.offset, rec.deliveries) for _, d, rec in self.timers.due(2**62, limit=1000)]
                     + [(e.visible_ms, e.offset, e.deliveries) for e in self.svc.state("q").queue.staged()])
        assert due == sorted((m.due, o, m.deliveries) for o, m in self.model.items() if m.state == SCHEDULED)


    @invariant()
    def pins_are_the_lowest_offsets_pointed_at(self) -> None:
        """What retention keeps, kept up to date as entries and timers come and go
        (``pins.py``), equals the scan of every entry and timer it replaces: after
        publishes, settles, retries, lapses, releases and restarts alike."""
        entries = [e.offset for e in self.svc.state("q").queue.entries.values()]
        timers = [rec.offset for _, _, rec in self.timers.due(2**62, limit=1000)]
        assert self.svc.pinned_from("t", 0) == min(entries, default=None)
        assert self.timers.pinned_from("t", 0) == min(timers, default=None)
        assert self.svc.pinned_from("t", 1) is None and self.timers.pinned_from("u", 0) is None


ServiceMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_queue_service_against_model = ServiceMachine.TestCase


@pytest.mark.pure_only
def test_a_stale_receipt_mutant_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue that checks only that a seq is leased, not that the delivery is its lease,
    lets a lapsed delivery settle the message's next lease: the machine must catch it."""

    def lenient(self: Queue, d: Delivery) -> int:
        seq = d.entry.seq
        if seq not in self.leases:
            raise StaleReceipt(seq)
        return seq

    monkeypatch.setattr(Queue, "_current", lenient)
    with pytest.raises(BaseException) as info:
        run_state_machine_as_test(ServiceMachine, settings=settings(
            max_examples=100, stateful_step_count=30, deadline=None, derandomize=True, database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck)))
    assert "DID NOT RAISE" in str(info.value) or "StaleReceipt" in str(info.value), info.value
