"""core/access/passwords.py: RabbitMQ's password hashes (known vectors), scrypt's (RFC 7914's
vector), the check a login runs on the password thread and what it upgrades, the login cache
and the worker thread. No store, no sockets."""

from __future__ import annotations

import base64
import hashlib
import threading

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from logbus.core.access.passwords import (
    MD5,
    SCRYPT,
    SHA256,
    SHA512,
    BadHash,
    LoginCache,
    PasswordWorker,
    check_password,
    check_password_hash,
    hash_password,
    parse_scrypt,
    refuse,
    verify,
    weaker_than_today,
)
from logbus.core.access.scram import MECHANISMS
from tests.loop import LoopReactor

# RabbitMQ's passwords guide computes this one step by step: salt 908D C60A, password
# "test12", SHA-256. We compute it with the documented algorithm and get its answer.
DOC_SALT = bytes.fromhex("908DC60A")
DOC_HASH = "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"
# Exported by RabbitMQ 3.10.8 (rabbitmqctl add_user, then export_definitions).
RABBITMQ_EXPORTED = [("alice", "secret", "fOC0HhN9jd35fgdugCrUmtJEDBykNKlPSAkkQrMfQfuWjx2w"),
                     ("guest", "guest", "muzXjl3WLTEGoPuMjupiTcu9thvDfHuAuf5Pkv1fQ3N1Xeb8")]


def cheap_scrypt(password: str, salt: bytes = b"saltsalt", ln: int = 4, r: int = 1, p: int = 1) -> str:
    """A scrypt hash with light parameters, as an older logbus might have stored."""
    digest = hashlib.scrypt(password.encode(), salt=salt, n=1 << ln, r=r, p=p, dklen=32)
    b64 = lambda b: base64.b64encode(b).decode().rstrip("=")  # noqa: E731
    return f"$scrypt$ln={ln},r={r},p={p}${b64(salt)}${b64(digest)}"


# -- RabbitMQ's hashes ---------------------------------------------------------------------------


def test_the_documented_rabbitmq_vector() -> None:
    expected = base64.b64encode(DOC_SALT + hashlib.sha256(DOC_SALT + b"test12").digest()).decode()
    assert expected == DOC_HASH
    assert hash_password("test12", SHA256, salt=DOC_SALT) == DOC_HASH
    raw = base64.b64decode(DOC_HASH)
    assert len(raw) == 36 and raw[:4] == DOC_SALT  # 4 bytes of salt, then the SHA-256 digest
    assert check_password("test12", DOC_HASH, SHA256)
    assert not check_password("test13", DOC_HASH, SHA256)


@pytest.mark.parametrize(("user", "password", "stored"), RABBITMQ_EXPORTED)
def test_hashes_exported_from_rabbitmq_verify(user: str, password: str, stored: str) -> None:
    assert check_password(password, stored, SHA256)
    assert not check_password(password + "x", stored, SHA256)
    check_password_hash(stored, SHA256)  # accepted as a password_hash on PUT


def test_rabbitmq_hashes_are_salted_and_other_algorithms_verify() -> None:
    a, b = hash_password("pw", SHA256), hash_password("pw", SHA256)
    assert a != b and check_password("pw", a, SHA256) and check_password("pw", b, SHA256)
    for algorithm, size in ((SHA512, 4 + 64), (MD5, 4 + 16)):
        h = hash_password("pässwörd", algorithm)  # UTF-8, as RabbitMQ hashes it
        assert len(base64.b64decode(h)) == size
        assert check_password("pässwörd", h, algorithm)
        assert not check_password("pässwörd", h, SHA256)


def test_malformed_hashes_match_nothing() -> None:
    for stored in ("", "not base64!", "AAAA", base64.b64encode(b"abc").decode()):
        assert not check_password("", stored, SHA256)
        assert not check_password("", stored, SCRYPT)
    assert not check_password("test12", DOC_HASH, "rabbit_password_hashing_rot13")
    assert not check_password("test12", DOC_HASH, SCRYPT)  # a RabbitMQ hash named scrypt
    with pytest.raises(BadHash, match="decodes to 3 bytes"):
        check_password_hash(base64.b64encode(b"abc").decode(), SHA256)
    with pytest.raises(BadHash, match="not base64"):
        check_password_hash("***", SHA256)
    with pytest.raises(BadHash, match="unknown hashing_algorithm"):
        check_password_hash(DOC_HASH, "sha3")
    with pytest.raises(BadHash, match=r"\$scrypt\$ln="):
        check_password_hash(DOC_HASH, SCRYPT)
    with pytest.raises(BadHash, match="out of range"):
        check_password_hash("$scrypt$ln=40,r=8,p=1$c2FsdHNhbHQ$" + "A" * 43, SCRYPT)  # 2^40: refused, not run
    check_password_hash("", SHA256)  # no password: allowed
    check_password_hash("", SCRYPT)


