"""The read linger's hill climber (gateway/amqp/linger.py) against model clients: one
bound by its rate sends more the longer we wait, one bound by its window sends the same
whatever we do. No sockets, no clocks: a model turns the linger into messages per read.
Then the rule of whether to linger at all: never after a read whose publishes went at
once to a consumer with credit, whose deliveries are written before the turn's log drain
(sessions over a real broker, fed bytes, no sockets)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pamqp import body, frame, header
from pamqp import commands as C

from logbus.gateway.amqp.model.forms import AMQP_FORMS
from logbus.core.broker import Broker
from logbus.gateway.amqp.linger import HOLD, MAX_BYTES, MIN_MESSAGES, WINDOW, LingerTuner, lingers
from logbus.gateway.amqp.session import Prompt, Session
from tests.loop import LoopReactor

HEADER = b"AMQP\x00\x00\x09\x01"

BASE = 0.001
TOP = 0.008


def rate_bound(per_ms: float, work_ms: float = 0.5) -> Callable[[float], int]:
    """A client that sends ``per_ms`` messages a millisecond: a read after a linger of L
    holds what arrived during L and during the previous read's processing."""
    return lambda linger: max(2, round(per_ms * (linger * 1000 + work_ms)))


def window_bound(window: int, per_ms: float = 15.0) -> Callable[[float], int]:
    """A client that may have ``window`` messages unanswered: it sends them and waits."""
    return lambda linger: min(window, max(2, round(per_ms * (linger * 1000 + 0.5))))


def drive(tuner: LingerTuner, client: Callable[[float], int], reads: int) -> list[int]:
    levels = []
    for _ in range(reads):
        levels.append(tuner.level)
        tuner.lingered(client(tuner.linger))
    return levels


def test_a_rate_bound_client_climbs_to_the_longest_linger_and_stays() -> None:
    tuner = LingerTuner(BASE, TOP)
    levels = drive(tuner, rate_bound(15), 4000)
    assert tuner.top_level == 8
    assert levels.index(8) <= 4 * WINDOW  # 1 -> 2 -> 4 -> 8, one window each
    after = levels[4 * WINDOW:]
    assert after.count(8) / len(after) >= HOLD / (HOLD + 1) - 0.01  # a probe down now and then


def test_a_window_bound_client_keeps_the_shortest_linger() -> None:
    for window in (2, 3, 10):
        tuner = LingerTuner(BASE, TOP)
        levels = drive(tuner, window_bound(window), 4000)
        assert max(levels) <= 2  # only probes, and each fails
        assert levels.count(1) / len(levels) >= HOLD / (HOLD + 1) - 0.01


def test_a_window_between_settles_where_the_window_fills() -> None:
    # 15/ms: 1 ms holds ~22 messages, so a window of 40 fills at 2 ms; 4 ms gains nothing
    tuner = LingerTuner(BASE, TOP)
    levels = drive(tuner, window_bound(40), 4000)
    tail = levels[1000:]
    assert max(tail) <= 4 and tail.count(2) / len(tail) >= 0.85


def test_it_follows_a_client_that_turns_window_bound_and_back() -> None:
    tuner = LingerTuner(BASE, TOP)
    drive(tuner, rate_bound(15), 500)
    assert tuner.level == 8
    levels = drive(tuner, window_bound(2), (HOLD + 1 + 4) * WINDOW)
    assert levels[-1] == 1  # back at the base within a hold and three probes down
    drive(tuner, rate_bound(15), (HOLD + 1 + 4) * WINDOW)
    assert tuner.level == 8


def test_noise_does_not_keep_a_rate_bound_client_down() -> None:
    rng = random.Random(7)
    clean = rate_bound(15)
    tuner = LingerTuner(BASE, TOP)
    levels = drive(tuner, lambda linger: max(2, round(clean(linger) * rng.uniform(0.7, 1.3))), 6000)
    assert sum(level == 8 for level in levels[1000:]) / 5000 >= 0.85


def test_a_fixed_linger_never_moves() -> None:
    tuner = LingerTuner(BASE, BASE)
    assert tuner.top_level == 1
    assert set(drive(tuner, rate_bound(15), 1000)) == {1}
    assert LingerTuner(BASE, 0.0).top_level == 1  # a top below the base: the base


def test_top_rounds_down_to_a_power_of_two_of_the_base() -> None:
    assert LingerTuner(0.001, 0.006).top_level == 4
    assert LingerTuner(0.002, 0.008).top_level == 4
    assert LingerTuner(0.0015, 0.012).top_level == 8


@given(st.lists(st.integers(2, 10_000), max_size=3000), st.sampled_from([1, 2, 3, 8, 16]))
def test_level_stays_a_power_of_two_within_bounds(reads: list[int], top: int) -> None:
    tuner = LingerTuner(BASE, BASE * top)
    for n in reads:
        tuner.lingered(n)
        assert 1 <= tuner.level <= tuner.top_level <= top
        assert tuner.level & (tuner.level - 1) == 0
        assert tuner.linger <= BASE * top * (1 + 1e-9)


