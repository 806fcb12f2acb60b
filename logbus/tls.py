"""TLS for the listeners: what every ``ssl:`` endpoint speaks, and its certificate read
again on SIGHUP (as Mosquitto does), so a renewed certificate needs no restart.

``ServerTLS`` is the endpoint's context factory. It loads the certificate (and its
chain) and key named in the endpoint string, and makes OpenSSL contexts that speak TLS
1.2 or 1.3 only, with forward-secret AEAD suites for TLS 1.2 (Mozilla's "intermediate"
list; TLS 1.3's suites are all such). Each new connection takes the context in force;
``reload()`` loads the files again and, if they are a valid pair, puts a new context in
force for the connections that come after. Connections already open keep theirs. A pair
that does not load is logged and the old one stays.

Client certificates: with ``caCertsDir=DIR`` in the endpoint string (logbus's option,
taken out before Twisted parses the rest: gateway/listener.py), a client may present a
certificate; it must then be signed by one of the CA
certificates (``*.pem``) in DIR, or the handshake fails. A client without one is let in,
to log in with a password. ``gateway.output.peer_identity`` gives the verified certificate's identity,
which the gateways take as the user when ``tls_cert_login`` says so (RabbitMQ's EXTERNAL
mechanism, Mosquitto's ``use_identity_as_username``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from twisted.internet.interfaces import IOpenSSLContextFactory
from twisted.internet.ssl import AcceptableCiphers, Certificate, CertificateOptions, KeyPair, TLSVersion
from zope.interface import implementer  # type: ignore[import-untyped]

log = logging.getLogger(__name__)

# Mozilla's "intermediate" TLS 1.2 suites (forward secret, AEAD only); TLS 1.3's are OpenSSL's
TLS12_CIPHERS = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
                 "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"
                 "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305")


@implementer(IOpenSSLContextFactory)
class ServerTLS:
    """A reloadable, hardened context factory for one TLS endpoint."""

    def __init__(self, name: str, key_path: str, cert_path: str, chain_path: str | None = None,
                 ca_dir: str | None = None) -> None:
        self.name = name
        self.key_path, self.cert_path, self.chain_path, self.ca_dir = key_path, cert_path, chain_path, ca_dir
        self._options = self._load()

    def _load(self) -> CertificateOptions:
        key = KeyPair.load(Path(self.key_path).read_bytes(), format=1)  # FILETYPE_PEM
        pem = Path(self.cert_path).read_bytes()
        certs = [Certificate.loadPEM(block) for block in _pem_blocks(pem)]
        if self.chain_path:
            certs += [Certificate.loadPEM(block) for block in _pem_blocks(Path(self.chain_path).read_bytes())]
        if not certs:
            raise ValueError(f"no certificate in {self.cert_path}")
        leaf = certs[0]
        if leaf.getPublicKey().keyHash() != key.keyHash():
            raise ValueError(f"the key in {self.key_path} does not belong to the certificate in {self.cert_path}")
        verify: dict[str, Any] = {}
        if self.ca_dir:
            cas = [Certificate.loadPEM(block).original for f in sorted(Path(self.ca_dir).glob("*.pem"))
                   for block in _pem_blocks(f.read_bytes())]
            if not cas:
                raise ValueError(f"no CA certificate (*.pem) in {self.ca_dir}")
            verify = {"verify": True, "caCerts": cas, "requireCertificate": False}
        options = CertificateOptions(
            privateKey=key.original, certificate=leaf.original,
            extraCertChain=[c.original for c in certs[1:]], raiseMinimumTo=TLSVersion.TLSv1_2,
            acceptableCiphers=AcceptableCiphers.fromOpenSSLCipherString(TLS12_CIPHERS), **verify)
        options.getContext()  # fails now, not at the first connection, if OpenSSL refuses the pair
        return options

    def getContext(self) -> Any:
        """The context of the certificate in force (Twisted asks for each new connection)."""
        return self._options.getContext()

    def reload(self) -> bool:
        """Load the files again; True if the new pair is in force, False if it did not load."""
        try:
            options = self._load()
        except Exception as exc:  # noqa: BLE001 -- an unreadable or mismatched pair: keep the old one
            log.error("%s: TLS certificate not reloaded from %s, the old one stays: %s", self.name, self.cert_path, exc)
            return False
        self._options = options
        log.info("%s: TLS certificate reloaded from %s", self.name, self.cert_path)
        return True


def _pem_blocks(data: bytes) -> list[bytes]:
    end = b"-----END CERTIFICATE-----"
    return [block + end + b"\n" for block in data.split(end) if b"-----BEGIN CERTIFICATE-----" in block]


def server_tls(name: str, endpoint: Any, description: str, ca_dir: str | None = None) -> ServerTLS | None:
    """Put a ServerTLS on a TLS endpoint made from ``description`` (an ``ssl:`` one, whose
    ``privateKey``, ``certKey`` and ``extraCertChain`` it reads); None for any other."""
    if getattr(endpoint, "_sslContextFactory", None) is None:  # twisted's SSL4ServerEndpoint
        return None
    from twisted.internet.endpoints import _parse  # the endpoint string's own parser

    _, kwargs = _parse(description)
    key = kwargs["privateKey"]
    tls = ServerTLS(name, key, kwargs.get("certKey", key), kwargs.get("extraCertChain"), ca_dir)
    endpoint._sslContextFactory = tls
    return tls

