"""StateStore against a real RocksDB in a temporary directory."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logbus.core.state import (
    COLUMN_FAMILIES,
    TOPIC_PREFIX,
    DbClosedError,
    StateStore,
    topic_key,
)
from logbus.core.state_pb2 import TopicRecord


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    s = StateStore(tmp_path / "state")
    yield s
    s.close()


@pytest.mark.parametrize("cf", COLUMN_FAMILIES)
def test_put_get_delete_per_cf(store: StateStore, cf: str) -> None:
    assert store.get(cf, b"k") is None
    store.put(cf, b"k", b"v")
    store.put(cf, b"empty", b"")
    assert store.get(cf, b"k") == b"v"
    assert store.get(cf, b"empty") == b""
    for other in COLUMN_FAMILIES:
        if other != cf:
            assert store.get(other, b"k") is None
    store.delete(cf, b"k", sync=True)
    assert store.get(cf, b"k") is None
    store.delete(cf, b"never-written")  # deleting a missing key is fine


def test_unknown_cf_lists_known_names(store: StateStore) -> None:
    with pytest.raises(KeyError) as err:
        store.get("nope", b"k")
    assert all(name in str(err.value) for name in COLUMN_FAMILIES)
    with pytest.raises(KeyError):
        store.put("default", b"k", b"v")
    with pytest.raises(KeyError, match="metadata"), store.batch() as b:
        b.put("nope", b"k", b"v")


def test_protobuf_round_trip(store: StateStore) -> None:
    rec = TopicRecord(name="orders", partitions=3, config={"flush": "sync"}, created_ms=1_700)
    store.put("metadata", topic_key("orders"), rec, sync=True)
    assert store.get_msg("metadata", topic_key("orders"), TopicRecord) == rec
    assert store.get_msg("metadata", topic_key("missing"), TopicRecord) is None
    assert store.get("metadata", topic_key("orders")) == rec.SerializeToString(deterministic=True)


def test_topic_keys() -> None:
    assert topic_key("a").startswith(TOPIC_PREFIX)
    assert not topic_key("ab").startswith(topic_key("a"))
    assert topic_key("a") < topic_key("a.b") < topic_key("ab") < topic_key("b")
    assert topic_key("é") != topic_key("e")
    with pytest.raises(ValueError, match="NUL"):
        topic_key("a\x00b")


def test_scan_prefix_is_ordered_and_does_not_leak(store: StateStore) -> None:
    names = ["b", "ab", "a", "a.b", "a-b", "aa", "é"]
    for name in names:
        store.put("metadata", topic_key(name), TopicRecord(name=name))
    store.put("metadata", b"topia", b"neighbour below")
    store.put("metadata", b"topic", b"shorter than the prefix")
    store.put("metadata", b"topic\x01", b"neighbour above")
    store.put("offsets", topic_key("a"), b"other cf")

    got = [
        TopicRecord.FromString(v).name for _, v in store.scan_prefix("metadata", TOPIC_PREFIX)
    ]
    assert got == sorted(names, key=lambda n: n.encode())
    assert [k for k, _ in store.scan_prefix("metadata", topic_key("a"))] == [topic_key("a")]
    assert list(store.scan_prefix("metadata", topic_key("zz"))) == []
    everything = [k for k, _ in store.scan_prefix("metadata", b"")]
    assert everything == sorted(everything) and len(everything) == len(names) + 3


def test_scan_prefix_with_0xff_bytes(store: StateStore) -> None:
    keys = [b"\xfe", b"\xfe\xff", b"\xff", b"\xff\x00", b"\xff\xff", b"\xff\xff\x01", b"a\xff"]
    for k in keys:
        store.put("timers", k, k)
    assert [k for k, _ in store.scan_prefix("timers", b"\xff")] == [
        b"\xff",
        b"\xff\x00",
        b"\xff\xff",
        b"\xff\xff\x01",
    ]
    two = [k for k, _ in store.scan_prefix("timers", b"\xff\xff")]
    assert two == [b"\xff\xff", b"\xff\xff\x01"]
    assert [k for k, _ in store.scan_prefix("timers", b"\xfe")] == [b"\xfe", b"\xfe\xff"]
    assert [k for k, _ in store.scan_prefix("timers", b"a")] == [b"a\xff"]


def test_scan_bound_survives_allocation_churn(store: StateStore) -> None:
    # Regression: rocksdict's iterator reads the upper bound from memory its
    # ReadOptions owns; freeing it early made scans stop after one key.
    for i in range(100):
        store.put("queues", b"q\x00" + i.to_bytes(4, "big"), b"v")
    store.put("queues", b"q\x01", b"neighbour")
    scan = store.scan_prefix("queues", b"q\x00")
    first = next(scan)
    churn = [bytes([i % 256]) * 8 for i in range(20_000)]
    rest = list(scan)
    del churn
    expected = [b"q\x00" + i.to_bytes(4, "big") for i in range(100)]
    assert [first[0], *(k for k, _ in rest)] == expected


def test_batch_clean_exit_writes_all_cfs(store: StateStore) -> None:
    store.put("queues", b"gone", b"x")
    with store.batch(sync=True) as b:
        b.put("metadata", topic_key("t"), TopicRecord(name="t", partitions=1))
        b.put("offsets", b"o", b"1")
        b.put("timers", b"t", b"2")
        b.delete("queues", b"gone")
        assert store.get("offsets", b"o") is None  # nothing visible before commit
        assert len(b) == 4
    assert store.get_msg("metadata", topic_key("t"), TopicRecord) == TopicRecord(
        name="t", partitions=1
    )
    assert store.get("offsets", b"o") == b"1"
    assert store.get("timers", b"t") == b"2"
    assert store.get("queues", b"gone") is None


def test_batch_exception_writes_nothing(store: StateStore) -> None:
    store.put("sessions", b"keep", b"old")
    with pytest.raises(RuntimeError, match="boom"), store.batch() as b:
        b.put("sessions", b"keep", b"new")
        b.put("producers", b"p", b"1")
        b.delete("sessions", b"keep")
        raise RuntimeError("boom")
    assert store.get("sessions", b"keep") == b"old"
    assert store.get("producers", b"p") is None
    with pytest.raises(RuntimeError, match="already committed"):
        b.put("sessions", b"keep", b"late")


def test_reopen_after_close_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "state"
    s = StateStore(path)
    s.put("metadata", topic_key("t"), TopicRecord(name="t", partitions=2), sync=True)
    with s.batch() as b:
        b.put("offsets", b"g", b"7")
    scan = s.scan_prefix("metadata", TOPIC_PREFIX)
    assert next(scan)[0] == topic_key("t")
    s.close()
    s.close()  # idempotent
    with pytest.raises(DbClosedError):
        next(scan)
    with pytest.raises(DbClosedError):
        s.get("metadata", topic_key("t"))
    with pytest.raises(DbClosedError):
        s.batch()

    with StateStore(path) as again:
        assert again.get_msg("metadata", topic_key("t"), TopicRecord) == TopicRecord(
            name="t", partitions=2
        )
        assert again.get("offsets", b"g") == b"7"


def test_opens_database_with_unknown_column_family(tmp_path: Path) -> None:
    from rocksdict import Options, Rdict

    path = tmp_path / "state"
    StateStore(path).close()
    opts = Options(raw_mode=True)
    cfs = {n: Options(raw_mode=True) for n in COLUMN_FAMILIES}
    newer = Rdict(str(path), opts, column_families=cfs)
    newer.create_column_family("from_a_newer_version", Options(raw_mode=True)).close()
    newer.close()
    with StateStore(path) as s:  # must not fail with "column families not opened"
        s.put("metadata", b"k", b"v")
        with pytest.raises(KeyError):
            s.get("from_a_newer_version", b"k")


# -- model-based: random put/delete/batch sequences against a dict per CF -------------

_cfs = st.sampled_from(COLUMN_FAMILIES)
_keys = st.binary(max_size=4) | st.sampled_from([b"", b"\x00", b"\xff", b"a", b"ab"])
_values = st.binary(max_size=8)
_op = st.one_of(
    st.tuples(st.just("put"), _cfs, _keys, _values),
    st.tuples(st.just("delete"), _cfs, _keys, st.just(b"")),
)


class StateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="logbus-state-")
        self.store = StateStore(Path(self.dir))
        self.model: dict[str, dict[bytes, bytes]] = {cf: {} for cf in COLUMN_FAMILIES}
        self.reopens = 0

    @rule(cf=_cfs, key=_keys, value=_values, sync=st.booleans())
    def put(self, cf: str, key: bytes, value: bytes, sync: bool) -> None:
        self.store.put(cf, key, value, sync=sync)
        self.model[cf][key] = value

    @rule(cf=_cfs, key=_keys)
    def delete(self, cf: str, key: bytes) -> None:
        self.store.delete(cf, key)
        self.model[cf].pop(key, None)

    @rule(ops=st.lists(_op, max_size=6), fail=st.booleans())
    def batch(self, ops: list[tuple[str, str, bytes, bytes]], fail: bool) -> None:
        try:
            with self.store.batch() as b:
                for kind, cf, key, value in ops:
                    if kind == "put":
                        b.put(cf, key, value)
                    else:
                        b.delete(cf, key)
                if fail:
                    raise _Abort
        except _Abort:
            return
        for kind, cf, key, value in ops:
            if kind == "put":
                self.model[cf][key] = value
            else:
                self.model[cf].pop(key, None)

    @precondition(lambda self: self.reopens < 2)
    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = StateStore(Path(self.dir))
        self.reopens += 1

    @rule(cf=_cfs, key=_keys)
    def get(self, cf: str, key: bytes) -> None:
        assert self.store.get(cf, key) == self.model[cf].get(key)

    @rule(cf=_cfs, prefix=st.binary(max_size=2))
    def scan(self, cf: str, prefix: bytes) -> None:
        expected = sorted((k, v) for k, v in self.model[cf].items() if k.startswith(prefix))
        assert list(self.store.scan_prefix(cf, prefix)) == expected

    @invariant()
    def contents_match(self) -> None:
        for cf in COLUMN_FAMILIES:
            assert list(self.store.scan_prefix(cf, b"")) == sorted(self.model[cf].items())

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class _Abort(Exception):
    pass


TestStateMachine = StateMachine.TestCase
TestStateMachine.settings = settings(max_examples=30, stateful_step_count=20, deadline=None)
