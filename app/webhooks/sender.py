"""The port that POSTs a webhook, and its httpx adapter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import httpx


@dataclass(frozen=True)
class SendResult:
    status_code: int | None  # None when no HTTP answer came back
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class WebhookSender(Protocol):
    def post(self, url: str, body: bytes, headers: dict[str, str], timeout_s: float
             ) -> SendResult:
        """POST ``body`` once; never raises for network or HTTP errors, reports them instead."""
        ...


class HttpxWebhookSender:
    """Redirects are not followed (a redirect could point at an internal address) and proxy
    settings from the environment are ignored; the response body is never read."""

    def post(self, url: str, body: bytes, headers: dict[str, str], timeout_s: float
             ) -> SendResult:
        try:
            with httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False) as c, \
                    c.stream("POST", url, content=body, headers=headers) as response:
                return SendResult(response.status_code,
                                  None if response.is_success else f"HTTP {response.status_code}")
        except httpx.HTTPError as exc:
            return SendResult(None, f"{type(exc).__name__}: {exc}"[:500])
