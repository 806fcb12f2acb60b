"""The AMQP connection state machine (gateway/amqp/connection.py with handshake.py), sans
I/O: client bytes in, typed requests out, no broker, no reactor, no socket. A tiny shell
here answers the machine's questions from a dict of users and a set of vhosts; the
server's frames are read back with pamqp. Hypothesis drives every (state, Connection
method) pair and random frame sequences: an input the table lacks closes with the code it
should, and nothing ever raises."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body, encode, frame, header
from pamqp import commands as C

from logbus.gateway.amqp.codec import HEARTBEAT_FRAME
from logbus.gateway.amqp.connection import BLOCKED_PROBE, CLOSE_GRACE, Connection
from logbus.gateway.amqp.handshake import TRANSITIONS, State
from logbus.gateway.amqp.requests import (
    Authenticate,
    Authenticated,
    AuthFailed,
    AuthFailure,
    CloseChannel,
    CloseTransport,
    OpenChannel,
    OpenVHost,
    ReleaseAll,
    ScheduleHeartbeat,
    SendBytes,
    SetReading,
    VHostFailure,
    VHostOpened,
    VHostRefused,
)
from logbus.gateway.amqp.errors import PROTOCOL_HEADER, LocalProtocolError
from logbus.gateway.amqp.events import Ack, MethodReceived, Publish

HEADER = PROTOCOL_HEADER


def m(method: Any, channel: int = 0) -> bytes:
    return frame.marshal(method, channel)


def start_ok(user: str = "guest", password: str = "guest", *, caps: dict[str, Any] | None = None) -> bytes:
    props = {"capabilities": caps} if caps is not None else {}
    return m(C.Connection.StartOk(props, "PLAIN", f"\0{user}\0{password}"))


def publish(channel: int, payload: bytes = b"x") -> bytes:
    return (m(C.Basic.Publish(exchange="", routing_key="q"), channel)
            + m(header.ContentHeader(0, len(payload), C.Basic.Properties()), channel)
            + m(body.ContentBody(payload), channel))


class Shell:
    """Carries out the machine's questions against plain data; collects the rest."""

    def __init__(self, *, users: dict[str, str] | None = None, vhosts: dict[str, set[str]] | None = None,
                 loopback_only: frozenset[str] = frozenset(), loopback: bool = True, **kw: Any) -> None:
        self.conn = Connection(peer="test", **kw)
        self.users = {"guest": "guest"} if users is None else users
        self.vhosts = {"/": {"guest"}} if vhosts is None else vhosts  # vhost -> users with permissions
        self.loopback_only = loopback_only
        self.loopback = loopback
        self.asked: list[Any] = []

    def feed(self, *chunks: bytes) -> list[Any]:
        out: list[Any] = []
        for data in chunks:
            self.conn.receive_data(data)
            out += self.drain()
        return out

    def drain(self) -> list[Any]:
        out: list[Any] = []
        conn = self.conn
        while (r := conn.next_request()) is not None:
            if isinstance(r, Authenticate):
                self.asked.append(r)
                if self.users.get(r.user) != r.password:
                    conn.auth_failed(AuthFailure.REFUSED)
                elif r.user in self.loopback_only and not self.loopback:
                    conn.auth_failed(AuthFailure.LOOPBACK_ONLY)
                else:
                    conn.authenticated(r.user)
            elif isinstance(r, OpenVHost):
                self.asked.append(r)
                if r.name not in self.vhosts:
                    conn.vhost_refused(VHostFailure.NOT_FOUND)
                elif r.user not in self.vhosts[r.name]:
                    conn.vhost_refused(VHostFailure.ACCESS_REFUSED)
                else:
                    conn.vhost_opened(r.name)
            else:
                out.append(r)
        return out

    def login(self, vhost: str = "/", *, tune: C.Connection.TuneOk | None = None, **kw: Any) -> list[Any]:
        return self.feed(HEADER, start_ok(**kw), m(tune or C.Connection.TuneOk(2047, 131072, 0)),
                         m(C.Connection.Open(vhost)))


