"""One queue (core/queues/queue.py) and its journal in RocksDB (core/queues/journal.py),
against a plain in-memory model, under random publish / take / ack / nack / requeue /
release / expire / restart, with limits, priorities and TTLs (the queue service's
leases, lapses, retries and timers: test_queue_service.py), and views (a consumer
filter's entries: taken out of seq order). A restart commits the journal, closes
RocksDB, reopens it and restores a fresh Queue from what is stored."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from logbus.core.queues import queue as queue_module
from logbus.core.queues import ready
from logbus.core.queues.journal import QueueStore
from logbus.core.queues.queue import (
    DELIVERY_LIMIT,
    DROP_HEAD,
    EXPIRED,
    MAXLEN,
    REJECT_PUBLISH,
    REJECTED,
    Outcome,
    Queue,
    QueueLimits,
    Delivery,
    Receipt,
    Removed,
    StaleReceipt,
)
from logbus.core.state import StateStore
from logbus.retry.policy import RetryPolicy

OWNERS = ("a", "b")
# the consumer filters views are made for: on the offset (the publish number * 10) and priority
VIEWS = {
    "even": lambda offset, priority: offset // 10 % 2 == 0,
    "odd": lambda offset, priority: offset // 10 % 2 == 1,
    "urgent": lambda offset, priority: priority >= 2,
}


@dataclass
class M:
    priority: int
    expires: int
    size: int
    deliveries: int = 0
    owner: str | None = None  # leased to
    delivery: Delivery | None = None  # the current lease


class QueueMachine(RuleBasedStateMachine):
    @initialize(
        max_length=st.none() | st.integers(1, 6),
        overflow=st.sampled_from([DROP_HEAD, REJECT_PUBLISH]),
        delivery_limit=st.none() | st.integers(0, 3),
        max_priority=st.sampled_from([0, 3]),
    )
    def setup(self, max_length: int | None, overflow: str, delivery_limit: int | None, max_priority: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="logbus-queue-"))
        self.limits = QueueLimits(max_length=max_length, overflow=overflow, max_priority=max_priority)
        self.delivery_limit = delivery_limit
        self.retry = RetryPolicy(max_deliveries=None if delivery_limit is None else delivery_limit + 1)
        self.store = StateStore(self.dir / "state")
        self.qs = QueueStore(self.store)
        # exact: the journal rewrites an entry per delivery; else it keeps a delivered mark
        self.exact = max_priority > 0
        self.mark = -1  # the highest seq ever taken
        self.q = Queue("q", self.limits, self.qs.journal("/", "q", exact=self.exact), self.retry)
        self.model: dict[int, M] = {}
        self.next_seq = 0
        self.now = 1000
        self.removed: list[tuple[int, str]] = []  # (seq, reason) the queue reported
        self.stale: list[Delivery] = []  # deliveries whose leases ended: they settle nothing
        self.watched: dict[str, int] = {}  # view -> how many watch it
        self.backlog: dict[str, tuple[list[int], int]] = {}  # view -> (its backlog, how far judged)
        self.judged: dict[str, set[int]] = {}  # view -> seqs judged since they last became ready
        Queue.slack = 1  # rebuild heaps of stale seqs early, so that the rebuilds run
        ready.Rows.slack = 0  # squeeze removed rows out early, so that the squeezes run
        queue_module.FREE_TABLES_AFTER = 1  # a queue emptied frees its tables and rows each time

    def teardown(self) -> None:
        Queue.slack = 64
        ready.Rows.slack = 64
        queue_module.FREE_TABLES_AFTER = 64
        if hasattr(self, "store"):
            self.store.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- the model's rules -------------------------------------------------------------

    def _ready(self) -> list[int]:
        return sorted((s for s, m in self.model.items() if m.owner is None),
                      key=lambda s: (-self.model[s].priority, s))

    def _became_ready(self, seq: int) -> None:
        """Every view judges an entry when it becomes ready."""
        for judged in self.judged.values():
            judged.add(seq)

    def _model_remove(self, seq: int, reason: str) -> None:
        del self.model[seq]
        self.removed.append((seq, reason))

    # -- rules ---------------------------------------------------------------------------

    @rule(priority=st.integers(0, 5), ttl=st.sampled_from([0, 0, 5, 50]), size=st.integers(0, 3))
    def publish(self, priority: int, ttl: int, size: int) -> None:
        expires = self.now + ttl if ttl else 0
        entry, dropped = self.q.publish("t", 0, self.next_seq * 10, size, priority=priority, expires_ms=expires,
                                        now_ms=self.now)
        got_dropped = [(r.entry.seq, r.reason) for r in dropped]
        expect_dropped = []
        ready = self._ready()
        lim = self.limits
        if lim.max_length is not None and len(ready) + 1 > lim.max_length:
            if lim.overflow == REJECT_PUBLISH:
                assert entry is None and dropped == []
                return
            while len(ready) + 1 > lim.max_length:
                head = ready.pop(0)
                expect_dropped.append((head, MAXLEN))
                self._model_remove(head, MAXLEN)
        assert got_dropped == expect_dropped
        assert entry is not None and entry.seq == self.next_seq
        self.model[self.next_seq] = M(min(priority, lim.max_priority), expires, size)
        self._became_ready(self.next_seq)
        self.next_seq += 1

    @rule(owner=st.sampled_from(OWNERS))
    def take(self, owner: str) -> None:
        d, removed = self.q.take(owner, now_ms=self.now)
        seq = self._model_take(owner, self._ready(), d, removed)
        if seq is not None:
            self.mark = max(self.mark, seq)  # taken in seq order: the journal's delivered mark

    def _model_take(self, owner: str, ready: list[int], d: Delivery | None, removed: list[Removed]) -> int | None:
        """What ``take`` over ``ready`` (in take order) must have done: expired heads
        removed, the next one leased to ``owner``; its seq."""
        expect_removed = []
        taken = None
        for seq in ready:
            m = self.model[seq]
            if m.expires and m.expires <= self.now:
                expect_removed.append((seq, EXPIRED))
                self._model_remove(seq, EXPIRED)
                continue
            m.deliveries += 1
            m.owner = owner
            assert d is not None and (d.queue, d.entry.seq, d.delivery, d.owner) == ("q", seq, m.deliveries, owner)
            assert d.entry.deliveries == m.deliveries and self.q.leases[seq] is d  # the lease itself
            m.delivery = d
            taken = seq
            break
        else:
            assert d is None
        assert [(r.entry.seq, r.reason) for r in removed] == expect_removed
        return taken

    @rule(key=st.sampled_from(sorted(VIEWS)))
    def watch(self, key: str) -> None:
        self.q.watch(key, lambda e, message, f=VIEWS[key]: f(e.offset, e.priority))
        if key not in self.watched:  # a new view: what is ready now is its backlog
            self.backlog[key] = (sorted(s for s, m in self.model.items() if m.owner is None), 0)
            self.judged[key] = set()
        self.watched[key] = self.watched.get(key, 0) + 1

    @precondition(lambda self: self.watched)
    @rule(data=st.data(), budget=st.sampled_from([1, 2, 100]))
    def fill(self, data: st.DataObject, budget: int) -> None:
        key = data.draw(st.sampled_from(sorted(self.watched)))
        backlog, pos = self.backlog[key]
        for seq in backlog[pos:pos + budget]:
            if seq in self.model and self.model[seq].owner is None:
                self.judged[key].add(seq)
        pos = min(len(backlog), pos + budget)
        assert self.q.fill(self.q.views[key], budget) == (pos == len(backlog))
        self.backlog[key] = ([], 0) if pos == len(backlog) else (backlog, pos)

    @precondition(lambda self: self.watched)
    @rule(data=st.data())
    def unwatch(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.watched)))
        self.q.unwatch(key)
        self.watched[key] -= 1
        if not self.watched[key]:
            del self.watched[key], self.backlog[key], self.judged[key]
        assert (key in self.q.views) == (key in self.watched)

    def _in_view(self, key: str) -> list[int]:
        """The ready entries in the view's heap, in take order: judged, and taken by its filter."""
        return [s for s in self._ready() if s in self.judged[key] and VIEWS[key](s * 10, self.model[s].priority)]

    @precondition(lambda self: self.watched)
    @rule(data=st.data(), owner=st.sampled_from(OWNERS))
    def take_view(self, data: st.DataObject, owner: str) -> None:
        key = data.draw(st.sampled_from(sorted(self.watched)))
        d, removed = self.q.take(owner, now_ms=self.now, view=self.q.views[key])
        backlog, pos = self.backlog[key]
        ready = self._in_view(key)
        if pos < len(backlog):  # nothing at or past the first entry of the backlog not judged yet
            limit = backlog[pos]
            for i, seq in enumerate(ready):
                if seq >= limit:
                    ready = ready[:i]
                    break
        self._model_take(owner, ready, d, removed)  # out of seq order: the mark stays

    def _leased(self) -> list[int]:
        return sorted(s for s, m in self.model.items() if m.owner is not None)

    @precondition(lambda self: any(m.owner for m in self.model.values()))
    @rule(data=st.data(), plain=st.booleans())
    def ack(self, data: st.DataObject, plain: bool) -> None:
        seq = data.draw(st.sampled_from(self._leased()))
        d = self.model[seq].delivery
        assert d is not None
        if plain:  # the ack that makes no Removed
            assert self.q.ack(d) is d.entry
        else:
            settled = self.q.settle(d, Outcome.ACK)
            assert settled is not None and (settled.entry.seq, getattr(settled, "reason", None)) == (seq, "")
        del self.model[seq]
        self.stale.append(d)
        with pytest.raises(StaleReceipt):
            self.q.settle(d, Outcome.ACK)  # twice: stale

    @precondition(lambda self: any(m.owner for m in self.model.values()))
    @rule(data=st.data(), requeue=st.booleans())
    def nack(self, data: st.DataObject, requeue: bool) -> None:
        seq = data.draw(st.sampled_from(self._leased()))
        m = self.model[seq]
        assert m.delivery is not None
        removed = self.q.settle(m.delivery, Outcome.REQUEUE if requeue else Outcome.DEAD_LETTER)
        self.stale.append(m.delivery)
        m.delivery = None
        limit = self.delivery_limit
        if not requeue:
            assert removed is not None and (removed.entry.seq, removed.reason) == (seq, REJECTED)
            self._model_remove(seq, REJECTED)
        elif limit is not None and m.deliveries > limit:
            assert removed is not None and (removed.entry.seq, removed.reason) == (seq, DELIVERY_LIMIT)
            self._model_remove(seq, DELIVERY_LIMIT)
        else:
            assert removed is None
            m.owner = None
            self._became_ready(seq)

    @rule(owner=st.sampled_from(OWNERS))
    def release(self, owner: str) -> None:
        out = self.q.release(owner)
        removed = out.removed
        assert not out.scheduled  # an immediate retry policy never waits
        expect = []
        limit = self.delivery_limit
        for seq in self._leased():
            m = self.model[seq]
            if m.owner != owner:
                continue
            assert m.delivery is not None
            self.stale.append(m.delivery)
            m.delivery = None
            if limit is not None and m.deliveries > limit:
                expect.append((seq, DELIVERY_LIMIT))
                self._model_remove(seq, DELIVERY_LIMIT)
            else:
                m.owner = None
                self._became_ready(seq)
        assert [(r.entry.seq, r.reason) for r in removed] == expect

    @rule(dt=st.integers(0, 30))
    def expire(self, dt: int) -> None:
        self.now += dt
        removed = self.q.expire(self.now)
        expect = []
        by_pri: dict[int, list[int]] = {}
        for seq in self._ready():
            by_pri.setdefault(self.model[seq].priority, []).append(seq)
        for pri in sorted(by_pri, reverse=True):
            for seq in by_pri[pri]:
                m = self.model[seq]
                if not m.expires or m.expires > self.now:
                    break
                expect.append((seq, EXPIRED))
                self._model_remove(seq, EXPIRED)
        assert [(r.entry.seq, r.reason) for r in removed] == expect

    @rule()
    def purge(self) -> None:
        n = self.q.purge()
        ready = self._ready()
        assert n == len(ready)
        for seq in ready:
            del self.model[seq]

    @rule()
    def restart(self) -> None:
        self.qs.commit()
        self.store.close()
        self.store = StateStore(self.dir / "state")
        self.qs = QueueStore(self.store)
        self.q = Queue("q", self.limits, self.qs.journal("/", "q", exact=self.exact), self.retry)
        self.q.restore(*self.qs.load("/", "q", exact=self.exact))
        self.watched, self.backlog, self.judged = {}, {}, {}  # the consumers are gone with their views
        for seq, m in self.model.items():
            m.owner = None  # every lease (none has a deadline) is gone: back to ready, redelivered
            if m.delivery is not None:
                self.stale.append(m.delivery)
            m.delivery = None
            if not self.exact:
                assert m.deliveries > 0 or seq > self.mark  # taken in seq order: below the mark means taken
        # numbering goes on above every unsettled entry and every seq ever delivered
        self.next_seq = max(max(self.model, default=-1), self.mark) + 1

    @precondition(lambda self: self.stale)
    @rule(data=st.data(), outcome=st.sampled_from(list(Outcome)))
    def settle_stale(self, data: st.DataObject, outcome: Outcome) -> None:
        """A delivery whose lease ended (settled, given back, or gone with a restart, its
        seq maybe numbering another entry since, leased as the same delivery count) settles
        nothing and moves no deadline: the invariants see nothing changed."""
        d = data.draw(st.sampled_from(self.stale))
        with pytest.raises(StaleReceipt):
            self.q.settle(d, outcome, self.now)
        with pytest.raises(StaleReceipt):
            self.q.ack(d)
        with pytest.raises(StaleReceipt):
            self.q.change_invisible(d, self.now + 10)

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def same_state(self) -> None:
        q = self.q
        assert set(q.entries) == set(self.model)
        assert q.message_count == len(self._ready())
        assert q.unacked_count == len(self._leased())
        assert [e.seq for e in q.peek(len(self.model) + 1)] == self._ready()  # the order takes would go
        assert [e.seq for e in q.peek(2)] == self._ready()[:2]
        assert q.ready_bytes == sum(self.model[s].size for s in self._ready())
        for seq, m in self.model.items():
            e = q.entries[seq]
            assert (e.priority, e.expires_ms, e.deliveries, e.redelivered) == (
                m.priority, m.expires, m.deliveries, m.deliveries > 0)
            if m.delivery is not None:  # named from outside (a receipt handle): the same lease
                assert q.lease(Receipt(seq, m.deliveries)) is m.delivery
        assert q.next_seq == self.next_seq
        for key, view in q.views.items():  # the ready entries each view takes, as its filter says
            assert {seq for _, seq in view.heap if q._is_ready(seq)} == set(self._in_view(key))
            assert view.filling == bool(self.backlog[key][0])
        for seq in range(q.next_seq):
            assert q.settled(seq) == (seq not in self.model and seq < q.next_seq)

    @invariant()
    def journal_holds_the_unsettled(self) -> None:
        self.qs.commit()
        entries, _ = self.qs.load("/", "q", exact=self.exact)
        stored = {e.seq: (e, deadline) for e, deadline in entries}
        assert set(stored) == set(self.model)
        for seq, (e, deadline) in stored.items():
            assert e.deliveries == self.model[seq].deliveries  # exact in both journal modes
            assert deadline == 0


QueueMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_queue_against_model = QueueMachine.TestCase


def test_a_delivery_settles_only_its_own_queues_lease() -> None:
    """A queue deleted and declared again under its name numbers its entries from 0 again:
    the first lease of each is seq 0, delivery 1. A delivery of the old one names the same
    seq and count, yet it is not the new queue's lease, and settles nothing there."""
    old, new = Queue("q"), Queue("q")
    for q in (old, new):
        q.publish("t", 0, 0, 1)
    d_old, _ = old.take("a")
    d_new, _ = new.take("b")
    assert d_old is not None and d_new is not None
    assert (d_old.queue, d_old.entry.seq, d_old.delivery) == (d_new.queue, d_new.entry.seq, d_new.delivery)
    for outcome in Outcome:
        with pytest.raises(StaleReceipt):
            new.settle(d_old, outcome)
    assert new.leases == {0: d_new} and new.unacked_count == 1
    assert new.ack(d_new) is d_new.entry and not new.entries


def test_an_entry_taken_through_a_view_and_given_back_twice_is_ready_once() -> None:
    """An entry taken through a consumer filter's view leaves its copy in the main ready
    heap behind (skipped there while leased); given back, that copy is its place again,
    not a second one (Hypothesis found peek listing it twice, and message order with it)."""
    from logbus.core.queues.entry import NullJournal

    q = Queue("q", QueueLimits(), NullJournal(), RetryPolicy())
    q.watch("even", lambda e, message: VIEWS["even"](e.offset, e.priority))
    q.watch("odd", lambda e, message: VIEWS["odd"](e.offset, e.priority))
    q.publish("t", 0, 0, 0)
    for _ in range(2):
        d, _ = q.take("a", view=q.views["even"])
        assert d is not None and d.entry.seq == 0
        q.release("a")
    assert [e.seq for e in q.peek(5)] == [0] and q.message_count == 1
    d, _ = q.take("b")
    assert d is not None and d.entry.seq == 0
    assert q.take("b")[0] is None  # no second copy to hand out


def test_an_untaken_delivery_is_ready_again_as_if_never_taken() -> None:
    """A delivery whose message is not readable yet (a remote segment being fetched) is
    undone: the entry is first in line again with its delivery count as before, so its
    next delivery is not marked redelivered."""
    q = Queue("q")
    for offset in range(3):
        q.publish("t", 0, offset, 1)
    d, _ = q.take("a")
    assert d is not None and d.delivery == 1
    q.untake(d)
    assert (q.ready_count, q.unacked_count, q.leases) == (3, 0, {})
    again, _ = q.take("b")
    assert again is not None and (again.entry.offset, again.delivery) == (0, 1)
    with pytest.raises(StaleReceipt):
        q.untake(d)  # no current lease: nothing changes
    assert q.unacked_count == 1
