"""The FastAPI application: routers, the one error shape, the request size limit."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import health, metrics
from app.audit import endpoints as audit
from app.errors import DomainError, ErrorBody
from app.events import endpoints as events
from app.leaderboard import endpoints as leaderboard
from app.logs import endpoints as logs
from app.quotas import endpoints as quotas
from app.reports import endpoints as reports
from app.runs import endpoints as runs
from app.runs import staff_endpoints as run_history
from app.settings import get_settings
from app.submissions import endpoints as submissions
from app.taskcards import endpoints as taskcards
from app.webhooks import endpoints as webhooks

API_VERSION = "0.1.0"


class BodySizeLimit:
    """Refuse bodies over ``max_bytes`` with 413 before the endpoint sees them, whether the
    client sent Content-Length or streams chunks."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _too_large(send, self.max_bytes)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _BodyTooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _BodyTooLarge:
            await _too_large(send, self.max_bytes)


class _BodyTooLarge(Exception):
    pass


async def _too_large(send: Send, limit: int) -> None:
    body = (b'{"error":"PayloadTooLarge","detail":"request body exceeds ' +
            str(limit).encode() + b' bytes"}')
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _error(status: int, name: str, detail: Any, headers: dict[str, str] | None = None
           ) -> JSONResponse:
    return JSONResponse({"error": name, "detail": detail}, status_code=status, headers=headers)


def _use_error_shape_for_422(app: FastAPI) -> None:
    """Document payload-validation failures with the one error shape, as they are served."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version=app.version,
                             description=app.description, routes=app.routes)
        ref = {"$ref": "#/components/schemas/ErrorBody"}
        for ops in schema.get("paths", {}).values():
            for op in ops.values():
                resp = op.get("responses", {}).get("422")
                if resp is not None:
                    resp["content"] = {"application/json": {"schema": ref}}
                    resp["description"] = "Payload validation failed (RequestValidationFailed)" \
                        if resp.get("description") == "Validation Error" else resp["description"]
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
        components.setdefault("ErrorBody", ErrorBody.model_json_schema())
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_app() -> FastAPI:
    settings = get_settings()
    app = FastAPI(
        title="FUTURE-TS sealed submission service", version=API_VERSION,
        description="Submit a forecasting model container; it runs sealed, every prediction is "
                    "logged in a Merkle log, and the result is a signed BenchmarkReport.",
    )

    @app.exception_handler(DomainError)
    async def _domain(_: Request, exc: DomainError) -> JSONResponse:
        return _error(exc.status_code, exc.name, exc.detail, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")}
                  for e in exc.errors()]
        return _error(422, "RequestValidationFailed", detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        names = {404: "NotFound", 405: "MethodNotAllowed"}
        return _error(exc.status_code, names.get(exc.status_code, "HTTPError"), exc.detail,
                      dict(exc.headers or {}))

    _use_error_shape_for_422(app)
    app.include_router(health.router)
    app.include_router(submissions.router)
    app.include_router(runs.router)
    app.include_router(taskcards.router)
    app.include_router(reports.router)
    app.include_router(leaderboard.router)
    app.include_router(run_history.router)
    app.include_router(events.router)
    app.include_router(webhooks.router)
    app.include_router(logs.router)
    app.include_router(quotas.router)
    app.include_router(audit.router)
    app.include_router(metrics.router)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    return app
