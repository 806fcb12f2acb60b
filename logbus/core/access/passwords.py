"""Password hashes: how a user's password is kept, checked and made stronger.

Two families of stored hash, told apart by the user's ``hashing_algorithm``:

- **scrypt** (``logbus_password_hashing_scrypt``), what logbus makes: memory-hard, with
  OWASP's parameters for scrypt (N=2^14, r=8, p=5: 16 MiB and about 0.2 s of one core
  per check on the reference machine), a 16-byte random salt, in the PHC string format
  ``$scrypt$ln=14,r=8,p=5$<salt>$<hash>`` (unpadded base64), so a hash carries its own
  parameters and stronger ones can come later without breaking the old.
- **RabbitMQ's** salted hashes, ``base64(salt + H(salt + utf8(password)))`` with a 4-byte
  salt and H = SHA-256, SHA-512 or MD5 (``rabbit_password_hashing_sha256`` ...), so
  definitions exported from RabbitMQ import unchanged. One round of a fast hash: they
  are checked, never made, and replaced by scrypt at the user's next login (``verify``
  says so: ``Verdict.upgraded``).

A check costs the scrypt time, so it is never done on the reactor thread:
``PasswordWorker`` runs it on one thread of its own (hashlib releases the GIL), and
``LoginCache`` remembers successful logins in memory, so a client that reconnects with
the same password, or an HTTP client sending Basic credentials with every request, pays
an HMAC rather than a KDF (core/access/doors.py puts them together).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from twisted.internet.defer import Deferred

from .scram import ScramCredential, derive_all

SCRYPT: Final = "logbus_password_hashing_scrypt"
SHA256: Final = "rabbit_password_hashing_sha256"
SHA512: Final = "rabbit_password_hashing_sha512"
MD5: Final = "rabbit_password_hashing_md5"  # RabbitMQ before 3.6: verified, never produced
RABBITMQ_HASHES: Final = {SHA256: hashlib.sha256, SHA512: hashlib.sha512, MD5: hashlib.md5}
ALGORITHMS: Final = (SCRYPT, *RABBITMQ_HASHES)
SALT_BYTES: Final = 4  # RabbitMQ's

SCRYPT_LOG2_N: Final = 14  # OWASP's password storage cheat sheet: N=2^14, r=8, p=5
SCRYPT_R: Final = 8
SCRYPT_P: Final = 5
SCRYPT_SALT_BYTES: Final = 16
SCRYPT_HASH_BYTES: Final = 32
_MAX_LOG2_N = 20  # a stored hash asking for more memory than 2^20 * 128 * r is refused
_MAX_R, _MAX_P = 32, 64


class BadHash(ValueError):
    """A stored hash that cannot be one of its algorithm's."""


@dataclass(frozen=True, slots=True)
class ScryptParams:
    log2_n: int
    r: int
    p: int
    salt: bytes
    digest: bytes


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def parse_scrypt(stored: str) -> ScryptParams:
    """The parts of a ``$scrypt$ln=..,r=..,p=..$salt$hash`` string; BadHash if it is none."""
    parts = stored.split("$")
    if len(parts) != 5 or parts[0] != "" or parts[1] != "scrypt":
        raise BadHash("a scrypt password_hash reads $scrypt$ln=14,r=8,p=5$<salt>$<hash>")
    try:
        params = dict(kv.split("=", 1) for kv in parts[2].split(","))
        log2_n, r, p = int(params.pop("ln")), int(params.pop("r")), int(params.pop("p"))
        salt, digest = _unb64(parts[3]), _unb64(parts[4])
    except (KeyError, ValueError, binascii.Error):
        raise BadHash("a scrypt password_hash reads $scrypt$ln=14,r=8,p=5$<salt>$<hash>") from None
    if params or not (1 <= log2_n <= _MAX_LOG2_N and 1 <= r <= _MAX_R and 1 <= p <= _MAX_P):
        raise BadHash(f"scrypt parameters out of range (ln 1..{_MAX_LOG2_N}, r 1..{_MAX_R}, p 1..{_MAX_P})")
    if len(salt) < 8 or len(digest) < 16:
        raise BadHash("scrypt salt or hash too short (at least 8 and 16 bytes)")
    return ScryptParams(log2_n, r, p, salt, digest)