def same(a: Any, b: Any) -> bool:
    """pamqp methods compare by identity: compare their class and fields."""
    return type(a) is type(b) and vars(a) == vars(b)


def sent(requests: list[Any]) -> list[tuple[int, str, dict[str, Any]]]:
    """The frames of the SendBytes among ``requests``: channel, method name, fields."""
    return [(channel, f.name, vars(f)) for channel, f in methods(requests)]


def method(channel: int, f: Any) -> tuple[int, str, dict[str, Any]]:
    return channel, f.name, vars(f)


def methods(requests: list[Any]) -> list[tuple[int, Any]]:
    """The frames of the SendBytes among ``requests``, decoded."""
    data = b"".join(r.data for r in requests if isinstance(r, SendBytes))
    found = []
    while data:
        used, channel, f = frame.unmarshal(data)
        data = data[used:]
        found.append((channel, f))
    return found


def closed_with(requests: list[Any], code: int, text: str | None = None) -> C.Connection.Close:
    close = [f for _, f in methods(requests) if isinstance(f, C.Connection.Close)]
    assert len(close) == 1, requests
    assert close[0].reply_code == code, close[0]
    if text is not None:
        assert close[0].reply_text == text
    assert ReleaseAll() in requests
    return close[0]


# -- the handshake, step by step ----------------------------------------------------------------


def test_handshake_golden() -> None:
    s = Shell()
    out = s.feed(HEADER)
    [(channel, start)] = methods(out)
    assert channel == 0 and isinstance(start, C.Connection.Start)
    assert (start.version_major, start.version_minor, start.mechanisms, start.locales) == (0, 9, "PLAIN AMQPLAIN",
                                                                                            "en_US")
    assert start.server_properties["capabilities"]["publisher_confirms"] is True
    assert s.conn.state is State.START

    out = s.feed(start_ok(caps={"consumer_cancel_notify": True}))
    assert s.asked == [Authenticate("PLAIN", "guest", "guest")]
    [(_, tune)] = methods(out)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)
    assert s.conn.state is State.TUNE and s.conn.user == "guest" and s.conn.cancel_notify

    out = s.feed(m(C.Connection.TuneOk(0, 0, 0)))
    assert out == [] and s.conn.state is State.OPEN
    assert (s.conn.frame_max, s.conn.channel_max, s.conn.heartbeat) == (131072, 2047, 0)

    out = s.feed(m(C.Connection.Open("/")))
    assert s.asked[-1] == OpenVHost("/", "guest")
    assert sent(out) == [method(0, C.Connection.OpenOk())]
    assert s.conn.state is State.RUNNING and s.conn.vhost == "/"

    out = s.feed(m(C.Connection.Close(200, "bye", 0, 0)))
    assert sent(out) == [method(0, C.Connection.CloseOk())]
    assert out[-2:] == [ReleaseAll(), CloseTransport("closed by the client")]
    assert s.conn.state is State.CLOSED
    assert s.feed(m(C.Connection.Open("/"))) == []  # nothing after closed


def test_whole_handshake_in_one_read() -> None:
    s = Shell()
    out = s.feed(HEADER + start_ok() + m(C.Connection.TuneOk(2047, 131072, 0)) + m(C.Connection.Open("/"))
                 + m(C.Channel.Open(), 1))
    names = [type(f).__name__ for _, f in methods(out)]
    assert names == ["Start", "Tune", "OpenOk", "OpenOk"]
    assert OpenChannel(1) in out and s.conn.channels == {1}