# -- whether to linger at all (linger.lingers, decision 0012) ---------------------------


def test_only_a_pipelined_read_that_fed_no_consumer_lingers() -> None:
    assert lingers(MIN_MESSAGES, 100, fed=False)
    assert not lingers(MIN_MESSAGES - 1, 100, fed=False)  # a client waiting for each reply
    assert not lingers(50, MAX_BYTES, fed=False)  # the read filled the buffer: more waits
    assert not lingers(50, 100, fed=True)  # a consumer waits for what the next read holds


class Client:
    """One AMQP connection (``Session``) over a real broker, channel 1 open, fed raw
    frames; every client of a test shares one ``Prompt``, as a gateway's sessions do."""

    def __init__(self, broker: Broker, loop: LoopReactor, prompt: Prompt) -> None:
        self.loop = loop
        self.broker = broker
        self.out: list[bytes] = []
        self.conn = Session(broker.doors, broker.queue_model, send=self.out.append, close=lambda: None,
                            reading=lambda on: None, reactor=loop, peer_is_loopback=True, prompt=prompt)
        self.read(HEADER, frame.marshal(C.Connection.StartOk({}, "PLAIN", "\0guest\0guest"), 0),
                  frame.marshal(C.Connection.TuneOk(2047, 131072, 0), 0),
                  frame.marshal(C.Connection.Open("/"), 0), frame.marshal(C.Channel.Open(), 1))
        self.settle()

    def read(self, *frames: bytes) -> int:
        """One read of these frames; the end of the turn (log drain, confirms) not yet run."""
        return self.conn.data_received(b"".join(frames))

    def settle(self) -> None:
        self.loop.run_until(lambda: self.broker.password_worker.pending == 0)  # a login's check
        while self.loop.run_once():
            pass

    def methods(self) -> list[Any]:
        data = b"".join(self.out)
        self.out.clear()
        found = []
        while data:
            used, _, f = frame.unmarshal(data)
            data = data[used:]
            found.append(f)
        return found


def publishes(queue: str, n: int) -> list[bytes]:
    props = C.Basic.Properties(delivery_mode=2)
    return [frame.marshal(C.Basic.Publish(routing_key=queue), 1)
            + frame.marshal(header.ContentHeader(0, 1, props), 1) + frame.marshal(body.ContentBody(b"x"), 1)
            for _ in range(n)]


def test_publishes_delivered_to_a_waiting_consumer_do_not_linger_and_go_out_before_the_drain(
        tmp_path: Path) -> None:
    loop = LoopReactor()
    broker = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)  # flush "sync": a confirm waits for the drain's fdatasync
    broker.start()
    try:
        prompt = Prompt()
        pub, sub = Client(broker, loop, prompt), Client(broker, loop, prompt)
        pub.read(frame.marshal(C.Confirm.Select(), 1),
                 frame.marshal(C.Queue.Declare(queue="idle", durable=True), 1),
                 frame.marshal(C.Queue.Declare(queue="busy", durable=True), 1),
                 frame.marshal(C.Queue.Declare(queue="nobody", durable=True), 1))
        sub.read(frame.marshal(C.Basic.Qos(prefetch_count=3), 1),
                 frame.marshal(C.Basic.Consume(queue="idle", consumer_tag="c1"), 1),
                 frame.marshal(C.Basic.Consume(queue="busy", consumer_tag="c2"), 1))
        pub.settle()
        pub.methods()
        sub.methods()

        # a consumer with credit: the read fed it, so it does not linger; its deliveries
        # are listed, and written by send_now before the turn ends (no confirm yet)
        streamed = pub.read(*publishes("idle", 3))
        assert streamed == 3 and pub.conn.fed
        assert not lingers(streamed, 1000, pub.conn.fed)
        assert prompt.sessions == [sub.conn]
        prompt.send_now()
        assert [type(m) for m in sub.methods()].count(C.Basic.Deliver) == 3
        assert not any(isinstance(m, C.Basic.Ack) for m in pub.methods())  # not durable yet
        assert not prompt.sessions and not prompt.active
        pub.settle()
        assert any(isinstance(m, C.Basic.Ack) for m in pub.methods())  # the drain confirmed them

        # c2 (prefetch 3 of its own) takes three of "busy" and is then full
        assert pub.read(*publishes("busy", 3)) == 3 and pub.conn.fed
        prompt.send_now()
        pub.settle()
        assert pub.read(*publishes("busy", 3)) == 3 and not pub.conn.fed  # c2 is busy: linger
        assert not prompt.sessions
        assert lingers(3, 1000, pub.conn.fed)
        # a queue nobody consumes
        assert pub.read(*publishes("nobody", 2)) == 2 and not pub.conn.fed
        pub.settle()
        assert [type(m) for m in sub.methods()].count(C.Basic.Deliver) == 3
    finally:
        broker.stop()
        while loop.run_once():
            pass
