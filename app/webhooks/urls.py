"""Webhook URL rules: ``https://`` to a public address, with the artifact URI's SSRF rules.

Checked at intake and again before every attempt, because DNS can answer differently later.
``insecure_hosts`` (``host:port`` or ``host``) lifts the rules for named hosts; settings refuse
it in production, it exists for dev and for tests against a server on 127.0.0.1.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from app.submissions.artifact_uri import check_artifact_uri
from app.submissions.errors import ArtifactUriRejected
from app.webhooks.errors import WebhookUrlRejected


def check_webhook_url(url: str, insecure_hosts: list[str], resolve: bool = True) -> None:
    """Raise ``WebhookUrlRejected`` unless ``url`` is safe to POST to."""
    parts = urlsplit(url)
    if _is_insecure_allowed(parts.scheme, parts.hostname, parts.port, insecure_hosts):
        return
    if parts.scheme != "https":
        raise WebhookUrlRejected(f"scheme {parts.scheme or '(none)'}:// is not allowed; "
                                 "use https://")
    try:
        check_artifact_uri(url, [], resolve=resolve)
    except ArtifactUriRejected as exc:
        raise WebhookUrlRejected(str(exc.detail)) from exc


def _is_insecure_allowed(scheme: str, host: str | None, port: int | None,
                         insecure_hosts: list[str]) -> bool:
    if not insecure_hosts or host is None or scheme not in {"http", "https"}:
        return False
    names = {host, f"{host}:{port}"} if port is not None else {host}
    return bool(names & set(insecure_hosts))