def test_what_the_client_says_of_itself_is_kept() -> None:
    s = Shell()
    props = {"connection_name": "billing worker 7", "product": "Pika Python Client Library", "version": "1.4.4",
             "platform": "Python 3.11"}
    s.feed(HEADER, m(C.Connection.StartOk(props, "PLAIN", "\0guest\0guest")))
    assert (s.conn.client_name, s.conn.client_product, s.conn.client_version) == (
        "billing worker 7", "Pika Python Client Library", "1.4.4")
    bare = Shell()
    bare.feed(HEADER, m(C.Connection.StartOk({"product": 42, "version": "2.0"}, "PLAIN", "\0guest\0guest")))
    assert (bare.conn.client_name, bare.conn.client_product, bare.conn.client_version) == ("", "", "2.0")


def test_non_ascii_password() -> None:
    s = Shell(users={"zoë": "pässwörd 密码"}, vhosts={"/": {"zoë"}})
    out = s.feed(HEADER, start_ok("zoë", "pässwörd 密码"))
    assert s.asked == [Authenticate("PLAIN", "zoë", "pässwörd 密码")]
    assert isinstance(methods(out)[-1][1], C.Connection.Tune)


def test_amqplain() -> None:
    s = Shell(users={"alice": "pw"}, vhosts={"/": {"alice"}})
    table = encode.field_table({"LOGIN": "alice", "PASSWORD": "pw"})[struct.calcsize(">I"):]
    out = s.feed(HEADER, m(C.Connection.StartOk({}, "AMQPLAIN", table.decode("latin-1"))))
    assert s.asked == [Authenticate("AMQPLAIN", "alice", "pw")]
    assert isinstance(methods(out)[-1][1], C.Connection.Tune)


@pytest.mark.parametrize(("kw", "text"), [
    ({"password": "nope"}, "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details "
                           "see the broker logfile."),
    ({"user": "bob"}, "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details "
                      "see the broker logfile."),
])
def test_wrong_credentials(kw: dict[str, str], text: str) -> None:
    s = Shell()
    out = s.feed(HEADER, start_ok(**kw))
    closed_with(out, 403, text)
    assert out[-1] == CloseTransport("no close-ok", CLOSE_GRACE)
    assert s.conn.state is State.CLOSING
    # everything but Close-Ok is dropped now, then the socket goes
    assert s.feed(m(C.Connection.TuneOk(2047, 131072, 0)), m(C.Connection.Open("/"))) == []
    assert s.feed(m(C.Connection.CloseOk())) == [ReleaseAll(), CloseTransport("closed")]


def test_malformed_and_unsupported_logins() -> None:
    s = Shell()
    closed_with(s.feed(HEADER, m(C.Connection.StartOk({}, "PLAIN", "guest:guest"))), 403,
                "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the "
                "broker logfile.")
    assert s.asked == []  # never asked the user store
    s = Shell()
    closed_with(s.feed(HEADER, m(C.Connection.StartOk({}, "EXTERNAL", ""))), 403,
                "ACCESS_REFUSED - unsupported authentication mechanism 'EXTERNAL'")


def test_loopback_only_user() -> None:
    s = Shell(loopback_only=frozenset({"guest"}), loopback=False)
    closed_with(s.feed(HEADER, start_ok()), 403, "ACCESS_REFUSED - user 'guest' can only connect via localhost")
    s = Shell(loopback_only=frozenset({"guest"}), loopback=True)
    assert isinstance(methods(s.login())[-1][1], C.Connection.OpenOk)


def test_vhost_refused() -> None:
    s = Shell()
    close = closed_with(s.login("w"), 530, "NOT_ALLOWED - vhost w not found")
    assert (close.class_id, close.method_id) == (10, 40)
    s = Shell(vhosts={"/": {"guest"}, "v": set()})
    closed_with(s.login("v"), 530, "NOT_ALLOWED - access to vhost 'v' refused for user 'guest'")


@pytest.mark.parametrize(("frame_max", "expected"), [(0, 131072), (4096, 4096), (65536, 65536), (131072, 131072)])
def test_frame_max_negotiation(frame_max: int, expected: int) -> None:
    s = Shell()
    s.login(tune=C.Connection.TuneOk(0, frame_max, 0))
    assert s.conn.frame_max == expected and s.conn.decoder.frame_max == expected


