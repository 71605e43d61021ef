"""Sealed-runner benchmarks on real podman (issue 3, "Numbers").

    .venv/bin/python -m bench.runner [--calls 2000] [--sleep-calls 300] [--starts 10]

Needs podman, the local registry and the images from ``images/build.sh``. Prints:

(a) harness overhead with ``echo-fast``: platform ``runtime_ms`` per call, and the same minus the
    model's own compute. echo-fast does not report its compute, so it is estimated by running the
    image's own code (``images/hostile/_common.py``: parse, build the constant answer, encode) on
    the same request lines in this process, per call (same CPython 3.11). Targets: median <= 0.3
    ms, p99 <= 1 ms.
(b) timing fidelity with ``sleep20`` (sleeps 20 ms per call): p99 of runtime_ms in [20, 21.5].
(c) container start to ``ready`` (image already pulled), median of N fresh containers; target
    <= 300 ms. Also the full life: start request to container removed.
(d) the runner's share of one seasonal-naive task: ensure_image from cache, start to ready,
    calls, stop and removal.

The containers run pinned to ``--cpuset`` (default CPU 1). The host's load average is printed
first: on a shared 2-CPU host the tails of (a) and (b) and the start times move with whatever else
runs, above all with another CPU-bound process on the same CPU (a worker host reserves its slot
CPUs for sealed runs; this bench cannot).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from app.hardware import HardwareClass
from tests.runner.helpers import make_card, make_requests
from workers.runner.forward import DriverLimits, TaskOutcome, drive_task, request_message
from workers.runner.podman import PodmanBackend
from workers.runner.port import SealedSpec

REPO = Path(__file__).resolve().parents[1]
REGISTRY = "127.0.0.1:5000"
HW = HardwareClass("bench-1c-512m", cpus=1, memory_mb=512, pids=64)
ACCEPT = ("application/vnd.oci.image.manifest.v1+json, "
          "application/vnd.docker.distribution.manifest.v2+json")


def pinned(name: str) -> str:
    request = urllib.request.Request(f"http://{REGISTRY}/v2/future-ts/{name}/manifests/latest",
                                     method="HEAD", headers={"Accept": ACCEPT})
    with urllib.request.urlopen(request, timeout=5) as response:
        return f"{REGISTRY}/future-ts/{name}@{response.headers['Docker-Content-Digest']}"


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary(values: Sequence[float]) -> str:
    return (f"n={len(values)} median={statistics.median(values):.3f} p95={pct(values, 95):.3f} "
            f"p99={pct(values, 99):.3f} max={max(values):.3f} ms")


class Bench:
    def __init__(self, state_dir: Path, cpuset: str) -> None:
        self.cpuset = cpuset
        conf = REPO / ".ci" / "containers.conf"
        self.backend = PodmanBackend(state_dir=state_dir,
                                     containers_conf=conf if conf.exists() else None,
                                     insecure_hosts=[REGISTRY])
        self.count = 0

    def run(self, image: str, windows: int, *, latency_ms: float = 1000.0,
            items: int = 1, on_record: Callable[[dict[str, Any]], None] | None = None,
            ) -> tuple[TaskOutcome, list[dict[str, Any]], float]:
        card = make_card(windows=windows, latency_ms=latency_ms, violation_pct=100,
                         wall_clock_s=600, startup_s=30)
        records: list[dict[str, Any]] = []
        self.count += 1
        spec = SealedSpec(name=f"fts-bench-{time.time_ns()}-{self.count}", image=image,
                          hardware=HW, cpuset=self.cpuset, max_lifetime_s=900)
        started = time.perf_counter()
        proc = self.backend.start(spec)
        outcome = drive_task(proc, card=card, requests=make_requests(card, items=items, length=24),
                             seed=1, run_id="bench",
                             on_record=on_record or records.append, limits=DriverLimits())
        return outcome, records, (time.perf_counter() - started) * 1000


def echo_compute_ms(calls: int) -> list[float]:
    """Per-call compute of echo-fast's own code on the same requests, measured in-process."""
    spec = importlib.util.spec_from_file_location("_common", REPO / "images/hostile/_common.py")
    assert spec is not None and spec.loader is not None
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    card = make_card(windows=calls)
    lines = [json.dumps(request_message(card, r, f"{r.window_id}-{i}"), separators=(",", ":"))
             .encode() + b"\n" for i, r in enumerate(make_requests(card, items=1, length=24))]
    out: list[float] = []
    for line in lines:
        t0 = time.perf_counter_ns()
        message = json.loads(line)
        reply = common.constant(message, 0.0)
        json.dumps(reply, separators=(",", ":")).encode()
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return out


