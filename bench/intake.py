"""Intake benchmark: status polling and submission throughput/p99 against the production setup.

    .venv/bin/python bench/intake.py [--duration 10] [--connections 32] [--generator auto]

What it does, all on loopback, and undone at the end:

1. creates a fresh PostgreSQL database on 127.0.0.1:5432 (user postgres, trust auth), runs
   ``future-ts migrate`` (``alembic upgrade head``) on it and issues ``--authors`` author tokens
   (256; ``app.auth.service.create_token``, what ``future-ts tokens create`` calls);
2. starts ``future-ts api --workers 2`` (uvicorn, as documented for production) against it, with
   the broker at redis://127.0.0.1:6379/14, and a bare FastAPI app (``bench/bare_app.py``, one
   trivial JSON endpoint) served the same way (``app.cli.serve_uvicorn``) as the ceiling;
3. drives each with wrk (a small Lua script, ``bench/load.lua``; ``bench/httpx_load.py`` if wrk is
   missing) for a fixed time and at most a fixed count: the bare endpoint (first and last, to
   see how much the machine's other load moved), ``GET
   /v1/submissions/{id}`` without and with ``If-None-Match`` (the 304 path), and ``POST
   /v1/submissions`` (tag resolution against the local registry at 127.0.0.1:5000) by 32
   clients, each request from the next of the 256 authors in turn. Quotas stay on: the daily
   quota at its default (50 per author, which the default phases stay under), the in-flight
   quota raised since no worker drains the runs (``QUOTA_ENV``). An author's quota count reads
   their submissions of the last 24 hours: with 32 authors and no daily limit (as this
   benchmark first ran), each had hundreds within seconds, and the count, not intake, grew
   into the cost of a POST;
4. prints a table, the CPU each party used, the PostgreSQL sessions opened, and the ratios
   against the targets of issue 2;
5. stops the servers, drops the database and deletes the Redis keys the run created.

The load generator runs on the same two cores as the servers, PostgreSQL, Redis and the registry;
the CPU columns show how the machine's time was split, so the numbers can be read honestly. Work
outside the benchmark (column "other") makes throughput noisy; the CPU time the service stack
(server, PostgreSQL, Redis, registry) spent per request is much steadier, and its ratio to the bare
endpoint's is printed next to the throughput ratio.

A keep-alive connection stays with the worker that accepted it: the "per worker" column shows how
the load fell. uvicorn's own ``--workers`` share one listening socket, and one worker often took
all 32 connections (halving the throughput a run could show, whatever the code did);
``future-ts api`` (``app.serving.serve_uvicorn``, which the bare app uses too) splits them evenly
between the workers. The "POST floor" phase
(``bench/floor_app.py``) is the least any submission endpoint could do on this machine: the
same body, one registry ``HEAD`` and one ``INSERT`` in a worker thread, served the same way; the
gap to ``POST /v1/submissions`` is what intake's rules, tables and framework cost. A light-load POST
phase (4 clients) separates the service time of a submission from queueing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
PG_HOST, PG_PORT, PG_USER = "127.0.0.1", 5432, "postgres"
BROKER_URL = "redis://127.0.0.1:6379/14"
REGISTRY = "127.0.0.1:5000"
IMAGE_REPO = "future-ts/seasonal-naive"
IMAGE = f"{REGISTRY}/{IMAGE_REPO}:latest"
MANIFEST_ACCEPT = ("application/vnd.oci.image.index.v1+json, "
                   "application/vnd.oci.image.manifest.v1+json, "
                   "application/vnd.docker.distribution.manifest.list.v2+json, "
                   "application/vnd.docker.distribution.manifest.v2+json")
# Quotas stay enforced (the principal lock and the counts are part of every POST's cost). The
# daily quota keeps its default; the runs-in-flight quota is raised because no worker drains
# the benchmark's runs: every one stays queued, so in flight.
QUOTA_ENV = {"FUTURE_TS_QUOTA_RUNS_IN_FLIGHT": "1000000000"}
STATUS_GET_TARGET = 0.40  # status GET throughput >= 40% of the bare endpoint's
POST_P99_TARGET_MS = 100.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def future_ts() -> list[str]:
    """The ``future-ts`` console script, run as ``python -m app.cli`` (the same ``main``) from
    the tree this file is in, so that a copy of the repository benchmarks its own code."""
    return [sys.executable, "-m", "app.cli"]


# --------------------------------------------------------------------------- CPU accounting


def _proc_table() -> dict[int, tuple[int, str, float]]:
    """pid -> (ppid, comm, cpu seconds) for every process we may read."""
    out: dict[int, tuple[int, str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2:].split()
        out[int(entry)] = (int(fields[1]), comm, (int(fields[11]) + int(fields[12])) / CLK_TCK)
    return out


def _descendants(table: dict[int, tuple[int, str, float]], root: int) -> set[int]:
    found = {root}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _, _) in table.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return found


@dataclass
class CpuSnapshot:
    by_pid: dict[int, tuple[str, float]]
    children_s: float  # our reaped children (the load generator)

    @classmethod
    def take(cls, roots: dict[str, int]) -> CpuSnapshot:
        table = _proc_table()
        groups: dict[int, str] = {}
        for name, root in roots.items():
            for pid in _descendants(table, root):
                groups[pid] = name
        by_pid: dict[int, tuple[str, float]] = {}
        for pid, (_, comm, cpu) in table.items():
            if pid == os.getpid():
                group = "driver"
            elif pid in groups:
                group = groups[pid]
            elif comm == "postgres":
                group = "postgres"
            elif comm.startswith(("redis-server", "redis")):
                group = "redis"
            elif "registry" in comm:
                group = "registry"
            else:
                group = "other"
            by_pid[pid] = (group, cpu)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return cls(by_pid, usage.ru_utime + usage.ru_stime)

    def delta(self, later: CpuSnapshot) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, (group, cpu) in later.by_pid.items():
            before = self.by_pid.get(pid)
            used = cpu - (before[1] if before and before[0] == group else 0.0)
            out[group] = out.get(group, 0.0) + max(0.0, used)
        out["generator"] = later.children_s - self.children_s
        return out

    def worker_split(self, later: CpuSnapshot, group: str, root: int) -> list[float]:
        """CPU seconds of each uvicorn worker process of ``group``, busiest first: keep-alive
        connections (accepted once) need not be spread evenly over them; this shows how
        unevenly."""
        used = [cpu - self.by_pid.get(pid, (group, 0.0))[1]
                for pid, (g, cpu) in later.by_pid.items() if g == group and pid != root]
        total = sum(used)
        return sorted((u for u in used if u > 0.02 * total), reverse=True)


# --------------------------------------------------------------------------- fixtures


@dataclass
class Fixture:
    workdir: Path
    db_name: str
    db_url: str
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    redis_keys_before: set[bytes] = field(default_factory=set)
    own_registry: subprocess.Popen[bytes] | None = None


def _pg_admin() -> Any:
    import psycopg

    return psycopg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres",
                           autocommit=True)


def create_database(name: str) -> None:
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(name: str) -> None:
    with _pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_sessions(name: str) -> int:
    """Sessions (connections) PostgreSQL has opened for database ``name`` so far."""
    with _pg_admin() as conn:
        row = conn.execute("SELECT sessions FROM pg_stat_database WHERE datname = %s",
                           (name,)).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def service_env(db_url: str, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUTURE_TS_")}
    env.update({
        "FUTURE_TS_DATABASE_URL": db_url,
        "FUTURE_TS_BROKER_URL": BROKER_URL,
        "FUTURE_TS_DATA_DIR": str(data_dir),
        "FUTURE_TS_ENVIRONMENT": "test",
        "PYTHONDONTWRITEBYTECODE": "1",
        **QUOTA_ENV,
    })
    return env


def run_cli(env: dict[str, str], *args: str) -> str:
    result = subprocess.run([*future_ts(), *args], env=env, cwd=REPO, capture_output=True,
                            text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"future-ts {' '.join(args)} failed: {result.stderr[-2000:]}")
    return result.stdout


def create_tokens(env: dict[str, str], count: int) -> list[str]:
    """``count`` author tokens in one process (``future-ts tokens create`` would start ``count``
    interpreters)."""
    program = (
        "import sys\n"
        "from app.auth.models import Role\n"
        "from app.auth.service import create_token\n"
        "from app.clock import SystemClock\n"
        "from app.db import session_scope\n"
        "with session_scope() as session:\n"
        "    for i in range(int(sys.argv[1])):\n"
        "        print(create_token(session, SystemClock(), name=f'bench-author-{i:02d}',\n"
        "                           role=Role.author)[1])\n")
    result = subprocess.run([sys.executable, "-c", program, str(count)], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=120, check=False)
    tokens = result.stdout.split()
    if result.returncode != 0 or len(tokens) != count:
        raise RuntimeError(f"token creation failed: {result.stderr[-2000:]}")
    return tokens


def pick_task(env: dict[str, str], wait_s: float) -> str:
    """A public_dev task id from the real catalog (another team is writing it: retry)."""
    probe = ("import json; from app.catalog import load_catalog; from app.settings import "
             "get_settings; c = load_catalog(get_settings().catalog_version); print(json.dumps("
             "[[t.task_id, t.tier, t.requires_pretraining_manifest] for t in c.cards()]))")
    deadline = time.monotonic() + wait_s
    while True:
        result = subprocess.run([sys.executable, "-c", probe], env=env, cwd=REPO,
                                capture_output=True, text=True, timeout=120, check=False)
        if result.returncode == 0:
            cards = json.loads(result.stdout.strip().splitlines()[-1])
            public = [c for c in cards if c[1] == "public_dev"]
            public.sort(key=lambda c: bool(c[2]))
            if public:
                return str(public[0][0])
        if time.monotonic() > deadline:
            raise RuntimeError("no public_dev task in the catalog: "
                               f"{result.stderr.strip()[-800:] or result.stdout[-800:]}")
        log("catalog not importable yet; retrying in 5 s")
        time.sleep(5)


def image_present(image_repo: str) -> bool:
    url = f"http://{REGISTRY}/v2/{image_repo}/manifests/latest"
    try:
        response = httpx.head(url, headers={"Accept": MANIFEST_ACCEPT}, timeout=2,
                              trust_env=False)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def registry_answers() -> bool:
    try:
        return httpx.get(f"http://{REGISTRY}/v2/", timeout=2, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def ensure_image(fx: Fixture, wait_s: float) -> str:
    """The image the POSTs name. Prefer the one ``images/build.sh`` pushes to the registry that
    ``.ci/services.sh start`` runs; else start our own registry and push a tiny image."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if image_present(IMAGE_REPO):
            return IMAGE
        log(f"waiting for {IMAGE} (.ci/services.sh start; images/build.sh)")
        time.sleep(5)
    if not registry_answers():
        fx.own_registry = start_own_registry(fx.workdir)
    tiny_repo = "future-ts/bench-tiny"
    if not image_present(tiny_repo):
        push_tiny_image(fx.workdir, f"{REGISTRY}/{tiny_repo}:latest")
    return f"{REGISTRY}/{tiny_repo}:latest"