@pytest.mark.parametrize("frame_max", [1, 4095, 131073])
def test_frame_max_out_of_range(frame_max: int) -> None:
    s = Shell()
    out = s.login(tune=C.Connection.TuneOk(0, frame_max, 0))
    closed_with(out, 530, f"NOT_ALLOWED - frame_max={frame_max} outside 4096..131072")
    assert s.asked == [Authenticate("PLAIN", "guest", "guest")]  # Open was dropped


def test_server_limits_are_settings() -> None:
    s = Shell(frame_max=8192, heartbeat=5)
    out = s.feed(HEADER, start_ok())
    tune = methods(out)[-1][1]
    assert (tune.frame_max, tune.heartbeat) == (8192, 5)
    closed_with(s.feed(m(C.Connection.TuneOk(0, 8193, 5))), 530)


@pytest.mark.parametrize(("asked", "negotiated"), [(0, 2047), (1, 1), (2, 2), (2047, 2047), (65535, 2047)])
def test_channel_max_negotiation(asked: int, negotiated: int) -> None:
    s = Shell()
    s.login(tune=C.Connection.TuneOk(asked, 131072, 0))
    assert s.conn.channel_max == negotiated


def test_channel_max_counts_open_channels() -> None:
    s = Shell()
    s.login(tune=C.Connection.TuneOk(2, 131072, 0))
    out = s.feed(m(C.Channel.Open(), 7), m(C.Channel.Open(), 300))  # any numbers, two of them
    assert out.count(OpenChannel(7)) == out.count(OpenChannel(300)) == 1
    out = s.feed(m(C.Channel.Open(), 1))
    closed_with(out, 530, "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)")
    s = Shell()
    s.login(tune=C.Connection.TuneOk(2, 131072, 0))
    s.feed(m(C.Channel.Open(), 1), m(C.Channel.Open(), 2), m(C.Channel.Close(200, "", 0, 0), 1))
    assert OpenChannel(3) in s.feed(m(C.Channel.Open(), 3))  # a closed one does not count


def test_heartbeats() -> None:
    s = Shell()
    out = s.login(tune=C.Connection.TuneOk(0, 0, 10))
    assert ScheduleHeartbeat(10) in out
    assert s.feed(HEARTBEAT_FRAME) == []  # taken, nothing to do
    s.conn.heartbeat_due(silent=5, idle=4.9)
    assert s.drain() == []
    s.conn.heartbeat_due(silent=5, idle=5)
    assert s.drain() == [SendBytes(HEARTBEAT_FRAME)]
    s.conn.heartbeat_due(silent=20.5, idle=5)
    assert s.drain() == [ReleaseAll(), CloseTransport("missed heartbeats")]
    s = Shell()
    assert not any(isinstance(r, ScheduleHeartbeat) for r in s.login())


def test_blocked_connection_is_not_dropped_for_silence() -> None:
    s = Shell()
    s.login(tune=C.Connection.TuneOk(0, 0, 10), caps={"connection.blocked": True})
    s.feed(m(C.Channel.Open(), 1))
    out = s.feed(publish(1))
    assert [r for r in out if isinstance(r, Publish)][0].channel == 1
    s.conn.resource_alarm("low on memory")
    out = s.drain()
    assert sent(out) == [method(0, C.Connection.Blocked("low on memory"))] and out[-1] == SetReading(False)
    s.conn.heartbeat_due(silent=100, idle=0)
    assert s.drain() == []
    s.conn.resource_alarm(None)
    out = s.drain()
    assert sent(out) == [method(0, C.Connection.Unblocked())] and out[-1] == SetReading(True)