def bench_overhead(bench: Bench, calls: int) -> None:
    image = pinned("echo-fast")
    bench.backend.ensure_image(image)
    outcome, records, _ = bench.run(image, calls)
    assert outcome.status == "completed", outcome.detail
    runtimes = [r["runtime_ms"] for r in records][50:]  # warm-up excluded
    compute = echo_compute_ms(calls)[50:]
    median_compute = statistics.median(compute)
    net = [rt - median_compute for rt in runtimes]
    print("(a) harness overhead, echo-fast")
    print(f"    runtime_ms (raw, includes the model's compute): {summary(runtimes)}")
    print(f"    echo-fast compute estimate per call:             {summary(compute)}")
    print(f"    runtime_ms minus median compute:                 {summary(net)}")
    print(f"    targets: median <= 0.3, p99 <= 1.0 -> median {statistics.median(net):.3f} "
          f"{'OK' if statistics.median(net) <= 0.3 else 'MISSED'}, p99 {pct(net, 99):.3f} "
          f"{'OK' if pct(net, 99) <= 1.0 else 'MISSED'}")


def bench_fidelity(bench: Bench, calls: int) -> None:
    image = pinned("sleep20")
    bench.backend.ensure_image(image)
    outcome, records, _ = bench.run(image, calls)
    assert outcome.status == "completed", outcome.detail
    runtimes = [r["runtime_ms"] for r in records][5:]
    p99 = pct(runtimes, 99)
    print("(b) timing fidelity, sleep20 (20 ms sleep per call)")
    print(f"    runtime_ms: {summary(runtimes)}; min={min(runtimes):.3f}")
    print(f"    target: p99 in [20, 21.5] -> {p99:.3f} {'OK' if 20 <= p99 <= 21.5 else 'MISSED'}")


def bench_start(bench: Bench, starts: int) -> None:
    image = pinned("echo-fast")
    bench.backend.ensure_image(image)
    ready, life = [], []
    for _ in range(starts):
        outcome, _, total_ms = bench.run(image, 1)
        assert outcome.status == "completed" and outcome.startup_ms is not None
        ready.append(outcome.startup_ms)
        life.append(total_ms)
    print(f"(c) container start to ready, echo-fast, {starts} fresh containers")
    print(f"    start->ready: median={statistics.median(ready):.1f} min={min(ready):.1f} "
          f"max={max(ready):.1f} ms; target <= 300 -> "
          f"{'OK' if statistics.median(ready) <= 300 else 'MISSED'}")
    print(f"    start->removed (whole life incl. podman rm): median="
          f"{statistics.median(life):.1f} ms")


def bench_task(bench: Bench) -> None:
    image = pinned("seasonal-naive")
    t0 = time.perf_counter()
    bench.backend.ensure_image(image)
    ensure_ms = (time.perf_counter() - t0) * 1000
    outcome, records, total_ms = bench.run(image, 20, items=5)
    assert outcome.status == "completed", outcome.detail
    calls_ms = sum(r["runtime_ms"] for r in records)
    assert outcome.startup_ms is not None
    rest = total_ms - outcome.startup_ms - calls_ms
    print("(d) runner share of one seasonal-naive task (20 windows x 5 series)")
    print(f"    ensure_image (cached) {ensure_ms:.1f} ms; "
          f"start->ready {outcome.startup_ms:.1f} ms; "
          f"calls {calls_ms:.1f} ms (model compute + protocol); bye/stop/remove and "
          f"bookkeeping {rest:.1f} ms; total {total_ms + ensure_ms:.1f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--sleep-calls", type=int, default=300)
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--only", default="abcd", help="which parts to run, e.g. 'b' or 'ac'")
    parser.add_argument("--cpuset", default="1", help="CPUs the benchmark containers run on")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fts-bench-") as state:
        bench = Bench(Path(state), args.cpuset)
        print(f"load average before: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
        if "a" in args.only:
            bench_overhead(bench, args.calls)
        if "b" in args.only:
            bench_fidelity(bench, args.sleep_calls)
        if "c" in args.only:
            bench_start(bench, args.starts)
        if "d" in args.only:
            bench_task(bench)
        leftovers = bench.backend.list_containers("fts-bench-")
        print(f"leftover containers: {len(leftovers)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
