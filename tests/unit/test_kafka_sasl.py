"""Kafka's SASL exchange, sans I/O (gateway/kafka/sasl.py): PLAIN and SCRAM against a
small user table, RFC 7677's test vector, every refusal, and a client written here from
RFC 5802 logging in with any name and password (Hypothesis)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Callable

from hypothesis import given
from twisted.internet.defer import Deferred, fail, succeed
from hypothesis import strategies as st

from logbus.core.access.scram import ScramCredential, derive
from logbus.core.errors import LoginRefused, LoopbackOnly
from logbus.gateway.kafka.sasl import (
    FAILED,
    ILLEGAL_SASL_STATE,
    NONE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    SaslSession,
    State,
    Step,
)

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def step_of(s: SaslSession, token: bytes) -> Step:
    """``s.authenticate(token)``'s Step: PLAIN answers with a Deferred (fired here: the
    table's check is immediate)."""
    answer = s.authenticate(token)
    if isinstance(answer, Deferred):
        box: list[Step] = []
        answer.addCallback(box.append)
        return box[0]
    return answer


class Users:
    def __init__(self, passwords: dict[str, str], loopback_only: tuple[str, ...] = ()) -> None:
        self.passwords = passwords
        self.only_loopback = loopback_only
        self.credentials: dict[tuple[str, str], ScramCredential] = {
            (u, m): derive(m, p) for u, p in passwords.items() for m in MECHANISMS[1:]}

    def authenticate(self, user: str, password: str, loopback: bool) -> Deferred[None]:
        """As Broker.authenticate: a Deferred (here fired at once)."""
        if self.passwords.get(user) != password:
            return fail(LoginRefused(f"bad user name or password for user '{user}'"))
        if user in self.only_loopback and not loopback:
            return fail(LoopbackOnly(f"user '{user}' can only connect via localhost"))
        return succeed(None)

    def session(self, loopback: bool = True, nonce: Callable[[], str] | None = None) -> SaslSession:
        return SaslSession(MECHANISMS, loopback, self.authenticate, lambda u, m: self.credentials.get((u, m)),
                           lambda u: u in self.only_loopback, nonce)