def test_blocked_connection_is_probed_with_heartbeats() -> None:
    """Not read for an alarm, a connection gets a heartbeat frame after BLOCKED_PROBE s of
    silence, though it negotiated none: a client gone meanwhile answers it with a reset."""
    s = Shell()
    s.login()  # heartbeat 0
    s.feed(m(C.Channel.Open(), 1))
    s.conn.probe_due(idle=BLOCKED_PROBE)
    assert s.drain() == []  # read: nothing to find out
    s.feed(publish(1))
    s.conn.resource_alarm("low on memory")
    assert s.drain() == [SetReading(False)]
    s.conn.probe_due(idle=BLOCKED_PROBE - 0.1)
    assert s.drain() == []
    s.conn.probe_due(idle=BLOCKED_PROBE)
    assert s.drain() == [SendBytes(HEARTBEAT_FRAME)]
    s.conn.resource_alarm(None)
    assert s.drain() == [SetReading(True)]
    s.conn.probe_due(idle=100)
    assert s.drain() == []


def test_first_publish_under_an_alarm_blocks_after_the_read() -> None:
    s = Shell()
    s.login()
    s.conn.resource_alarm("low on disk")
    assert s.drain() == []  # has not published: a consumer goes on
    out = s.feed(m(C.Channel.Open(), 1) + publish(1) + publish(1))
    assert isinstance(out[-2], list) and len(out[-2]) == 2  # the run, then blocked
    assert out[-1] == SetReading(False) and methods(out[-2:]) == []  # no capability: not told
    assert s.conn.streamed == 2


def test_an_unfinished_body_under_an_alarm_blocks() -> None:
    """A first publish whose body is still arriving is memory held: blocked (as RabbitMQ
    blocks a connection that publishes), whether the alarm came before or during it."""
    big = publish(1, b"x" * 100_000)
    for alarm_first in (True, False):
        s = Shell()
        s.login()
        s.feed(m(C.Channel.Open(), 1))
        if alarm_first:
            s.conn.resource_alarm("low on memory")
            assert s.drain() == []
        out = s.feed(big[:50_000])  # method, header, half the body
        assert s.conn.decoder.assembling and not s.conn.published
        if not alarm_first:
            assert SetReading(False) not in out
            s.conn.resource_alarm("low on memory")
            out = s.drain()
        assert out[-1] == SetReading(False) and s.conn.blocked
        s.conn.resource_alarm(None)
        assert s.drain()[-1] == SetReading(True)
        out = s.feed(big[50_000:])
        assert [r.body for r in out if isinstance(r, Publish)] == [b"x" * 100_000]
        s.conn.connection_lost()
        assert s.conn.decoder.buffered == 0


@pytest.mark.parametrize(("frames", "code", "text"), [
    ([m(C.Connection.TuneOk(0, 0, 0))], 503, "COMMAND_INVALID - unexpected Connection.TuneOk in state start"),
    ([start_ok(), m(C.Connection.Open("/"))], 503, "COMMAND_INVALID - unexpected Connection.Open in state tune"),
    ([start_ok(), start_ok()], 503, "COMMAND_INVALID - unexpected Connection.StartOk in state tune"),
    ([start_ok(), m(C.Connection.TuneOk(0, 0, 0)), m(C.Connection.TuneOk(0, 0, 0))], 503,
     "COMMAND_INVALID - unexpected Connection.TuneOk in state open"),
    ([start_ok(), m(C.Channel.Open(), 1)], 503, "COMMAND_INVALID - channel 1 used before connection.open"),
    ([start_ok(), m(C.Connection.UpdateSecret("s", "r"))], 503,
     "COMMAND_INVALID - unexpected Connection.UpdateSecret in state tune"),
    ([start_ok(), m(header.ContentHeader(0, 1, C.Basic.Properties()))], 505, None),
    ([m(C.Connection.Start(0, 9, {}, "PLAIN", "en_US"))], 503,
     "COMMAND_INVALID - unexpected Connection.Start in state start"),
])
def test_bad_orders(frames: list[bytes], code: int, text: str | None) -> None:
    s = Shell()
    closed_with(s.feed(HEADER, *frames), code, text)


def test_bad_protocol_header() -> None:
    s = Shell()
    out = s.feed(b"AMQP\x00\x00\x08\x00")
    assert out == [SendBytes(HEADER), ReleaseAll(), CloseTransport("bad protocol header b'AMQP\\x00\\x00\\x08\\x00'")]


