"""The AMQP 0-9-1 connection handshake, sans I/O: what we offer and accept (frame size,
channels, heartbeat, mechanisms, capabilities), the connection's states and the table
that moves between them, mixed into ``Connection`` (connection.py).

The handshake is ``TRANSITIONS``: (state, input class) -> (handler, next state), where
the inputs are the Connection methods a client sends on channel 0 and the shell's
answers (requests.py). A client method the table lacks is 503 COMMAND_INVALID
(``unexpected <method> in state <state>``), except in CLOSING, where everything but Close
and Close-Ok is dropped, as the spec says. An answer the table lacks is the shell's bug
(``LocalProtocolError``)::

    START --start-ok--> AUTHENTICATING --authenticated--> TUNE --tune-ok--> OPEN
      --open--> OPENING --vhost_opened--> RUNNING
    auth_failed: 403, vhost_refused: 530, bad tune-ok: 530; any error: CLOSING
    close (any state): Close-Ok, CLOSED;  close-ok: CLOSED

Tune: frame_max at most ours and at least 4096, channel_max at most ours (0: ours),
heartbeat as the client says.
"""

from __future__ import annotations

import enum
import logging
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

from pamqp import base
from pamqp import commands as C
from pamqp import decode as pdecode

from .codec import Decoder
from .errors import ACCESS_REFUSED, COMMAND_INVALID, NOT_ALLOWED, AMQPConnectionError, AMQPError, LocalProtocolError
from .requests import (
    Authenticate,
    Authenticated,
    AuthFailed,
    AuthFailure,
    OpenVHost,
    ScheduleHeartbeat,
    VHostFailure,
    VHostOpened,
    VHostRefused,
)

log = logging.getLogger(__name__)

FRAME_MAX = 131072  # RabbitMQ's default
FRAME_MIN = 4096
CHANNEL_MAX = 2047
HEARTBEAT = 60
MECHANISMS = ("PLAIN", "AMQPLAIN")
SERVER_PROPERTIES: dict[str, Any] = {
    "product": "logbus", "platform": "Python", "version": "0.1.0",
    "capabilities": {
        "publisher_confirms": True, "exchange_exchange_bindings": True, "basic.nack": True,
        "consumer_cancel_notify": True, "connection.blocked": True, "per_consumer_qos": True,
        "authentication_failure_close": True,
    },
}  # fmt: skip


class State(enum.Enum):
    START = "start"  # Start sent (once the protocol header arrived), waiting for Start-Ok
    AUTHENTICATING = "authenticating"  # Authenticate asked
    TUNE = "tune"  # Tune sent, waiting for Tune-Ok
    OPEN = "open"  # tuned, waiting for Connection.Open
    OPENING = "opening"  # OpenVHost asked
    RUNNING = "running"
    CLOSING = "closing"  # we sent Connection.Close: waiting for Close-Ok
    CLOSED = "closed"


def parse_credentials(mechanism: str, response: str | bytes | None) -> tuple[str, str] | None:
    """(user, password) from Start-Ok's response for PLAIN (``\\0user\\0password``) or
    AMQPLAIN (a field table without its length), or None when it does not parse. pamqp
    gives a longstr that is valid UTF-8 as text: encoded back, it is the bytes received."""
    raw = response.encode() if isinstance(response, str) else bytes(response or b"")
    if mechanism == "PLAIN":
        parts = raw.split(b"\x00")
        if len(parts) == 3:
            return parts[1].decode(errors="replace"), parts[2].decode(errors="replace")
        return None
    try:
        _, table = pdecode.field_table(struct.pack(">I", len(raw)) + raw)
    except Exception:
        return None
    return str(table.get("LOGIN", "")), str(table.get("PASSWORD", ""))


