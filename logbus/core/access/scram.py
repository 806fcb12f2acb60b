"""SCRAM credentials (RFC 5802, RFC 7677): what the broker keeps of a password for Kafka's
SASL/SCRAM-SHA-256 and SCRAM-SHA-512 logins, and the proofs an exchange checks.

A credential is the server side of RFC 5802's key derivation for one mechanism:

    SaltedPassword = PBKDF2(H, password, salt, iterations)
    StoredKey      = H(HMAC(SaltedPassword, "Client Key"))
    ServerKey      = HMAC(SaltedPassword, "Server Key")

so the broker can check a client's proof and prove itself without ever storing the
password, as Kafka keeps them (``kafka-configs --add-config 'SCRAM-SHA-256=[...]'``). The
password is taken as its UTF-8 bytes, without SASLprep, as Kafka's ``ScramFormatter``
does. A credential is made whenever a password is set, and for a user that has none yet
(a hash imported from RabbitMQ) at its next login with the password (Access.authenticate).

The exchange itself (the messages and their attributes) is the Kafka gateway's
(gateway/kafka/sasl.py); ``scram_verify`` and ``scram_signature`` here are its arithmetic.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Final

SCRAM_SHA_256: Final = "SCRAM-SHA-256"
SCRAM_SHA_512: Final = "SCRAM-SHA-512"
HASHES: Final = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MECHANISMS: Final = tuple(HASHES)
# Kafka's maximum (its ScramMechanism takes 4096..16384; RFC 7677: at least 4096): the
# stored credential is a PBKDF2 of the password, so as many rounds as the clients will do
SCRAM_ITERATIONS: Final = 16384
SALT_BYTES: Final = 16


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def derive(mechanism: str, password: str, *, salt: bytes | None = None,
           iterations: int = SCRAM_ITERATIONS) -> ScramCredential:
    """The credential of ``password`` for ``mechanism`` (a new random salt unless given)."""
    h = HASHES[mechanism]
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(h, password.encode("utf-8"), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", h)
    return ScramCredential(mechanism, salt, iterations, hashlib.new(h, client_key).digest(),
                           hmac.digest(salted, b"Server Key", h))


def derive_all(password: str) -> tuple[ScramCredential, ...]:
    return tuple(derive(m, password) for m in MECHANISMS)


def scram_verify(credential: ScramCredential, auth_message: bytes, client_proof: bytes) -> bool:
    """Whether ``client_proof`` proves knowledge of the password behind ``credential``:
    ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage), and H(ClientKey) must be
    StoredKey (compared in constant time)."""
    h = HASHES[credential.mechanism]
    signature = hmac.digest(credential.stored_key, auth_message, h)
    if len(client_proof) != len(signature):
        return False
    client_key = bytes(a ^ b for a, b in zip(client_proof, signature))
    return hmac.compare_digest(hashlib.new(h, client_key).digest(), credential.stored_key)


def scram_signature(credential: ScramCredential, auth_message: bytes) -> bytes:
    """HMAC(ServerKey, AuthMessage): the server's proof, in the final message."""
    return hmac.digest(credential.server_key, auth_message, HASHES[credential.mechanism])