def _scrypt(password: str, salt: bytes, log2_n: int, r: int, p: int, length: int) -> bytes:
    n = 1 << log2_n
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=length,
                          maxmem=129 * r * n + (1 << 20))


def hash_password(password: str, algorithm: str = SCRYPT, *, salt: bytes | None = None) -> str:
    """``password`` hashed by ``algorithm``: scrypt with today's parameters, or one of
    RabbitMQ's (for tests and for hashes meant for RabbitMQ)."""
    if algorithm == SCRYPT:
        salt = os.urandom(SCRYPT_SALT_BYTES) if salt is None else salt
        digest = _scrypt(password, salt, SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P, SCRYPT_HASH_BYTES)
        return f"$scrypt$ln={SCRYPT_LOG2_N},r={SCRYPT_R},p={SCRYPT_P}${_b64(salt)}${_b64(digest)}"
    h = _rabbitmq_hash(algorithm)
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    if len(salt) != SALT_BYTES:
        raise ValueError(f"the salt is {SALT_BYTES} bytes, not {len(salt)}")
    return base64.b64encode(salt + h(salt + password.encode("utf-8")).digest()).decode("ascii")


def check_password(password: str, stored: str, algorithm: str = SCRYPT) -> bool:
    """Does ``password`` match the stored hash? Constant time in the digest compare; an
    empty or malformed hash, or an unknown algorithm, matches nothing."""
    if not stored:
        return False
    if algorithm == SCRYPT:
        try:
            s = parse_scrypt(stored)
        except BadHash:
            return False
        return hmac.compare_digest(s.digest, _scrypt(password, s.salt, s.log2_n, s.r, s.p, len(s.digest)))
    h = RABBITMQ_HASHES.get(algorithm)
    if h is None:
        return False
    try:
        raw = base64.b64decode(stored, validate=True)
    except (binascii.Error, ValueError):
        return False
    salt, digest = raw[:SALT_BYTES], raw[SALT_BYTES:]
    if len(salt) != SALT_BYTES:
        return False
    return hmac.compare_digest(digest, h(salt + password.encode("utf-8")).digest())


def check_password_hash(stored: str, algorithm: str) -> None:
    """BadHash unless ``stored`` can be a hash of ``algorithm`` ("" is: no password)."""
    if algorithm == SCRYPT:
        if stored:
            parse_scrypt(stored)
        return
    h = _rabbitmq_hash(algorithm)
    if not stored:
        return
    try:
        raw = base64.b64decode(stored, validate=True)
    except (binascii.Error, ValueError):
        raise BadHash("password_hash is not base64") from None
    want = SALT_BYTES + h().digest_size
    if len(raw) != want:
        raise BadHash(f"password_hash decodes to {len(raw)} bytes; {algorithm} hashes are {want} "
                      f"({SALT_BYTES} of salt, then the digest)")


def weaker_than_today(stored: str, algorithm: str) -> bool:
    """Whether a hash that just matched should be replaced by one made today: one of
    RabbitMQ's fast hashes, or scrypt asking less work (N * r * p) than ``hash_password``."""
    if algorithm != SCRYPT:
        return True
    s = parse_scrypt(stored)
    return (1 << s.log2_n) * s.r * s.p < (1 << SCRYPT_LOG2_N) * SCRYPT_R * SCRYPT_P  # less work


def _rabbitmq_hash(algorithm: str) -> Callable[..., Any]:
    h = RABBITMQ_HASHES.get(algorithm)
    if h is None:
        raise BadHash(f"unknown hashing_algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")
    return h


