"""Producer idempotence state against a model: whatever mix of new batches, retries
and epoch bumps a producer sends, each record is appended once, in sequence, and a
state rebuilt from the log's batch headers answers exactly as the live one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from logbus.core.log.batch import BatchInfo
from logbus.core.streams.producers import APPEND, DUPLICATE, FENCED, OUT_OF_ORDER, ProducerStates

steps = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(1, 5)),
        st.tuples(st.just("retry"), st.integers(0, 8)),
        st.just(("bump",)),
        st.tuples(st.just("stale"), st.integers(1, 3)),
    ),
    max_size=60,
)


def header(pid: int, epoch: int, seq: int, n: int, base: int) -> BatchInfo:
    return BatchInfo(base, 100, n - 1, 0, 0, 0, pid, epoch, seq, n)


@given(steps)
def test_each_record_once_in_sequence(script: list[tuple]) -> None:
    states = ProducerStates()
    log: list[BatchInfo] = []
    sent: list[tuple[int, int, int]] = []  # (epoch, first_seq, count) of every batch sent
    epoch, seq, offset = 0, 0, 0
    for step in script:
        if step[0] == "send":
            batch = (epoch, seq, step[1])
            seq += step[1]
        elif step[0] == "retry":
            if not sent:
                continue
            batch = sent[-1 - step[1] % len(sent)]
        elif step[0] == "bump":
            epoch, seq = epoch + 1, 0
            continue
        else:  # an older epoch's producer (a zombie) sends
            if epoch == 0:
                continue
            batch = (epoch - 1, 0, step[1])
        e, first, n = batch
        v = states.check(7, e, first, n)
        if e < epoch and any(b.producer_epoch == epoch for b in log):
            assert v.kind == FENCED
        if v.kind == APPEND:
            states.record(7, e, first, n, offset)
            log.append(header(7, e, first, n, offset))
            offset += n
        elif v.kind == DUPLICATE:
            original = [b for b in log if b.producer_epoch == e and b.base_sequence == first]
            assert original and original[-1].base_offset == v.base_offset
        if step[0] == "send" and v.kind != APPEND:
            assert v.kind == OUT_OF_ORDER  # a fresh batch is only refused for a gap
        sent.append(batch)
    # the log holds each epoch's records once, in sequence, from 0
    by_epoch: dict[int, list[BatchInfo]] = {}
    for b in log:
        by_epoch.setdefault(b.producer_epoch, []).append(b)
    for batches in by_epoch.values():
        expect = 0
        for b in batches:
            assert b.base_sequence == expect
            expect += b.records_count
    # a state rebuilt from the log answers like the live one
    rebuilt = ProducerStates()
    rebuilt.rebuild(log)
    for e, first, n in sent[-10:] + [(epoch, seq, 1), (epoch, seq + 1, 1)]:
        assert rebuilt.check(7, e, first, n) == states.check(7, e, first, n)


def test_basics() -> None:
    s = ProducerStates()
    assert s.check(-1, 0, -1, 3).kind == APPEND  # not idempotent: always appended
    # a producer with no state (new, or expired): taken at any sequence, as Kafka since 2.5
    assert s.check(5, 0, 3, 1).kind == APPEND
    assert s.check(5, 0, 0, 2).kind == APPEND
    s.record(5, 0, 0, 2, 100)
    assert s.check(5, 0, 0, 2).kind == DUPLICATE and s.check(5, 0, 0, 2).base_offset == 100
    assert s.check(5, 0, 3, 1).kind == OUT_OF_ORDER
    assert s.check(5, 0, 2, 1).kind == APPEND
    s.record(5, 1, 0, 1, 103)  # new epoch
    assert s.check(5, 0, 2, 1).kind == FENCED
