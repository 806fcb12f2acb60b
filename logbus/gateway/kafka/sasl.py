"""Kafka SASL authentication, sans I/O: one connection's exchange (KIP-43, KIP-152).

A client sends SaslHandshake naming a mechanism, then its tokens in SaslAuthenticate
requests (after a v1 handshake; after v0, as bare size-prefixed frames, KIP-43's first
form, which protocol.py passes to ``authenticate`` alike), each answered with the
server's token:

    PLAIN          (RFC 4616) one token  "authzid NUL user NUL password"  -> ""
    SCRAM-SHA-256  (RFC 5802, 7677) two tokens: client-first -> server-first,
    SCRAM-SHA-512  client-final -> server-final ("v=" the server's signature)

The password is checked by ``Doors.authenticate`` (PLAIN) or against the user's SCRAM
credential (``Doors.scram_credential``: StoredKey and ServerKey, never the password);
``loopback_users`` apply as on every protocol. A failure is SASL_AUTHENTICATION_FAILED
(58) with a message that does not say whether the user exists (an unknown user goes
through SCRAM with a made-up salt, as RFC 5802 suggests), and Kafka closes the
connection after it; so does protocol.py. No re-authentication (KIP-368): the session has
no lifetime. Channel binding (``p=``) and Kafka's delegation tokens (``tokenauth``) are
refused.

Theory of operation: ``SaslSession`` is a small state machine, START -> HANDSHAKEN ->
(SCRAM: FIRST) -> DONE, or FAILED; ``handshake`` and ``authenticate`` return the error
code and token Kafka's responses carry, and set ``user`` once authenticated.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hmac
import logging
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.python.failure import Failure

from ...core.errors import LoopbackOnly, Refused
from ...core.types import SCRAM_ITERATIONS, ScramCredential, scram_signature, scram_verify
from .caller import Caller
from .codec import Request

if TYPE_CHECKING:
    from .handlers import KafkaHandlers

log = logging.getLogger(__name__)

NONE = 0
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58

PLAIN = "PLAIN"
MECHANISMS = (PLAIN, "SCRAM-SHA-256", "SCRAM-SHA-512")
FAILED = "Authentication failed: Invalid username or password"
_SECRET = os.urandom(32)  # the made-up salts of unknown users: stable within a process


class State(enum.Enum):
    START = "start"
    HANDSHAKEN = "handshaken"
    CHECKING = "checking"  # a PLAIN password is being checked (off the reactor)
    FIRST = "scram-first"  # the server-first message was sent
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Step:
    """What a SaslAuthenticate is answered with."""

    error_code: int
    auth_bytes: bytes = b""
    error_message: str | None = None

    @property
    def failed(self) -> bool:
        return self.error_code != NONE


class SaslFailure(Exception):
    """The client's token is refused; the message is for the log, the client gets ``FAILED``."""