def test_channels() -> None:
    s = Shell()
    s.login()
    out = s.feed(m(C.Channel.Open(), 1))
    assert out[0] == OpenChannel(1) and sent(out) == [method(1, C.Channel.OpenOk())]
    out = s.feed(m(C.Queue.Declare(queue="q"), 1))
    [r] = out  # for the Channel
    assert isinstance(r, MethodReceived) and r.channel == 1 and same(r.method, C.Queue.Declare(queue="q"))
    ack = m(C.Basic.Ack(1, False), 1)
    out = s.feed(publish(1) + publish(1) + ack + ack + m(C.Basic.Ack(3, False), 1))
    assert [type(r).__name__ if not isinstance(r, list) else [type(e).__name__ for e in r] for r in out] == [
        ["Publish", "Publish"], ["Ack", "Ack", "Ack"]]
    assert s.conn.streamed == 5
    out = s.feed(m(C.Channel.Open(), 1))
    close = closed_with(out, 504, "CHANNEL_ERROR - second 'channel.open' seen")
    assert (close.class_id, close.method_id) == (20, 10)


def test_channel_not_open() -> None:
    s = Shell()
    s.login()
    close = closed_with(s.feed(m(C.Queue.Declare(queue="q"), 2)), 504, "CHANNEL_ERROR - expected 'channel.open'")
    assert (close.class_id, close.method_id) == (50, 10)


def test_channel_close_and_channel_errors() -> None:
    from logbus.gateway.amqp.errors import AMQPChannelError, AMQPConnectionError

    s = Shell()
    s.login()
    s.feed(m(C.Channel.Open(), 1), m(C.Channel.Open(), 2))
    out = s.feed(m(C.Channel.Close(200, "", 0, 0), 1))
    assert out[0] == CloseChannel(1) and sent(out) == [method(1, C.Channel.CloseOk())]
    # the shell's Channel 2 failed: Channel.Close, then all but Close / Close-Ok on it is dropped
    s.conn.channel_error(AMQPChannelError(404, "no queue 'q'", channel=2, class_id=50, method_id=10))
    out = s.drain()
    assert out[0] == CloseChannel(2)
    assert sent(out) == [method(2, C.Channel.Close(404, "NOT_FOUND - no queue 'q'", 50, 10))]
    assert s.feed(publish(2), m(C.Queue.Declare(queue="q"), 2)) == []
    assert s.feed(m(C.Channel.CloseOk(), 2)) == []
    assert OpenChannel(2) in s.feed(m(C.Channel.Open(), 2))
    # a connection error while carrying out a read drops the rest of it
    s.conn.receive_data(m(C.Queue.Declare(queue="a"), 2) + m(C.Queue.Declare(queue="b"), 2))
    r = s.conn.next_request()
    assert isinstance(r, MethodReceived) and same(r.method, C.Queue.Declare(queue="a"))
    s.conn.connection_error(AMQPConnectionError(530, "bad"))
    out = s.drain()
    closed_with(out, 530, "NOT_ALLOWED - bad")
    assert not any(isinstance(r, MethodReceived) for r in out)


def test_force_close_and_shutdown() -> None:
    s = Shell()
    s.feed(HEADER)
    s.conn.shutdown()  # only a running connection is told
    assert s.drain() == []
    s = Shell()
    s.login()
    s.conn.force_close("user 'guest' is deleted")
    closed_with(s.drain(), 320, "CONNECTION_FORCED - user 'guest' is deleted")
    s.conn.shutdown()
    assert s.drain() == []


def test_update_secret() -> None:
    s = Shell()
    s.login()
    assert sent(s.feed(m(C.Connection.UpdateSecret("new", "refresh")))) == [method(0, C.Connection.UpdateSecretOk())]
    assert s.conn.state is State.RUNNING


