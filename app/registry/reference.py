"""Image references per the distribution grammar: ``host[:port]/path[:tag][@digest]``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.errors import Unprocessable

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PATH = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_HOST = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9-]+)*|\[[0-9a-fA-F:]+\])"
    r"(?::[0-9]{1,5})?$"
)
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
DEFAULT_REGISTRY = "registry-1.docker.io"


class InvalidImageReference(Unprocessable):
    error_name = "invalid_image_reference"


@dataclass(frozen=True)
class ImageReference:
    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def reference(self) -> str:
        """The tag or digest to ask the registry for (digest wins)."""
        return self.digest or self.tag or "latest"

    def with_digest(self, digest: str) -> str:
        return f"{self.registry}/{self.repository}@{digest}"

    def __str__(self) -> str:
        out = f"{self.registry}/{self.repository}"
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


def parse_image_reference(text: str) -> ImageReference:
    """Parse ``text``; raises ``InvalidImageReference`` with the reason."""
    if not text or len(text) > 500 or any(c.isspace() for c in text):
        raise InvalidImageReference("image must be a non-empty reference without spaces")
    rest, _, digest = text.partition("@")
    if digest and not _DIGEST.match(digest):
        raise InvalidImageReference("digest must be sha256:<64 lowercase hex>")
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        registry, path = first, remainder
    else:
        registry, path = DEFAULT_REGISTRY, rest
    tag: str | None = None
    if ":" in path:
        path, tag = path.rsplit(":", 1)
        if not _TAG.match(tag):
            raise InvalidImageReference(f"invalid tag {tag!r}")
    if registry == DEFAULT_REGISTRY and "/" not in path:
        path = f"library/{path}"
    if not _HOST.match(registry):
        raise InvalidImageReference(f"invalid registry host {registry!r}")
    if not _PATH.match(path):
        raise InvalidImageReference(f"invalid repository path {path!r}")
    return ImageReference(registry, path, tag, digest or None)
