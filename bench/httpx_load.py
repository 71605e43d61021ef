"""Fallback load generator for ``bench/intake.py`` when ``wrk`` is not installed.

Closed loop: ``--connections`` clients on keep-alive connections, each sending its next request
when the previous answer arrives, until ``--duration`` seconds or ``--max-requests`` in total.
Prints the same ``BENCH_RESULT {json}`` line as ``bench/load.lua``. It costs far more CPU per
request than wrk, which competes with the server for the same two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import httpx


async def _client_loop(client: httpx.AsyncClient, args: argparse.Namespace, body: bytes | None,
                       headers: dict[str, str], deadline: float, state: dict[str, int],
                       latencies: list[float]) -> None:
    tokens = [t for t in (args.tokens or "").split(",") if t]
    while time.monotonic() < deadline and state["sent"] < args.max_requests:
        state["sent"] += 1
        if tokens:  # the tokens take turns per request, as in load.lua
            token = tokens[state["sent"] % len(tokens)]
            headers = {**headers, "Authorization": f"Bearer {token}"}
        start = time.perf_counter()
        try:
            response = await client.request(args.method, args.url, content=body, headers=headers)
        except httpx.TimeoutException:
            state["timeouts"] += 1
            continue
        except httpx.HTTPError:
            state["socket_errors"] += 1
            continue
        latencies.append(time.perf_counter() - start)
        if response.status_code == args.expect:
            state["ok"] += 1
        else:
            state["bad"] += 1
            state["first_bad"] = state["first_bad"] or response.status_code


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


async def _run(args: argparse.Namespace) -> dict[str, float]:
    body = Path(args.body_file).read_bytes() if args.body_file else None
    headers = {}
    if body is not None:
        headers["Content-Type"] = "application/json"
    if args.if_none_match:
        headers["If-None-Match"] = args.if_none_match
    state = {"sent": 0, "ok": 0, "bad": 0, "first_bad": 0, "socket_errors": 0, "timeouts": 0}
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=args.connections,
                          max_keepalive_connections=args.connections)
    async with httpx.AsyncClient(limits=limits, timeout=10.0, trust_env=False) as client:
        start = time.monotonic()
        deadline = start + args.duration
        await asyncio.gather(*[
            _client_loop(client, args, body, headers, deadline, state, latencies)
            for _ in range(args.connections)])
        elapsed = time.monotonic() - start
    ordered = sorted(latencies)
    return {
        "requests": len(latencies), "duration_us": elapsed * 1e6, "ok": state["ok"],
        "bad": state["bad"], "first_bad": state["first_bad"],
        "socket_errors": state["socket_errors"], "timeouts": state["timeouts"],
        "p50_us": _percentile(ordered, 50) * 1e6, "p90_us": _percentile(ordered, 90) * 1e6,
        "p99_us": _percentile(ordered, 99) * 1e6, "max_us": (ordered[-1] if ordered else 0) * 1e6,
        "mean_us": (statistics.fmean(ordered) if ordered else 0) * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--method", default="GET")
    parser.add_argument("--body-file")
    parser.add_argument("--tokens", help="comma-separated bearer tokens, used in turn")
    parser.add_argument("--if-none-match")
    parser.add_argument("--expect", type=int, default=200)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--max-requests", type=int, default=200_000)
    args = parser.parse_args()
    if not args.url.startswith(("http://127.", "http://localhost")):
        parser.error("loopback targets only")
    result = asyncio.run(_run(args))
    print("BENCH_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