def test_frames_after_a_question_wait_for_its_answer() -> None:
    """A password is checked off the reactor: until the answer, what the client sent after
    StartOk (a hostile or hasty client need not wait for Tune) is not acted on."""
    conn = Connection()
    conn.receive_data(HEADER + start_ok())
    assert isinstance(conn.next_request(), SendBytes)  # Start
    assert conn.next_request() == Authenticate("PLAIN", "guest", "guest")
    conn.receive_data(frame.marshal(C.Connection.TuneOk(2047, 131072, 0), 0)
                      + frame.marshal(C.Connection.Open("/"), 0))
    assert conn.next_request() is None  # not answered yet
    assert conn.next_request() is None
    with pytest.raises(LocalProtocolError):  # an answer to a question not asked is our bug
        conn.vhost_opened("/")
    conn.authenticated("guest")
    assert isinstance(conn.next_request(), SendBytes)  # Tune, then the waiting TuneOk and Open
    assert conn.next_request() == OpenVHost("/", "guest")


# -- every (state, input) pair ------------------------------------------------------------------

CLIENT_REACHABLE = (State.START, State.TUNE, State.OPEN, State.RUNNING, State.CLOSING)


def in_state(state: State) -> Shell:
    s = Shell()
    s.feed(HEADER)
    if state is not State.START:
        s.feed(start_ok())
    if state not in (State.START, State.TUNE):
        s.feed(m(C.Connection.TuneOk(2047, 131072, 0)))
    if state in (State.RUNNING, State.CLOSING):
        s.feed(m(C.Connection.Open("/")), m(C.Channel.Open(), 1))
    if state is State.CLOSING:
        s.conn.force_close("test")
        s.drain()
    assert s.conn.state is state
    return s


shortstr = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
CONNECTION_METHODS: dict[type, st.SearchStrategy[Any]] = {
    C.Connection.Start: st.builds(C.Connection.Start, st.just(0), st.just(9), st.just({}), shortstr, shortstr),
    C.Connection.StartOk: st.builds(C.Connection.StartOk, st.just({}), st.sampled_from(["PLAIN", "AMQPLAIN", "X"]),
                                    st.one_of(shortstr, st.just("\0guest\0guest"))),
    C.Connection.Secure: st.builds(C.Connection.Secure, shortstr),
    C.Connection.SecureOk: st.builds(C.Connection.SecureOk, shortstr),
    C.Connection.Tune: st.builds(C.Connection.Tune, u16, u32, u16),
    C.Connection.TuneOk: st.builds(C.Connection.TuneOk, u16, st.one_of(u32, st.sampled_from([0, 4096, 131072])),
                                   u16),
    C.Connection.Open: st.builds(C.Connection.Open, st.one_of(shortstr, st.just("/"))),
    C.Connection.OpenOk: st.just(C.Connection.OpenOk()),
    C.Connection.Close: st.builds(C.Connection.Close, u16, shortstr, u16, u16),
    C.Connection.CloseOk: st.just(C.Connection.CloseOk()),
    C.Connection.Blocked: st.builds(C.Connection.Blocked, shortstr),
    C.Connection.Unblocked: st.just(C.Connection.Unblocked()),
    C.Connection.UpdateSecret: st.builds(C.Connection.UpdateSecret, shortstr, shortstr),
    C.Connection.UpdateSecretOk: st.just(C.Connection.UpdateSecretOk()),
}
# what a handler may answer besides going on: 403 (login), 530 (tune-ok, vhost)
HANDLER_CODES = {C.Connection.StartOk: {403}, C.Connection.TuneOk: {530}, C.Connection.Open: {530}}


def test_every_connection_method_is_covered() -> None:
    spec = {cls for cls in vars(C.Connection).values() if isinstance(cls, type) and hasattr(cls, "index")}
    assert spec == set(CONNECTION_METHODS)
    assert {cls for _, cls in TRANSITIONS if cls.__module__ == C.__name__} <= spec