def scram_client(mechanism: str, user: str, password: str, session: SaslSession,
                 client_nonce: str = "fyko+d2lbbFgONRv9qkxdawL") -> tuple[int, bytes, bytes]:
    """RFC 5802's client side: (error code of the last step, server-final, expected server-final)."""
    h = "sha512" if mechanism.endswith("512") else "sha256"
    name = user.replace("=", "=3D").replace(",", "=2C")
    bare = f"n={name},r={client_nonce}"
    first = step_of(session, f"n,,{bare}".encode())
    if first.failed:
        return first.error_code, b"", b""
    server_first = first.auth_bytes.decode()
    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(h, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{bare},{server_first},{without_proof}".encode()
    client_key = hmac.digest(salted, b"Client Key", h)
    signature = hmac.digest(hashlib.new(h, client_key).digest(), auth_message, h)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    final = step_of(session, f"{without_proof},p={proof}".encode())
    expected = b"v=" + base64.b64encode(hmac.digest(hmac.digest(salted, b"Server Key", h), auth_message, h))
    return final.error_code, final.auth_bytes, expected


def test_rfc_7677_test_vector() -> None:
    """SCRAM-SHA-256 of user "user", password "pencil" (RFC 7677, section 3)."""
    credential = derive("SCRAM-SHA-256", "pencil", salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="), iterations=4096)
    s = SaslSession(MECHANISMS, True, Users({}).authenticate, lambda u, m: credential if u == "user" else None,
                    lambda u: False, nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert s.handshake("SCRAM-SHA-256") == NONE
    first = step_of(s, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first.auth_bytes == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = step_of(s, b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                           b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert (final.error_code, final.auth_bytes) == (NONE, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert (s.state, s.user) == (State.DONE, "user")


def test_plain() -> None:
    users = Users({"alice": "s3cret"})
    s = users.session()
    assert s.handshake("PLAIN") == NONE
    assert step_of(s, b"\x00alice\x00s3cret").error_code == NONE
    assert s.user == "alice"
    assert users.session().handshake("GSSAPI") == UNSUPPORTED_SASL_MECHANISM
    for token in (b"\x00alice\x00wrong", b"\x00bob\x00s3cret", b"bob\x00alice\x00s3cret", b"alice\x00s3cret",
                  b"\x00\xff\x00x"):
        s = users.session()
        s.handshake("PLAIN")
        step = step_of(s, token)
        assert (step.error_code, step.error_message, s.user, s.state) == (
            SASL_AUTHENTICATION_FAILED, FAILED, None, State.FAILED), token
    s = users.session()
    s.handshake("PLAIN")
    assert step_of(s, b"alice\x00alice\x00s3cret").error_code == NONE  # authzid = the user: fine


def test_the_order_of_the_exchange() -> None:
    users = Users({"alice": "s3cret"})
    s = users.session()
    assert step_of(s, b"\x00alice\x00s3cret").error_code == ILLEGAL_SASL_STATE  # before a handshake
    assert s.handshake("PLAIN") == NONE
    assert s.handshake("PLAIN") == ILLEGAL_SASL_STATE
    assert step_of(s, b"\x00alice\x00s3cret").error_code == NONE
    assert step_of(s, b"\x00alice\x00s3cret").error_code == ILLEGAL_SASL_STATE  # done: no second login
    assert s.user == "alice"


def test_scram_round_trips_and_refusals() -> None:
    users = Users({"alice": "s3cret", "local": "pw"}, loopback_only=("local",))
    for mechanism in MECHANISMS[1:]:
        s = users.session()
        s.handshake(mechanism)
        code, final, expected = scram_client(mechanism, "alice", "s3cret", s)
        assert (code, final, s.user) == (NONE, expected, "alice")
        for user, password, loopback in (("alice", "wrong", True), ("nobody", "s3cret", True),
                                         ("local", "pw", False)):
            s = users.session(loopback)
            s.handshake(mechanism)
            code, _, _ = scram_client(mechanism, user, password, s)
            assert (code, s.user, s.state) == (SASL_AUTHENTICATION_FAILED, None, State.FAILED), (user, loopback)
        s = users.session(True)
        s.handshake(mechanism)
        assert scram_client(mechanism, "local", "pw", s)[0] == NONE  # from loopback: fine


def test_an_unknown_user_gets_a_server_first_like_a_known_one() -> None:
    """No way to tell from the exchange whether a user exists, until the proof fails."""
    users = Users({"alice": "s3cret"})
    answers = []
    for user in ("alice", "nobody"):
        s = users.session()
        s.handshake("SCRAM-SHA-256")
        step = step_of(s, f"n,,n={user},r=abc".encode())
        assert step.error_code == NONE
        answers.append(dict(a.split("=", 1) for a in step.auth_bytes.decode().split(",")))
    assert [sorted(a) for a in answers] == [["i", "r", "s"]] * 2
    assert len(base64.b64decode(answers[1]["s"])) == len(base64.b64decode(answers[0]["s"]))


def test_malformed_scram_messages_fail_cleanly() -> None:
    users = Users({"alice": "s3cret"})
    for first in (b"p=tls-unique,,n=alice,r=x", b"n,,n=alice", b"n,,r=x", b"x,,n=alice,r=y", b"n,a=bob,n=alice,r=x",
                  b"n,,n=al=ice,r=x", b"n,,m=ext,n=alice,r=x", b"garbage", b"\xff\xfe", b"n,,n=alice,r=x,tokenauth=true"):
        s = users.session()
        s.handshake("SCRAM-SHA-256")
        assert step_of(s, first).error_code == SASL_AUTHENTICATION_FAILED, first
    for final in (b"c=biws,r=WRONG,p=AAAA", b"c=eSws,r={n},p=AAAA", b"c=biws,r={n}", b"c=biws,r={n},p=!!!",
                  b"c=biws,r={n},p=AAAA"):
        s = users.session(nonce=lambda: "srv")
        s.handshake("SCRAM-SHA-256")
        assert step_of(s, b"n,,n=alice,r=cli").error_code == NONE
        step = step_of(s, final.replace(b"{n}", b"clisrv"))
        assert (step.error_code, s.user) == (SASL_AUTHENTICATION_FAILED, None), final


@given(st.sampled_from(MECHANISMS[1:]), st.text(min_size=1), st.text())
def test_any_name_and_password_log_in(mechanism: str, user: str, password: str) -> None:
    users = Users({user: password})
    s = users.session()
    s.handshake(mechanism)
    code, final, expected = scram_client(mechanism, user, password, s)
    assert (code, final, s.user) == (NONE, expected, user)


@given(st.sampled_from(MECHANISMS), st.lists(st.binary(max_size=64), min_size=1, max_size=3))
def test_any_tokens_are_answered_never_raised(mechanism: str, tokens: list[bytes]) -> None:
    s = Users({"alice": "s3cret"}).session()
    s.handshake(mechanism)
    for token in tokens:
        step = step_of(s, token)
        assert step.error_code in (NONE, SASL_AUTHENTICATION_FAILED, ILLEGAL_SASL_STATE)
    assert s.user in (None, "alice")