# -- scrypt ------------------------------------------------------------------------------------------


def test_scrypt_is_rfc_7914s_function() -> None:
    # RFC 7914, section 12, the second vector: "password", "NaCl", N=1024, r=8, p=16
    digest = hashlib.scrypt(b"password", salt=b"NaCl", n=1024, r=8, p=16, dklen=64)
    assert digest.hex().startswith("fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b373162")
    stored = cheap_scrypt("password", b"NaClNaCl", ln=10, r=8, p=16)
    assert check_password("password", stored, SCRYPT) and not check_password("Password", stored, SCRYPT)


def test_scrypt_hashes_carry_owasps_parameters_and_a_fresh_salt() -> None:
    a, b = hash_password("pw"), hash_password("pw")
    assert a != b
    s = parse_scrypt(a)
    assert (1 << s.log2_n, s.r, s.p, len(s.salt), len(s.digest)) == (16384, 8, 5, 16, 32)
    assert a.startswith("$scrypt$ln=14,r=8,p=5$")
    assert check_password("pw", a) and not check_password("pw ", a)
    assert not weaker_than_today(a, SCRYPT)


def test_what_a_login_upgrades() -> None:
    assert weaker_than_today(DOC_HASH, SHA256)
    assert weaker_than_today(cheap_scrypt("x"), SCRYPT)  # lighter parameters than today's
    v = verify("test12", DOC_HASH, SHA256, make_scram=True)
    assert v.ok and v.upgraded is not None and check_password("test12", v.upgraded, SCRYPT)
    assert v.scram is not None and {c.mechanism for c in v.scram} == set(MECHANISMS)
    assert verify("test13", DOC_HASH, SHA256, make_scram=True) == refuse("test13")  # nothing made
    current = hash_password("pw")
    kept = verify("pw", current, SCRYPT, make_scram=False)
    assert kept.ok and kept.upgraded is None and kept.scram is None


@given(st.text(max_size=120))
@example("$scrypt$ln=14,r=8,p=5$$")
@example("$scrypt$ln=14,r=8,p=5,x=1$c2FsdHNhbHQ$" + "A" * 43)
@example("$scrypt$ln=,r=8,p=5$c2FsdHNhbHQ$" + "A" * 43)
def test_parse_scrypt_refuses_anything_else_with_bad_hash(text: str) -> None:
    try:
        s = parse_scrypt(text)
    except BadHash:
        return
    assert 1 <= s.log2_n <= 20 and len(s.salt) >= 8 and len(s.digest) >= 16


# -- the cache and the thread --------------------------------------------------------------------


def test_the_login_cache_knows_a_password_only_against_the_hash_it_matched() -> None:
    cache = LoginCache(size=2)
    t = cache.token("alice", "pw")
    assert t != cache.token("alice", "pw2") and t != cache.token("alic", "epw")  # names are framed
    assert t != LoginCache().token("alice", "pw")  # a key per process
    assert not cache.knows(t, "h1")
    cache.remember(t, "h1")
    assert cache.knows(t, "h1") and not cache.knows(t, "h2")  # the password changed: ask the KDF
    assert not cache.knows(t, "")
    cache.remember(cache.token("b", "1"), "x")
    cache.knows(t, "h1")  # alice used most recently: b goes first
    cache.remember(cache.token("c", "1"), "y")
    assert len(cache) == 2 and cache.knows(t, "h1") and not cache.knows(cache.token("b", "1"), "x")


def test_the_worker_runs_jobs_on_its_thread_and_answers_on_the_reactor() -> None:
    loop = LoopReactor()
    worker: PasswordWorker[str] = PasswordWorker(loop.callFromThread)
    main = threading.get_ident()
    ran_on: list[int] = []
    d1 = worker.run(lambda: ran_on.append(threading.get_ident()) or "one")  # type: ignore[func-returns-value]
    d2 = worker.run(lambda: 1 / 0)  # type: ignore[arg-type,return-value]
    assert worker.pending == 2
    assert loop.wait(d1) == "one"
    with pytest.raises(ZeroDivisionError):
        loop.wait(d2)
    assert worker.pending == 0 and ran_on and ran_on[0] != main
    worker.stop()