class Handshake:
    """The handshake's state, its answers and the handlers of ``TRANSITIONS``, for
    ``Connection``, which sends, fails and drops."""

    # the Connection's own, used here
    peer: str
    decoder: Decoder
    _pending: deque[Any]

    def _send_method(self, method: base.Frame, channel: int = 0) -> None:
        raise NotImplementedError  # the Connection's
    def _fail(self, e: AMQPError, wait_close_ok: bool = True) -> None:
        raise NotImplementedError  # the Connection's
    def _drop(self, reason: str) -> None:
        raise NotImplementedError  # the Connection's

    def __init__(self, *, heartbeat: int, frame_max: int) -> None:
        self.server_heartbeat = heartbeat
        self.server_frame_max = frame_max
        self.state = State.START
        self.frame_max = FRAME_MIN
        self.channel_max = CHANNEL_MAX
        self.heartbeat = 0
        self.mechanism = ""
        self.identity: Callable[[], str | None] = lambda: None  # the TLS client certificate's user, if any
        self.external: str | None = None  # ... as found when Start was sent
        self.user = ""
        self.vhost = ""  # set once the vhost is open
        self.cancel_notify = False  # the client has the consumer_cancel_notify capability
        self.blocked_notify = False  # ... and connection.blocked
        # what the client says of itself in start-ok's client properties (the operator's view)
        self.client_name = ""  # connection_name
        self.client_product = ""  # product
        self.client_version = ""  # version
        self._asked: Authenticate | OpenVHost | None = None  # a question not yet answered
        self._last_asked: Authenticate | OpenVHost | None = None  # what an answer answers

    # -- inputs: answers ------------------------------------------------------------------------

    def authenticated(self, user: str) -> None:
        self._answer(Authenticated(user))

    def auth_failed(self, reason: AuthFailure) -> None:
        self._answer(AuthFailed(reason))

    def vhost_opened(self, name: str) -> None:
        self._answer(VHostOpened(name))

    def vhost_refused(self, reason: VHostFailure) -> None:
        self._answer(VHostRefused(reason))

    def _answer(self, answer: Any) -> None:
        self._asked = None
        try:
            self._input(answer)
        except AMQPConnectionError as e:
            self._fail(e)
    # -- the table's handlers -------------------------------------------------------------------

    def _input(self, value: Any) -> None:
        entry = TRANSITIONS.get((self.state, type(value)))
        if entry is None:
            if not isinstance(value, base.Frame):
                raise LocalProtocolError(f"{type(value).__name__} in state {self.state.value}")
            if self.state is State.CLOSING:
                return
            raise AMQPConnectionError(COMMAND_INVALID, f"unexpected {value.name} in state {self.state.value}")
        handler, next_state = entry
        handler(self, value)
        if self.state is not State.CLOSED:
            self.state = next_state

    def _start_ok(self, m: C.Connection.StartOk) -> None:
        props = m.client_properties or {}
        caps: Any = props.get("capabilities")
        self.client_name = client_text(props.get("connection_name"))
        self.client_product = client_text(props.get("product"))
        self.client_version = client_text(props.get("version"))
        self.cancel_notify = isinstance(caps, dict) and bool(caps.get("consumer_cancel_notify"))
        self.blocked_notify = isinstance(caps, dict) and bool(caps.get("connection.blocked"))
        if m.mechanism == "EXTERNAL" and self.external is not None:  # RabbitMQ's rabbitmq_auth_mechanism_ssl
            self.mechanism = m.mechanism
            self._ask(Authenticate(m.mechanism, self.external, ""))
            return
        if m.mechanism not in MECHANISMS:
            raise AMQPConnectionError(ACCESS_REFUSED, f"unsupported authentication mechanism {m.mechanism!r}")
        self.mechanism = m.mechanism
        credentials = parse_credentials(m.mechanism, m.response)
        if credentials is None:
            log.info("amqp connection %s: login refused, malformed %s response", self.peer, m.mechanism)
            raise self._refused()
        self._ask(Authenticate(m.mechanism, *credentials))

    def _refused(self) -> AMQPConnectionError:
        return AMQPConnectionError(ACCESS_REFUSED, f"Login was refused using authentication mechanism "
                                   f"{self.mechanism}. For details see the broker logfile.")

    def _authenticated(self, a: Authenticated) -> None:
        self.user = a.user
        self._send_method(C.Connection.Tune(CHANNEL_MAX, self.server_frame_max, self.server_heartbeat))

    def _auth_failed(self, a: AuthFailed) -> None:
        if a.reason is AuthFailure.LOOPBACK_ONLY:
            asked = self._last_asked
            user = asked.user if isinstance(asked, Authenticate) else ""
            raise AMQPConnectionError(ACCESS_REFUSED, f"user '{user}' can only connect via localhost")
        raise self._refused()

    def _tune_ok(self, m: C.Connection.TuneOk) -> None:
        frame_max = m.frame_max or self.server_frame_max
        if frame_max < FRAME_MIN or frame_max > self.server_frame_max:
            raise AMQPConnectionError(NOT_ALLOWED, f"frame_max={frame_max} outside {FRAME_MIN}.."
                                      f"{self.server_frame_max}")
        self.frame_max = frame_max
        self.decoder.frame_max = frame_max
        self.channel_max = min(m.channel_max or CHANNEL_MAX, CHANNEL_MAX)
        self.heartbeat = m.heartbeat
        if m.heartbeat:
            self._pending.append(ScheduleHeartbeat(m.heartbeat))

    def _open(self, m: C.Connection.Open) -> None:
        self._ask(OpenVHost(m.virtual_host, self.user))

    def _vhost_opened(self, a: VHostOpened) -> None:
        self.vhost = a.name
        self._send_method(C.Connection.OpenOk())

    def _vhost_refused(self, a: VHostRefused) -> None:
        asked = self._last_asked
        name = asked.name if isinstance(asked, OpenVHost) else ""
        if a.reason is VHostFailure.NOT_FOUND:
            raise AMQPConnectionError(NOT_ALLOWED, f"vhost {name} not found", class_id=10, method_id=40)
        raise AMQPConnectionError(NOT_ALLOWED, f"access to vhost '{name}' refused for user '{self.user}'",
                                  class_id=10, method_id=40)

    def _update_secret(self, m: C.Connection.UpdateSecret) -> None:
        # RabbitMQ asks the auth backends whose state can expire; logbus's users, like
        # RabbitMQ's internal ones, cannot: the login's credentials stand, the answer is ok
        log.info("amqp connection %s: user '%s' updated secret, reason: %s", self.peer, self.user, m.reason)
        self._send_method(C.Connection.UpdateSecretOk())

    def _close(self, m: C.Connection.Close) -> None:
        self._send_method(C.Connection.CloseOk())
        self._drop("closed by the client")

    def _close_ok(self, m: C.Connection.CloseOk | C.Connection.Close) -> None:
        self._drop("closed")

    def _ignore(self, m: base.Frame) -> None:
        pass

    # -- questions ---------------------------------------------------------------------------------

    def _ask(self, question: Authenticate | OpenVHost) -> None:
        self._asked = self._last_asked = question
        self._pending.append(question)