class SaslSession:
    def __init__(self, mechanisms: tuple[str, ...], loopback: bool,
                 authenticate: Callable[[str, str, bool], Deferred[None]],
                 credential: Callable[[str, str], ScramCredential | None],
                 loopback_only: Callable[[str], bool],
                 nonce: Callable[[], str] | None = None) -> None:
        """``authenticate(user, password, loopback)`` fires, or fails with Refused
        (Doors.authenticate: maybe later, the password checked off the reactor);
        ``credential(user, mechanism)`` is the user's SCRAM credential or None;
        ``loopback_only(user)``: whether it may log in from loopback only."""
        self.mechanisms = mechanisms
        self.loopback = loopback
        self._authenticate = authenticate
        self._credential = credential
        self._loopback_only = loopback_only
        self._nonce = nonce or (lambda: base64.b64encode(os.urandom(18)).decode("ascii"))
        self.state = State.START
        self.raw = False  # SaslHandshake v0: the tokens come as bare size-prefixed frames (KIP-43)
        self.mechanism = ""
        self.user: str | None = None
        self.attempted = ""  # the user name the client gave, for the log
        self.why = ""  # why the last failure failed, for the log
        self._scram: _ScramFirst | None = None

    def handshake(self, mechanism: str) -> int:
        """SaslHandshake: the error code (the response also lists ``mechanisms``)."""
        if self.state is not State.START:
            return ILLEGAL_SASL_STATE
        if mechanism not in self.mechanisms:
            return UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        self.state = State.HANDSHAKEN
        return NONE

    def authenticate(self, token: bytes) -> Step | Deferred[Step]:
        """One SaslAuthenticate: the server's answer (PLAIN's when its password is checked)."""
        if self.state not in (State.HANDSHAKEN, State.FIRST):
            return Step(ILLEGAL_SASL_STATE, error_message=f"no SaslAuthenticate expected now ({self.state.value})")
        try:
            if self.mechanism == PLAIN:
                return self._plain(token)
            if self.state is State.HANDSHAKEN:
                return self._scram_first(token)
            return self._scram_final(token)
        except SaslFailure as e:
            self.state, self.why = State.FAILED, str(e)
            return Step(SASL_AUTHENTICATION_FAILED, error_message=FAILED)

    # -- PLAIN -----------------------------------------------------------------------------

    def _plain(self, token: bytes) -> Deferred[Step]:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslFailure("a PLAIN token is authzid NUL user NUL password")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslFailure("a PLAIN token that is not UTF-8") from None
        self.attempted = user
        if authzid and authzid != user:
            raise SaslFailure(f"authorization id {authzid!r} is not the user {user!r}")
        self.state = State.CHECKING
        return self._authenticate(user, password, self.loopback).addCallbacks(
            lambda _: self._logged_in(user), lambda f: self._refused(user, f))

    def _login(self, user: str, check: Callable[[], None]) -> None:
        """SCRAM's login: ``check`` raises Refused (the proof) or LoopbackOnly."""
        try:
            check()
        except LoopbackOnly:
            raise SaslFailure(f"user {user!r} can only connect from loopback") from None
        except Refused:
            raise SaslFailure(f"bad user name or password for {user!r}") from None
        self.user, self.state = user, State.DONE

    def _logged_in(self, user: str) -> Step:
        self.user, self.state = user, State.DONE
        return Step(NONE)

    def _refused(self, user: str, failure: Failure) -> Step:
        if failure.check(LoopbackOnly):
            self.why = f"user {user!r} can only connect from loopback"
        elif failure.check(Refused):
            self.why = f"bad user name or password for {user!r}"
        else:
            log.error("SASL login of %r failed: %s", user, failure.getTraceback())
            self.why = "internal error"
        self.state = State.FAILED
        return Step(SASL_AUTHENTICATION_FAILED, error_message=FAILED)

    # -- SCRAM -----------------------------------------------------------------------------

    def _scram_first(self, token: bytes) -> Step:
        text = _text(token)
        gs2, sep, bare = _split_gs2(text)
        if not sep:
            raise SaslFailure("a SCRAM client-first message without its GS2 header")
        flag, authzid = gs2.split(",", 1)
        if flag.startswith("p="):
            raise SaslFailure("channel binding is not supported")
        if flag not in ("n", "y"):
            raise SaslFailure(f"a bad GS2 channel binding flag {flag!r}")
        attrs = _attributes(bare)
        if "m" in attrs:
            raise SaslFailure("SCRAM extensions (m=) are not supported")
        user, client_nonce = _unescape(attrs.get("n", "")), attrs.get("r", "")
        self.attempted = user
        if not user or not client_nonce:
            raise SaslFailure("a SCRAM client-first message needs n= and r=")
        if authzid and (not authzid.startswith("a=") or _unescape(authzid[2:]) != user):
            raise SaslFailure(f"authorization id {authzid!r} is not the user {user!r}")
        if attrs.get("tokenauth") == "true":
            raise SaslFailure("delegation tokens are not supported")
        credential = self._credential(user, self.mechanism)
        known = credential is not None
        if credential is None:  # go on with a made-up salt: the failure comes at the proof
            size = 64 if self.mechanism.endswith("512") else 32
            salt = hmac.digest(_SECRET, user.encode(), "sha256")[:16]
            credential = ScramCredential(self.mechanism, salt, SCRAM_ITERATIONS, b"\x00" * size, b"\x00" * size)
        nonce = client_nonce + self._nonce()
        server_first = f"r={nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        self._scram = _ScramFirst(gs2 + ",", user, known, credential, bare, server_first, nonce)
        self.state = State.FIRST
        return Step(NONE, server_first.encode())

    def _scram_final(self, token: bytes) -> Step:
        first = self._scram
        assert first is not None
        text = _text(token)
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise SaslFailure("a SCRAM client-final message without its proof")
        attrs = _attributes(without_proof)
        if attrs.get("c") != base64.b64encode(first.gs2.encode()).decode():
            raise SaslFailure("the channel binding of client-final is not the GS2 header of client-first")
        if not attrs.get("r", "").endswith(first.nonce):  # as Kafka's check: librdkafka repeats its own part
            raise SaslFailure("client-final's nonce does not end with the server's")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except binascii.Error:
            raise SaslFailure("the proof is not base64") from None
        auth_message = f"{first.client_first_bare},{first.server_first},{without_proof}".encode()
        credential = first.credential

        def check() -> None:
            if not first.known or not scram_verify(credential, auth_message, proof):
                raise Refused(f"bad SCRAM proof for user {first.user!r}")
            if not self.loopback and self._loopback_only(first.user):
                raise LoopbackOnly(f"user {first.user!r} can only connect from loopback")

        self._login(first.user, check)
        signature = base64.b64encode(scram_signature(credential, auth_message)).decode()
        return Step(NONE, f"v={signature}".encode())