def start_own_registry(workdir: Path) -> subprocess.Popen[bytes]:
    """Debian's docker-registry on 127.0.0.1:5000 (machine-notes section 3), in a temp dir."""
    if shutil.which("docker-registry") is None:
        raise RuntimeError("no registry on 127.0.0.1:5000 and docker-registry is not installed")
    config = workdir / "registry.yml"
    config.write_text(
        "version: 0.1\nlog: {level: warn, accesslog: {disabled: true}}\n"
        "storage:\n  cache: {blobdescriptor: inmemory}\n"
        f"  filesystem: {{rootdirectory: {workdir / 'registry-data'}}}\n"
        f"http:\n  addr: {REGISTRY}\n")
    with (workdir / "registry.log").open("wb") as out:
        proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                # as .ci/services.sh runs it
                                env={**os.environ, "GOGC": "400"})
    for _ in range(100):
        if registry_answers():
            return proc
        time.sleep(0.1)
    raise RuntimeError("our docker-registry did not answer")


def push_tiny_image(workdir: Path, target: str) -> None:
    layout, rootfs = workdir / "oci", workdir / "rootfs"
    rootfs.mkdir(parents=True, exist_ok=True)
    (rootfs / "hello.txt").write_text("future-ts bench\n")
    steps = [
        ["umoci", "init", "--layout", str(layout)],
        ["umoci", "new", "--image", f"{layout}:tiny"],
        ["umoci", "insert", "--image", f"{layout}:tiny", str(rootfs), "/"],
        ["skopeo", "copy", "--dest-tls-verify=false", f"oci:{layout}:tiny", f"docker://{target}"],
    ]
    for step in steps:
        subprocess.run(step, check=True, capture_output=True, timeout=120)