# -- a check, as the worker thread runs it -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """What ``verify`` found: whether the password matched and, when it did, what to store
    now: a stronger hash (``upgraded``) and the SCRAM credentials a user had none of."""

    ok: bool
    upgraded: str | None = None
    scram: tuple[ScramCredential, ...] | None = None


REFUSED: Final = Verdict(False)


def verify(password: str, stored: str, algorithm: str, *, make_scram: bool) -> Verdict:
    """Check ``password`` and, when it matches, make what the user's record lacks. Slow
    (a KDF or three): the worker thread's job."""
    if not check_password(password, stored, algorithm):
        return REFUSED
    upgraded = hash_password(password) if weaker_than_today(stored, algorithm) else None
    return Verdict(True, upgraded, derive_all(password) if make_scram else None)


DUMMY_HASH: Final = hash_password("", SCRYPT, salt=b"\x00" * SCRYPT_SALT_BYTES)


def refuse(password: str) -> Verdict:
    """An unknown user's check: as long as a known user's (a KDF on a dummy hash), so
    the time of a refusal does not tell which names exist."""
    verify(password, DUMMY_HASH, SCRYPT, make_scram=False)
    return REFUSED


# -- successful logins, remembered -------------------------------------------------------------


class LoginCache:
    """Successful logins, remembered in memory so the next one with the same password
    costs an HMAC instead of a KDF. An entry is (user, password) under HMAC-SHA-256 with
    a key made at start and never stored, against the stored hash it matched: when the
    user's password changes (a new hash) the entry no longer counts. Bounded (least
    recently used out first); gone with the process."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._key = os.urandom(32)
        self._seen: OrderedDict[bytes, str] = OrderedDict()

    def token(self, user: str, password: str) -> bytes:
        u = user.encode("utf-8")
        return hmac.digest(self._key, len(u).to_bytes(4, "big") + u + password.encode("utf-8"), "sha256")

    def knows(self, token: bytes, stored: str) -> bool:
        seen = self._seen.get(token)
        if seen is None or not stored or not hmac.compare_digest(seen, stored):
            return False
        self._seen.move_to_end(token)
        return True

    def remember(self, token: bytes, stored: str) -> None:
        self._seen[token] = stored
        self._seen.move_to_end(token)
        while len(self._seen) > self.size:
            self._seen.popitem(last=False)

    def __len__(self) -> int:
        return len(self._seen)


# -- the thread ------------------------------------------------------------------------------

T = TypeVar("T")


class PasswordWorker(Generic[T]):
    """One thread that runs password checks and hashes, one at a time, in the order
    asked; ``run(job)`` is a Deferred the reactor fires with the job's result (or its
    exception). One thread, not a pool: a login storm takes at most one core, the
    other stays the reactor's."""

    def __init__(self, call_from_thread: Callable[..., Any]) -> None:
        self._call_from_thread = call_from_thread
        self._jobs: queue.SimpleQueue[tuple[Callable[[], T], Deferred[T]] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.pending = 0  # jobs asked and not answered yet (the reactor's count)

    def run(self, job: Callable[[], T]) -> Deferred[T]:
        d: Deferred[T] = Deferred()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="logbus-passwords", daemon=True)
                self._thread.start()
        self.pending += 1
        self._jobs.put((job, d))
        return d

    def _loop(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, d = item
            try:
                result: Any = job()
            except Exception as exc:  # handed to the reactor as the Deferred's failure
                self._call_from_thread(self._fail, d, exc)
            else:
                self._call_from_thread(self._done, d, result)

    def _done(self, d: Deferred[T], result: T) -> None:
        self.pending -= 1
        d.callback(result)

    def _fail(self, d: Deferred[T], exc: Exception) -> None:
        self.pending -= 1
        d.errback(exc)

    def stop(self) -> None:
        """Let the thread end once the jobs asked so far are done (their answers may not
        be delivered if the reactor is gone)."""
        with self._lock:
            if self._thread is not None:
                self._jobs.put(None)
                self._thread = None
