"""The transaction coordinator against a simple model (Hypothesis' stateful testing), on a
real log and state store: any sequence of producers starting (fencing the previous one of
their id), partitions added, transactional and plain records produced, commits, aborts,
time-outs and restarts leaves a read_committed reader seeing exactly the model's records:
plain ones and those of committed transactions, in offset order, up to the first record of
a transaction still open."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logbus.core.types import Code
from tests.core.test_produce import batch, outcome
from tests.core.test_stream_services import Services
from tests.core.test_transactions import committed_values, txn_batch

TXNS = ("a", "b")
PARTITIONS = (0, 1)


class Producer:
    def __init__(self) -> None:
        self.pid = self.epoch = -1
        self.open = False  # a transaction is open
        self.fenced = False  # aborted by a time-out under a new epoch: must start again
        self.partitions: set[int] = set()
        self.seq = {p: 0 for p in PARTITIONS}
        self.generation = 0  # which transaction of this id a record belongs to


class TransactionsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="txn-model-"))
        self.s = Services(self.dir)
        self.s.topics.create_topic("t", {"partitions": len(PARTITIONS)})
        self.producers = {t: Producer() for t in TXNS}
        # per partition, in offset order: (value, None) for a plain record, or
        # (value, (txn, generation)) for a transactional one
        self.log: dict[int, list[tuple[bytes, tuple[str, int] | None]]] = {p: [] for p in PARTITIONS}
        self.outcome: dict[tuple[str, int], bool] = {}  # (txn, generation) -> committed
        self.n = 0

    def teardown(self) -> None:
        self.s.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _value(self) -> bytes:
        self.n += 1
        return b"v%d" % self.n

    def _ended(self, txn: str, committed: bool) -> None:
        p = self.producers[txn]
        self.outcome[(txn, p.generation)] = committed
        p.open, p.partitions = False, set()
        p.generation += 1

    # -- what a producer does -----------------------------------------------------------------

    @rule(txn=st.sampled_from(TXNS))
    def start_producer(self, txn: str) -> None:
        code, pid, epoch = outcome(self.s.loop, self.s.streams.init_transactional_producer(txn, 60_000))
        assert code is Code.NONE
        p = self.producers[txn]
        if p.open:  # the previous producer's open transaction is aborted first
            for partition in p.partitions:
                self.log[partition].append((b"", ("marker", 0)))
            self._ended(txn, False)
        assert pid == p.pid or p.pid < 0
        assert epoch > p.epoch
        p.pid, p.epoch, p.fenced = pid, epoch, False
        p.seq = {q: 0 for q in PARTITIONS}

    @precondition(lambda self: any(p.pid >= 0 and not p.fenced for p in self.producers.values()))
    @rule(data=st.data(), partition=st.sampled_from(PARTITIONS))
    def add_partition(self, data: st.DataObject, partition: int) -> None:
        txn = data.draw(st.sampled_from([t for t, p in self.producers.items() if p.pid >= 0 and not p.fenced]))
        p = self.producers[txn]
        code, per = self.s.streams.add_partitions_to_txn(txn, p.pid, p.epoch, [("t", partition)])
        assert code is Code.NONE and per == {("t", partition): Code.NONE}
        p.open = True
        p.partitions.add(partition)

    @precondition(lambda self: any(p.pid >= 0 and not p.fenced for p in self.producers.values()))
    @rule(data=st.data())
    def add_offsets(self, data: st.DataObject) -> None:
        """A consumer group joins the transaction (it may have no partition at all)."""
        txn = data.draw(st.sampled_from([t for t, p in self.producers.items() if p.pid >= 0 and not p.fenced]))
        p = self.producers[txn]
        assert self.s.streams.add_offsets_to_txn(txn, p.pid, p.epoch, "g") is Code.NONE
        p.open = True

    @precondition(lambda self: any(p.open and p.partitions for p in self.producers.values()))
    @rule(data=st.data(), records=st.integers(1, 3))
    def produce_in_transaction(self, data: st.DataObject, records: int) -> None:
        txn = data.draw(st.sampled_from([t for t, p in self.producers.items() if p.open and p.partitions]))
        p = self.producers[txn]
        partition = data.draw(st.sampled_from(sorted(p.partitions)))
        values = [self._value() for _ in range(records)]
        r = outcome(self.s.loop, self.s.streams.produce("t", partition, txn_batch(p.pid, p.epoch, p.seq[partition],
                                                                                   *values)))
        assert r.base_offset == len(self.log[partition]), r
        p.seq[partition] += records
        self.log[partition] += [(v, (txn, p.generation)) for v in values]

    @rule(partition=st.sampled_from(PARTITIONS))
    def produce_plain(self, partition: int) -> None:
        value = self._value()
        r = outcome(self.s.loop, self.s.streams.produce("t", partition, batch(value)))
        assert r.base_offset == len(self.log[partition])
        self.log[partition].append((value, None))

    @precondition(lambda self: any(p.open for p in self.producers.values()))
    @rule(data=st.data(), commit=st.booleans())
    def end(self, data: st.DataObject, commit: bool) -> None:
        txn = data.draw(st.sampled_from([t for t, p in self.producers.items() if p.open]))
        p = self.producers[txn]
        assert outcome(self.s.loop, self.s.streams.end_txn(txn, p.pid, p.epoch, commit)) is Code.NONE
        for partition in p.partitions:
            self.log[partition].append((b"", ("marker", 0)))  # the marker takes an offset
        self._ended(txn, commit)

    # -- what the broker does on its own ----------------------------------------------------------

    @precondition(lambda self: any(p.open for p in self.producers.values()))
    @rule()
    def time_out_every_open_transaction(self) -> None:
        txns = self.s.streams.txns
        assert txns.check(txns.clock() + 10**9) == sum(p.open for p in self.producers.values())
        self.s.loop.run_until(lambda: all(t.completing is None for t in txns.txns.values()))
        for txn, p in self.producers.items():
            if p.open:
                for partition in p.partitions:
                    self.log[partition].append((b"", ("marker", 0)))
                self._ended(txn, False)
                p.fenced = True  # its epoch was bumped: it must start again

    @rule()
    def restart(self) -> None:
        self.s.close()
        self.s = Services(self.dir)

    # -- what a read_committed reader sees --------------------------------------------------------

    @invariant()
    def read_committed_sees_the_model(self) -> None:
        for partition in PARTITIONS:
            expected = []
            for value, owner in self.log[partition]:
                if owner is None:
                    expected.append(value)
                elif owner[0] == "marker":
                    continue
                elif owner not in self.outcome:
                    break  # an open transaction: the last stable offset
                elif self.outcome[owner]:
                    expected.append(value)
            assert committed_values(self.s, "t", partition) == expected


TransactionsModel.TestCase.settings = settings(
    max_examples=30, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_the_coordinator_against_a_model = TransactionsModel.TestCase
