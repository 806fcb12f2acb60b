"""Publisher confirms (gateway/amqp/confirms.py) against a model of what the client must
be told. The tracker is driven as channel.py drives it: outcomes as they come (``ok``,
``ok_range``, ``failed``: a nack is sent when it says so), and a flush at the end of a
tick when any of them said one is due. The client's side is the spec's: a nack settles
its number, an ack settles its number, or with ``multiple`` every number up to it not
yet settled.

What must hold after every step: each number is told once, an ack only for a durable
publish and a nack only for a refused one, at once for a nack; and after a tick every
publish below the first one without an outcome has been told (no later: a gap holds the
acks after it back)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from logbus.gateway.amqp.confirms import Confirms

N = 24
seqs = st.integers(1, N)
OPS = st.lists(st.one_of(
    st.tuples(st.just("ok"), seqs),
    st.tuples(st.just("range"), seqs, st.integers(0, 6)),
    st.tuples(st.just("failed"), seqs),
    st.tuples(st.just("tick")),
), max_size=80)


class Client:
    def __init__(self) -> None:
        self.told: dict[int, str] = {}
        self.last_ack = 0

    def nack(self, seq: int) -> None:
        assert seq not in self.told, f"nack {seq} told twice"
        self.told[seq] = "nack"

    def ack(self, seq: int, multiple: bool) -> None:
        assert seq > self.last_ack, "acks go up"
        self.last_ack = seq
        if multiple:
            covered = [s for s in range(1, seq + 1) if s not in self.told]
            assert len(covered) > 1 or covered == [seq], "multiple ack of one number"
        else:
            assert seq not in self.told, f"ack {seq} told twice"
            covered = [seq]
        for s in covered:
            self.told[s] = "ack"


def drive(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    c = Confirms()
    client = Client()
    outcome: dict[int, str] = {}
    due = False

    def ok(seq: int) -> bool:
        outcome.setdefault(seq, "ok")
        return c.ok(seq)

    for op in ops:
        kind = op[0]
        if kind == "ok":
            due = ok(op[1]) or due
        elif kind == "range":
            first, last = op[1], op[1] + op[2]
            for s in range(first, last + 1):
                outcome.setdefault(s, "ok")
            due = c.ok_range(first, last) or due
        elif kind == "failed":
            seq = op[1]
            if outcome.get(seq) == "ok":
                continue  # a publish is refused when it is routed, before it can be durable
            outcome[seq] = "failed"
            if c.failed(seq):
                client.nack(seq)
                due = True
        elif due:
            due = False
            ack = c.flush()
            if ack is not None:
                client.ack(*ack)
        for s, told in client.told.items():
            assert outcome.get(s) == {"ack": "ok", "nack": "failed"}[told], (s, told, outcome.get(s))
        for s, o in outcome.items():
            if o == "failed":
                assert client.told.get(s) == "nack", f"refused {s} not nacked at once"
        if kind == "tick":
            gap = 1
            while gap in outcome:
                gap += 1
            assert all(s in client.told for s in range(1, gap)), (gap, client.told)
            assert not any(t == "ack" and s > gap for s, t in client.told.items())


@settings(max_examples=500, deadline=None)
@given(OPS)
def test_confirms_against_the_model(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    drive(ops + [("tick",)])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=20), st.data())
def test_batches_in_order(sizes: list[int], data: st.DataObject) -> None:
    """The common case: runs of publishes, durable in order (ok_range), some refused."""
    ops: list[tuple] = []  # type: ignore[type-arg]
    seq = 1
    for n in sizes:
        refused = data.draw(st.sets(st.integers(seq, seq + n - 1), max_size=2))
        ops += [("failed", s) for s in sorted(refused)]
        ops += [("range", seq, n - 1)]
        if data.draw(st.booleans()):
            ops.append(("tick",))
        seq += n
    drive(ops + [("tick",)])


def test_one_ack_per_tick() -> None:
    c = Confirms()
    assert c.ok_range(1, 100)
    assert c.ok(101)
    assert c.flush() == (101, True)
    assert c.flush() is None
    assert c.ok(102)
    assert c.flush() == (102, False)


def test_gap_holds_acks_back() -> None:
    c = Confirms()
    assert c.ok(2) and c.ok(3)
    assert c.flush() is None
    assert c.ok(1)
    assert c.flush() == (3, True)


def test_nack_once_and_ack_over_it() -> None:
    c = Confirms()
    assert c.failed(2)
    assert not c.failed(2)
    assert not c.ok(2)  # durable after it was refused: still a nack
    c.ok_range(1, 1)
    c.ok_range(3, 4)
    assert c.flush() == (4, True)  # the client already settled 2 by its nack
    assert not c.failed(3)  # settled: too late


def test_no_ack_when_all_new_ones_were_nacked() -> None:
    c = Confirms()
    c.ok(1)
    assert c.flush() == (1, False)
    c.failed(2)
    assert c.flush() is None
    c.ok(3)
    assert c.flush() == (3, False)