@pytest.mark.parametrize("state", CLIENT_REACHABLE, ids=lambda s: s.value)
@pytest.mark.parametrize("cls", list(CONNECTION_METHODS), ids=lambda c: c.name)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_every_state_and_method(state: State, cls: type, data: st.DataObject) -> None:
    method = data.draw(CONNECTION_METHODS[cls])
    s = in_state(state)
    out = s.feed(m(method))  # never raises
    closes = [f for _, f in methods(out) if isinstance(f, C.Connection.Close)]
    entry = TRANSITIONS.get((state, cls))
    if entry is None:
        if state is State.CLOSING:
            assert out == [] and s.conn.state is State.CLOSING
        else:
            closed_with(out, 503, f"COMMAND_INVALID - unexpected {cls.name} in state {state.value}")
            assert out[-1] == CloseTransport("no close-ok", CLOSE_GRACE)
            assert s.conn.state is State.CLOSING
        return
    if closes:
        assert closes[0].reply_code in HANDLER_CODES.get(cls, set()), closes
        assert s.conn.state is State.CLOSING
    elif s.conn.state is not State.CLOSED:
        assert s.conn.state is entry[1] or (state, s.conn.state) in {
            (State.START, State.TUNE), (State.OPEN, State.RUNNING)}  # the shell answered at once
    else:
        assert out[-1] in (CloseTransport("closed"), CloseTransport("closed by the client"))


ANSWERS = [Authenticated("guest"), AuthFailed(AuthFailure.REFUSED), VHostOpened("/"),
           VHostRefused(VHostFailure.NOT_FOUND)]


@pytest.mark.parametrize("state", CLIENT_REACHABLE, ids=lambda s: s.value)
@pytest.mark.parametrize("answer", ANSWERS, ids=lambda a: type(a).__name__)
def test_an_answer_nobody_asked_for(state: State, answer: Any) -> None:
    s = in_state(state)
    with pytest.raises(LocalProtocolError):
        s.conn._answer(answer)


# any channel, any method, any order: only the codes of the spec, never an exception
ANY_METHOD = st.sampled_from([
    C.Channel.Open(), C.Channel.Close(200, "", 0, 0), C.Channel.CloseOk(), C.Channel.Flow(True),
    C.Queue.Declare(queue="q"), C.Basic.Qos(0, 1, False), C.Basic.Ack(1, False), C.Basic.Nack(1, False, True),
    C.Basic.Reject(1, True), C.Basic.Deliver("t", 1, False, "", "q"), C.Confirm.Select(), C.Tx.Select(),
    C.Basic.Get(queue="q"), C.Connection.Close(200, "", 0, 0), C.Connection.CloseOk(), C.Connection.Blocked("x"),
    C.Connection.TuneOk(0, 0, 0), C.Connection.Open("/"), C.Connection.UpdateSecret("s", "r"),
])
FRAMES = st.one_of(
    st.tuples(ANY_METHOD, st.integers(0, 3)).map(lambda mc: m(*mc)),
    st.integers(0, 3).map(publish),
    st.just(HEARTBEAT_FRAME),
)
SPEC_CODES = {403, 503, 504, 505, 530}


@settings(max_examples=300, deadline=None)
@given(state=st.sampled_from(CLIENT_REACHABLE), frames=st.lists(FRAMES, max_size=12), one_read=st.booleans())
def test_random_frames(state: State, frames: list[bytes], one_read: bool) -> None:
    s = in_state(state)
    out = s.feed(b"".join(frames)) if one_read else s.feed(*frames)
    for channel, f in methods(out):
        if isinstance(f, C.Connection.Close):
            assert f.reply_code in SPEC_CODES, f
        if isinstance(f, C.Channel.Close):
            raise AssertionError(f"the machine itself never closes a channel: {f}")
    open_now = s.conn.channels
    assert not (open_now & s.conn.closing_channels)
    for r in out:
        if isinstance(r, list):
            assert r and all(type(e) is type(r[0]) and e.channel == r[0].channel for e in r)
            assert type(r[0]) in (Publish, Ack)
