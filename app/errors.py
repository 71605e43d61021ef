"""The one error shape: ``{"error": "<ErrorName>", "detail": ...}``.

Services raise ``DomainError`` subclasses; they never touch HTTP. The handler installed by
``app.main`` maps each class to its status code. A class's name is the public error name, so
names read as facts (``SubmissionNotFound``, ``ImageUnresolvable``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel


class ErrorBody(BaseModel):
    error: str
    detail: Any = None


class DomainError(Exception):
    status_code: ClassVar[int] = 400
    error_name: ClassVar[str | None] = None  # defaults to the class name

    def __init__(self, detail: Any = None, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.headers = headers or {}

    @property
    def name(self) -> str:
        return self.error_name or type(self).__name__

    def body(self) -> dict[str, Any]:
        return {"error": self.name, "detail": self.detail}


class NotAuthenticated(DomainError):
    status_code = 401


class Forbidden(DomainError):
    status_code = 403


class NotFound(DomainError):
    status_code = 404


class Conflict(DomainError):
    status_code = 409


class Unprocessable(DomainError):
    status_code = 422


class ServiceUnavailable(DomainError):
    status_code = 503


class PayloadTooLarge(DomainError):
    status_code = 413


class TooManyRequests(DomainError):
    status_code = 429


def error_responses(*errors: type[DomainError]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` for the errors an endpoint declares."""
    out: dict[int | str, dict[str, Any]] = {}
    for err in errors:
        entry = out.setdefault(err.status_code, {"model": ErrorBody, "description": ""})
        name = err.error_name or err.__name__
        entry["description"] = ", ".join(filter(None, [entry["description"], name]))
    return out
