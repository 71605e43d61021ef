"""Artifact URI rules: ``s3://`` through the configured store, or ``https://`` to a public host.

Refusing ``file://``, plain ``http://`` and any address that is loopback, private, link-local,
reserved or multicast keeps the worker from being used to reach our own network (SSRF). The worker
checks the resolved address again at fetch time, because DNS can answer differently later.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from app.submissions.errors import ArtifactUriRejected


def _is_forbidden_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return bool(
        ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_reserved
        or ip.is_multicast or ip.is_unspecified or not ip.is_global
    )


def check_artifact_uri(uri: str, allowed_hosts: list[str], resolve: bool = True) -> None:
    """Raise ``ArtifactUriRejected`` unless ``uri`` is safe to fetch."""
    parts = urlsplit(uri)
    if parts.scheme == "s3":
        if not parts.netloc or not parts.path.strip("/"):
            raise ArtifactUriRejected("s3 URI must be s3://<bucket>/<key>")
        return
    if parts.scheme != "https":
        raise ArtifactUriRejected(f"scheme {parts.scheme or '(none)'}:// is not allowed; "
                                  "use s3:// or https://")
    host = parts.hostname
    if not host:
        raise ArtifactUriRejected("https URI has no host")
    if parts.username or parts.password:
        raise ArtifactUriRejected("credentials in the URI are not allowed")
    if allowed_hosts and host not in allowed_hosts:
        raise ArtifactUriRejected(f"host {host} is not in the allowed artifact hosts")
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        if _is_forbidden_address(str(literal)):
            raise ArtifactUriRejected(f"address {host} is not a public address")
        return
    if host == "localhost" or host.endswith((".localhost", ".local", ".internal")):
        raise ArtifactUriRejected(f"host {host} is not a public host")
    if resolve:
        _check_resolved(host, parts.port or 443)


def _check_resolved(host: str, port: int) -> None:
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise ArtifactUriRejected(f"host {host} does not resolve") from exc
    for info in infos:
        if _is_forbidden_address(str(info[4][0])):
            raise ArtifactUriRejected(f"host {host} resolves to a non-public address")