def start_server(fx: Fixture, name: str, argv: list[str]) -> None:
    with (fx.workdir / f"{name}.log").open("wb") as out:
        fx.procs[name] = subprocess.Popen(argv, env=fx.env, cwd=REPO, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(fx: Fixture, name: str, url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if fx.procs[name].poll() is not None:
            tail = (fx.workdir / f"{name}.log").read_text()[-2000:]
            raise RuntimeError(f"{name} exited early:\n{tail}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1, trust_env=False).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{name} did not answer {url}")


def stop_servers(fx: Fixture) -> None:
    procs = list(fx.procs.values()) + ([fx.own_registry] if fx.own_registry else [])
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            # Our own session (start_new_session): its group holds only what we started.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def _redis() -> Any:
    import redis

    return redis.Redis.from_url(BROKER_URL)


@contextlib.contextmanager
def fixture(keep: bool) -> Iterator[Fixture]:
    workdir = Path(tempfile.mkdtemp(prefix="future-ts-bench-"))
    db_name = f"futurets_bench_{uuid.uuid4().hex[:8]}"
    db_url = f"postgresql+psycopg://{PG_USER}@{PG_HOST}:{PG_PORT}/{db_name}"
    fx = Fixture(workdir, db_name, db_url, service_env(db_url, workdir / "data"))
    fx.redis_keys_before = set(_redis().keys("*"))
    if fx.redis_keys_before:
        log(f"{BROKER_URL} is not empty: messages this run adds to existing keys stay there")
    create_database(db_name)
    try:
        yield fx
    finally:
        stop_servers(fx)
        with contextlib.suppress(Exception):
            client = _redis()
            created = [k for k in client.keys("*") if k not in fx.redis_keys_before]
            if created:
                client.delete(*created)
        if keep:
            log(f"kept database {db_name} and {workdir}")
        else:
            drop_database(db_name)
            shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------- load


@dataclass
class Phase:
    name: str
    url: str
    expect: int
    method: str = "GET"
    body_file: Path | None = None
    tokens: list[str] = field(default_factory=list)
    if_none_match: str | None = None
    connections: int | None = None  # None: --connections
    server: str = "api"  # whose processes' CPU is the "server" column: api, bare or floor


@dataclass
class Result:
    phase: str
    stats: dict[str, float]
    cpu: dict[str, float]
    wall_s: float
    workers: list[float]
    pg_sessions: int

    @property
    def rps(self) -> float:
        return self.stats["requests"] / (self.stats["duration_us"] / 1e6)

    @property
    def stack_cpu_us(self) -> float:
        """CPU time of the service stack (server, PostgreSQL, Redis, registry) per request."""
        used = sum(self.cpu.get(g, 0.0)
                   for g in ("api", "bare", "floor", "postgres", "redis", "registry"))
        return used / max(1.0, self.stats["requests"]) * 1e6

    def ms(self, key: str) -> float:
        return self.stats[key] / 1000.0


def generator_argv(kind: str, phase: Phase, connections: int, duration: float,
                   max_requests: int) -> tuple[list[str], dict[str, str]]:
    if kind == "wrk":
        # One wrk thread: a few percent of one core at these rates, the least we can take.
        argv = ["wrk", "-t1", f"-c{connections}", f"-d{duration:g}s", "--timeout", "10s",
                "-s", str(BENCH / "load.lua"), phase.url]
        env = dict(os.environ)
        env.update({"BENCH_METHOD": phase.method, "BENCH_EXPECT": str(phase.expect),
                    "BENCH_MAX_REQUESTS": str(max_requests),
                    "BENCH_BODY_FILE": str(phase.body_file or ""),
                    "BENCH_TOKENS": ",".join(phase.tokens),
                    "BENCH_IF_NONE_MATCH": phase.if_none_match or ""})
        return argv, env
    argv = [sys.executable, str(BENCH / "httpx_load.py"), phase.url, "--method", phase.method,
            "--expect", str(phase.expect), "--connections", str(connections),
            "--duration", str(duration), "--max-requests", str(max_requests)]
    for flag, value in (("--body-file", phase.body_file), ("--tokens", ",".join(phase.tokens)),
                        ("--if-none-match", phase.if_none_match)):
        if value:
            argv += [flag, str(value)]
    return argv, dict(os.environ)


def run_load(kind: str, phase: Phase, connections: int, duration: float, max_requests: int,
             roots: dict[str, int], db_name: str) -> Result:
    connections = phase.connections or connections
    argv, env = generator_argv(kind, phase, connections, duration, max_requests)
    sessions = pg_sessions(db_name)
    before = CpuSnapshot.take(roots)
    group = phase.server
    start = time.monotonic()
    # Bounded: the generator stops itself at the duration or the count; the timeout is a guard.
    result = subprocess.run(argv, env=env, capture_output=True, text=True,
                            timeout=duration + 60, check=False)
    wall = time.monotonic() - start
    after = CpuSnapshot.take(roots)
    cpu = before.delta(after)
    workers = before.worker_split(after, group, roots[group])
    sessions = pg_sessions(db_name) - sessions
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("BENCH_RESULT ")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"load generator failed for {phase.name}: "
                           f"{result.stdout[-1500:]}{result.stderr[-1500:]}")
    return Result(phase.name, json.loads(lines[-1].split(" ", 1)[1]), cpu, wall, workers,
                  sessions)


def submission_body(task_id: str, image: str) -> dict[str, Any]:
    return {
        "image": image, "tasks": [task_id], "tier": "public_dev", "execution_mode": "sealed",
        "metadata": {"model_name": "bench-snaive", "organization": "FUTURE-TS bench",
                     "training_cutoff": "2020-01-01T00:00:00Z",
                     "frozen_at": "2020-02-01T00:00:00Z",
                     "pretraining_data_manifest": ["none"]},
    }


def seed_submission(api: str, token: str, body: dict[str, Any]) -> tuple[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=api, headers=headers, timeout=30, trust_env=False) as client:
        created = client.post("/v1/submissions", json=body)
        if created.status_code != 202:
            raise RuntimeError(f"seed POST answered {created.status_code}: {created.text}")
        url = created.headers["Location"]
        status = client.get(url)
        if status.status_code != 200 or "ETag" not in status.headers:
            raise RuntimeError(f"seed GET answered {status.status_code}: {status.text}")
        again = client.get(url, headers={"If-None-Match": status.headers["ETag"]})
        if again.status_code != 304:
            raise RuntimeError(f"If-None-Match answered {again.status_code}, not 304")
        return url, status.headers["ETag"]


# --------------------------------------------------------------------------- report


def print_report(results: list[Result], args: argparse.Namespace, kind: str) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    print()
    print(f"FUTURE-TS intake benchmark: uvicorn --workers {args.workers}, {args.connections} "
          f"keep-alive connections, {args.duration:g} s per phase, generator {kind} "
          f"(on the same {cores} CPUs as everything else)")
    cpu_cols = ["server", "pg", "redis", "reg", "gen", "other"]
    header = (f"{'phase':<23}{'reqs':>7}{'!ok':>4}{'req/s':>7}{'p50':>7}{'p90':>7}{'p99':>7}"
              f"{'max':>7}{'stack':>7}{'pg':>5} |" + "".join(f"{c:>7}" for c in cpu_cols)
              + " | per worker")
    print(f"{'':<37}{'latency, ms':^28}{'CPU us':>7}{'new':>5} |"
          f"{'CPU, % of the machine':^42} |")
    print(header)
    print("-" * len(header))
    for r in results:
        capacity = r.wall_s * cores / 100.0
        cpu = dict(r.cpu, server=sum(r.cpu.get(g, 0.0) for g in ("api", "bare", "floor")),
                   pg=r.cpu.get("postgres", 0.0), reg=r.cpu.get("registry", 0.0),
                   gen=r.cpu.get("generator", 0.0))
        bad = int(r.stats["bad"] + r.stats["socket_errors"] + r.stats["timeouts"])
        print(f"{r.phase:<23}{int(r.stats['requests']):>7}{bad:>4}{r.rps:>7.0f}"
              f"{r.ms('p50_us'):>7.1f}{r.ms('p90_us'):>7.1f}{r.ms('p99_us'):>7.1f}"
              f"{r.ms('max_us'):>7.1f}{r.stack_cpu_us:>7.0f}{r.pg_sessions:>5} |"
              + "".join(f"{cpu.get(c, 0.0) / capacity:>7.0f}" for c in cpu_cols)
              + " | " + " / ".join(f"{w / capacity:.0f}" for w in r.workers))
    print("stack CPU us: server + PostgreSQL + Redis + registry CPU time per request; pg new: "
          "PostgreSQL sessions opened during the phase")
    by = {r.phase: r for r in results}
    if args.post_only:
        return {"results": [r.__dict__ for r in results]}
    bares = [r for r in results if r.phase.startswith("bare")]
    bare_rps = sum(r.rps for r in bares) / len(bares)
    bare_cpu = sum(r.stack_cpu_us for r in bares) / len(bares)
    get200, get304, post = (by["status GET (200)"], by["status GET (304)"],
                            by["POST /v1/submissions"])
    checks = [
        ("status GET (200) / bare", get200.rps / bare_rps, bare_cpu / get200.stack_cpu_us,
         STATUS_GET_TARGET, True),
        ("status GET (304) / bare", get304.rps / bare_rps, bare_cpu / get304.stack_cpu_us,
         STATUS_GET_TARGET, True),
        ("POST p99 ms", post.ms("p99_us"), None, POST_P99_TARGET_MS, False),
    ]
    print()
    print(f"bare ceiling: {bare_rps:.0f} req/s (mean of {len(bares)} runs: "
          + ", ".join(f"{r.rps:.0f}" for r in bares) + ")")
    # A generator that needs a good part of the CPU the bare server gets caps the ceiling
    # itself, and then the throughput ratio says nothing about the service.
    generator_bound = any(r.cpu.get("generator", 0.0) > 0.5 * r.cpu.get("bare", 0.0)
                          for r in bares)
    for label, value, by_cpu, target, at_least in checks:
        met = value >= target if at_least else value <= target
        verdict = "MET" if met else "MISSED"
        if at_least and generator_bound:
            verdict = "n/a"
        shown = f"{value:.0%}" if at_least else f"{value:.1f}"
        goal = f">= {target:.0%}" if at_least else f"<= {target:.0f}"
        extra = f"   (by stack CPU per request: {by_cpu:.0%})" if by_cpu is not None else ""
        print(f"{label:<26}{shown:>8}   target {goal:<7} {verdict:<7}{extra}")
    if generator_bound:
        print("note: the load generator took more than half as much CPU as the bare server: the "
              "ceiling is the generator's, so the throughput ratios are not judged (install wrk)")
    clients = args.connections
    print(f"POST at {clients} closed-loop clients: mean latency = {clients} / throughput, so a "
          f"p99 <= {POST_P99_TARGET_MS:.0f} ms needs >= {clients / POST_P99_TARGET_MS * 1000:.0f}"
          f" req/s; at {post.stack_cpu_us / 1000:.1f} ms of stack CPU per POST the {cores} cores "
          f"allow at most {cores / post.stack_cpu_us * 1e6:.0f} req/s")
    if "POST floor" in by:
        floor = by["POST floor"]
        print(f"POST floor (bench/floor_app.py: registry HEAD + one INSERT, nothing else): "
              f"{floor.rps:.0f} req/s, p99 {floor.ms('p99_us'):.1f} ms, "
              f"{floor.stack_cpu_us / 1000:.1f} ms of stack CPU per POST; "
              f"intake costs {post.stack_cpu_us / floor.stack_cpu_us:.1f}x that")
    other = max(r.cpu.get("other", 0.0) / (r.wall_s * cores) for r in results)
    if other > 0.10:
        print(f"note: up to {other:.0%} of the machine went to processes outside the benchmark "
              "(other work on this machine): throughput is noisier for it")
    return {"results": [r.__dict__ | {"rps": r.rps, "stack_cpu_us": r.stack_cpu_us}
                        for r in results],
            "checks": {label: {"value": value, "by_stack_cpu": by_cpu, "target": target}
                       for label, value, by_cpu, target, _ in checks}}


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--light-clients", type=int, default=4,
                        help="clients of the informational light-load POST phase")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--authors", type=int, default=256,
                        help="authors the POSTs come from, in turn (each has the default "
                             "daily quota of 50)")
    parser.add_argument("--max-requests", type=int, default=200_000,
                        help="count bound per phase")
    parser.add_argument("--generator", choices=["auto", "wrk", "httpx"], default="auto")
    parser.add_argument("--post-only", action="store_true",
                        help="only the 32-client POST phase (for profiling; no verdicts)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the database and temp dir")
    parser.add_argument("--wait-services", type=float, default=120.0,
                        help="seconds to wait for the catalog and the registry image")
    args = parser.parse_args()
    kind = args.generator
    if kind == "auto":
        kind = "wrk" if shutil.which("wrk") else "httpx"
        if kind == "httpx":
            log("wrk not found (apt-get install -y wrk): using the httpx generator, which "
                "takes much more of the shared CPU")

    started = time.monotonic()
    with fixture(args.keep) as fx:
        log(f"database {fx.db_name}: alembic upgrade head")
        run_cli(fx.env, "migrate")
        tokens = create_tokens(fx.env, args.authors)
        task_id = pick_task(fx.env, args.wait_services)
        image = ensure_image(fx, args.wait_services)
        api_port, bare_port, floor_port = free_port(), free_port(), free_port()
        start_server(fx, "api", [*future_ts(), "api", "--host", "127.0.0.1",
                                 "--port", str(api_port), "--workers", str(args.workers)])
        start_server(fx, "bare", [sys.executable, "-m", "bench.bare_app",
                                  "--port", str(bare_port), "--workers", str(args.workers)])
        start_server(fx, "floor", [sys.executable, "-m", "bench.floor_app", "--port",
                                   str(floor_port), "--workers", str(args.workers),
                                   "--dsn", fx.db_url.replace("postgresql+psycopg", "postgresql")])
        api, bare = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{bare_port}"
        floor = f"http://127.0.0.1:{floor_port}"
        wait_ready(fx, "api", f"{api}/healthz")
        wait_ready(fx, "bare", f"{bare}/ping")
        wait_ready(fx, "floor", f"{floor}/")
        body = submission_body(task_id, image)
        body_file = fx.workdir / "submission.json"
        body_file.write_text(json.dumps(body))
        status_url, etag = seed_submission(api, tokens[0], body)
        log(f"task {task_id}, image {image}, polling {status_url}")

        ceiling = Phase("bare GET /ping", f"{bare}/ping", 200, server="bare")
        phases = [
            ceiling,
            # Polling: the submission's author asks for its status.
            Phase("status GET (200)", f"{api}{status_url}", 200, tokens=tokens[:1]),
            Phase("status GET (304)", f"{api}{status_url}", 304, tokens=tokens[:1],
                  if_none_match=etag),
            Phase("POST /v1/submissions", f"{api}/v1/submissions", 202, method="POST",
                  body_file=body_file, tokens=tokens),
            # Informational: the same at light load, to separate service time from queueing
            # (with N closed-loop clients, mean latency = N / throughput).
            Phase(f"POST, {args.light_clients} clients", f"{api}/v1/submissions", 202,
                  method="POST", body_file=body_file, tokens=tokens,
                  connections=args.light_clients),
            # The floor: registry HEAD + one INSERT and nothing else (bench/floor_app.py).
            Phase("POST floor", f"{floor}/", 202, method="POST", body_file=body_file,
                  server="floor"),
            Phase("bare GET /ping (again)", ceiling.url, 200, server="bare"),
        ]
        if args.post_only:
            phases = [p for p in phases if p.name in ("POST /v1/submissions", "POST floor")]
        roots = {name: proc.pid for name, proc in fx.procs.items()}
        results = []
        for phase in phases:
            if args.warmup > 0:
                run_load(kind, phase, args.connections, args.warmup, args.max_requests, roots,
                         fx.db_name)
            log(f"{phase.name}: {args.duration:g} s")
            results.append(run_load(kind, phase, args.connections, args.duration,
                                    args.max_requests, roots, fx.db_name))
        report = print_report(results, args, kind)
    log(f"done in {time.monotonic() - started:.0f} s; servers stopped, database dropped")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
