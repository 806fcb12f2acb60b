"""Who is at the other end of a connection: its address, whether it is on loopback or
speaks TLS, the identity its client certificate proves, and how it went away. Shared by
the gateways' Twisted protocols, off the per-message path (gateway/output.py writes the
bytes)."""

from __future__ import annotations

import ipaddress
from typing import Any


def lost_reason(reason: Any) -> str:
    """How a transport ended, for the connection's close line: "closed cleanly" (a FIN,
    or our own close), "connection lost: ..." (a reset, a TLS failure)."""
    from twisted.internet.error import ConnectionDone

    value = getattr(reason, "value", None)
    if value is None or isinstance(value, ConnectionDone):
        return "closed cleanly"
    text = str(value).strip().rstrip(".") or type(value).__name__
    return f"connection lost: {text}"


def peer_of(transport: Any) -> tuple[str, str]:
    """(host, port) of a transport's peer, as text ("?" when it has none)."""
    peer = transport.getPeer()
    return str(getattr(peer, "host", "?")), str(getattr(peer, "port", "?"))


def is_loopback(host: str) -> bool:
    """Whether a peer's host (as ``peer_of`` gives it) is a loopback address: where the
    users of ``loopback_users`` and anonymous clients may come from."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def is_tls(transport: Any) -> bool:
    """Whether a transport speaks TLS (directly, or under a WebSocket)."""
    from twisted.internet.interfaces import ISSLTransport

    inner = getattr(transport, "transport", None)  # a WebSocket's TCP or TLS transport
    return ISSLTransport.providedBy(transport) or (inner is not None and ISSLTransport.providedBy(inner))


def peer_identity(transport: Any, source: str) -> str | None:
    """The identity in the client certificate a TLS connection verified: its subject's
    common name (``source`` "common_name") or its first DNS or e-mail subject alternative
    name ("subject_alternative_name"); None without a verified certificate (or with
    ``source`` "off"). A WebSocket's transport is looked through."""
    if source == "off":
        return None
    for t in (transport, getattr(transport, "transport", None)):
        getter = getattr(t, "getPeerCertificate", None)
        if getter is None:
            continue
        try:
            x509 = getter()
        except Exception:  # noqa: BLE001 -- not a TLS connection after all
            return None
        if x509 is None:
            return None
        cert = x509.to_cryptography()
        if source == "common_name":
            from cryptography.x509.oid import NameOID

            names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
            return str(names[0].value) if names else None
        from cryptography import x509 as cx

        try:
            san = cert.extensions.get_extension_for_class(cx.SubjectAlternativeName).value
        except cx.ExtensionNotFound:
            return None
        found = san.get_values_for_type(cx.DNSName) + san.get_values_for_type(cx.RFC822Name)
        return str(found[0]) if found else None
    return None