@dataclass(frozen=True, slots=True)
class _ScramFirst:
    gs2: str  # the GS2 header, with its trailing comma
    user: str
    known: bool
    credential: ScramCredential
    client_first_bare: str
    server_first: str
    nonce: str


def _text(token: bytes) -> str:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslFailure("a SCRAM message that is not UTF-8") from None


def _split_gs2(text: str) -> tuple[str, str, str]:
    """("n,", ",", "n=user,r=...") from "n,,n=user,r=..." (the header has two commas)."""
    first = text.find(",")
    second = text.find(",", first + 1) if first >= 0 else -1
    if second < 0:
        return text, "", ""
    return text[:second], ",", text[second + 1:]


def _attributes(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise SaslFailure(f"a malformed SCRAM attribute {part!r}")
        out.setdefault(key, value)
    return out


_BAD_ESCAPE = re.compile(r"=(?!2C|3D)")


def _unescape(name: str) -> str:
    """RFC 5802's saslname: "=2C" is ",", "=3D" is "="; any other "=" is malformed."""
    if _BAD_ESCAPE.search(name):
        raise SaslFailure(f"a malformed user name {name!r}")
    return name.replace("=2C", ",").replace("=3D", "=")


# -- the Kafka APIs ---------------------------------------------------------------------------


def install(handlers: KafkaHandlers) -> None:
    """Register SaslHandshake (v1: the tokens then come in SaslAuthenticate) and
    SaslAuthenticate with ``handlers``, offering ``handlers.sasl_mechanisms``."""
    doors = handlers.doors
    mechanisms = handlers.sasl_mechanisms

    def session(caller: Caller) -> SaslSession:
        return SaslSession(mechanisms, caller.loopback,
                           lambda user, password, loopback: doors.authenticate(user, password, loopback=loopback),
                           doors.scram_credential, doors.loopback_only)

    def sasl_handshake(req: Request, caller: Caller) -> Any:
        if caller.sasl is None:
            caller.sasl = session(caller)
        code = caller.sasl.handshake(req.body.mechanism)
        if code == ILLEGAL_SASL_STATE:
            caller.close_after_answer = True
        elif code == NONE:
            caller.sasl.raw = req.api_version == 0
        return SaslHandshakeResponse(error_code=code, mechanisms=list(mechanisms))

    def sasl_authenticate(req: Request, caller: Caller) -> Any:
        sasl = caller.sasl
        step = Step(ILLEGAL_SASL_STATE, error_message="SaslAuthenticate before SaslHandshake") if sasl is None \
            else sasl.authenticate(bytes(req.body.auth_bytes))
        if isinstance(step, Deferred):  # a PLAIN password, checked off the reactor
            return step.addCallback(answer, caller)
        return answer(step, caller)

    def answer(step: Step, caller: Caller) -> Any:
        sasl = caller.sasl
        response = SaslAuthenticateResponse(error_code=step.error_code, error_message=step.error_message,
                                            auth_bytes=step.auth_bytes, session_lifetime_ms=0)
        if step.failed:
            caller.close_after_answer = True  # as Kafka: the connection ends after a failed authentication
            delay = doors.connection_refused(caller.record, sasl.attempted if sasl else "",
                                              f"SASL {sasl.mechanism if sasl else '-'}: "
                                              f"{sasl.why if sasl and sasl.why else step.error_message}")
            if delay:  # repeated failures from this host: answered later (Kafka's
                return deferLater(handlers.reactor, delay, lambda: response)  # failed.authentication.delay)
        elif sasl is not None and sasl.state is State.DONE and sasl.user is not None:
            doors.connection_logged_in(caller.record, sasl.user, how=f"SASL {sasl.mechanism}")
        return response

    handlers.register(SaslHandshakeRequest, SaslHandshakeResponse, 0, 1, sasl_handshake)
    handlers.register(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2, sasl_authenticate)
