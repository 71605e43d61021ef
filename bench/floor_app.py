"""The floor for ``bench/intake.py``'s POST: the least any submission endpoint could do here.

A raw ASGI app (no framework, no validation, no auth, no quota, no queue) whose POST parses the
JSON body and, in a worker thread (4 per process, as intake), asks the local registry for the
body's image tag with one kept-alive ``HEAD`` (the digest lookup every submission needs) and
writes one ``INSERT`` of four rows into a scratch table of the benchmark's database (a durable
commit, as every 202 needs). It is served the same way as the API (``app.serving``, the same
workers), so the gap between this phase and ``POST /v1/submissions`` is what our rules, tables
and framework cost, and this phase's own p99 is what the machine allows at all.

    python -m bench.floor_app --port PORT --dsn 'host=... dbname=...' [--workers 2]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
from psycopg_pool import ConnectionPool

from app.registry.resolver import MANIFEST_ACCEPT
from app.submissions.intake import INTAKE_CONCURRENCY

THREADS = INTAKE_CONCURRENCY  # worker threads per process, as intake
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def create_app() -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    local = threading.local()
    state: dict[str, Any] = {}

    def submit(raw: bytes) -> bytes:
        body = json.loads(raw)
        registry, _, rest = body["image"].partition("/")
        name, _, tag = rest.rpartition(":")
        conn = getattr(local, "registry", None)
        if conn is None:
            conn = local.registry = http.client.HTTPConnection(registry, timeout=10)
        conn.request("HEAD", f"/v2/{name}/manifests/{tag}", headers={"Accept": MANIFEST_ACCEPT})
        response = conn.getresponse()
        response.read()
        digest = response.getheader("Docker-Content-Digest")
        ident = uuid.uuid4().hex
        with state["pool"].connection() as db:
            db.execute("INSERT INTO bench_floor (id, body) SELECT i, %s FROM unnest(%s::text[]) i",
                       (json.dumps(body), [f"{ident}-{n}" for n in range(4)]))
        return json.dumps({"id": ident, "image_digest": digest}).encode()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] == "lifespan.startup":
                state["pool"] = ConnectionPool(os.environ["BENCH_FLOOR_DSN"],
                                               kwargs={"autocommit": True}, min_size=THREADS,
                                               max_size=THREADS, open=True)
                state["threads"] = anyio.CapacityLimiter(THREADS)
                await send({"type": "lifespan.startup.complete"})
            state["pool"].close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["method"] != "POST":
            out, status = b'{"status": "ok"}', 200
        else:
            out = await anyio.to_thread.run_sync(submit, raw, limiter=state["threads"])
            status = 202
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": out})

    return app


def create_table(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id text PRIMARY KEY, body jsonb "
                     "NOT NULL, created_at timestamptz NOT NULL DEFAULT now())")


def main() -> None:
    from app.serving import serve_uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dsn", required=True)
    args = parser.parse_args()
    create_table(args.dsn)
    os.environ["BENCH_FLOOR_DSN"] = args.dsn  # the spawned workers inherit it
    serve_uvicorn("bench.floor_app:create_app", args.host, args.port, args.workers)


if __name__ == "__main__":
    main()