Handler = Callable[[Handshake, Any], None]
_HANDSHAKE = (State.START, State.TUNE, State.OPEN, State.RUNNING)
TRANSITIONS: dict[tuple[State, type], tuple[Handler, State]] = {
    (State.START, C.Connection.StartOk): (Handshake._start_ok, State.AUTHENTICATING),
    (State.AUTHENTICATING, Authenticated): (Handshake._authenticated, State.TUNE),
    (State.AUTHENTICATING, AuthFailed): (Handshake._auth_failed, State.CLOSING),
    (State.TUNE, C.Connection.TuneOk): (Handshake._tune_ok, State.OPEN),
    (State.OPEN, C.Connection.Open): (Handshake._open, State.OPENING),
    (State.OPENING, VHostOpened): (Handshake._vhost_opened, State.RUNNING),
    (State.OPENING, VHostRefused): (Handshake._vhost_refused, State.CLOSING),
    (State.RUNNING, C.Connection.UpdateSecret): (Handshake._update_secret, State.RUNNING),
    (State.CLOSING, C.Connection.Close): (Handshake._close_ok, State.CLOSED),
    (State.CLOSING, C.Connection.CloseOk): (Handshake._close_ok, State.CLOSED),
    **{(s, C.Connection.Close): (Handshake._close, State.CLOSED) for s in _HANDSHAKE},
    **{(s, C.Connection.CloseOk): (Handshake._close_ok, State.CLOSED) for s in _HANDSHAKE},
    # a client has no business sending these; RabbitMQ ignores them
    **{(s, C.Connection.Blocked): (Handshake._ignore, s) for s in _HANDSHAKE},
    **{(s, C.Connection.Unblocked): (Handshake._ignore, s) for s in _HANDSHAKE},
}


def client_text(value: Any) -> str:
    """A client property shown to operators: text (a byte string decoded as UTF-8); ""
    when it is not text."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else ""
