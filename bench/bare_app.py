"""The ceiling for ``bench/intake.py``: FastAPI with one trivial JSON endpoint and nothing else.

Served by the same function as ``future-ts api`` (``app.serving.serve_uvicorn``: same workers, the
connections split evenly, log level, proxy headers), so the only difference from the
real API is the work our endpoints do.
"""

from __future__ import annotations

import argparse

from fastapi import FastAPI


def create_app() -> FastAPI:
    app = FastAPI(title="bare ceiling")

    @app.get("/ping")
    async def ping() -> dict[str, str]:
        return {"status": "ok"}

    return app


def main() -> None:
    from app.serving import serve_uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    # What app.cli.cmd_api runs.
    serve_uvicorn("bench.bare_app:create_app", args.host, args.port, args.workers)


if __name__ == "__main__":
    main()
