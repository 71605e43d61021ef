"""``future-ts``: run the service, operate it, and use it as a client.

Server commands read their configuration from ``FUTURE_TS_*`` variables (see ``app.settings``);
``future-ts dev`` fills in embedded defaults (SQLite, a local directory store, a filesystem broker)
so that nothing needs to be installed first.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from app.settings import Settings, get_settings, process_environment

Handler = Callable[[argparse.Namespace], int]


def _alembic_upgrade(settings: Settings) -> None:
    from alembic import command
    from alembic.config import Config

    root = Path(__file__).resolve().parent.parent
    cfg = Config(str(root / "alembic.ini"))
    cfg.set_main_option("script_location", str(root / "migrations"))
    cfg.attributes["url"] = settings.resolved_database_url
    cfg.attributes["configure_logger"] = False
    command.upgrade(cfg, "head")


def cmd_migrate(_: argparse.Namespace) -> int:
    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    _alembic_upgrade(settings)
    print("database is at the latest revision")
    return 0


def cmd_tokens_create(args: argparse.Namespace) -> int:
    from app.auth.models import Role
    from app.auth.service import create_token
    from app.clock import SystemClock
    from app.db import session_scope

    with session_scope() as session:
        caller, token = create_token(session, SystemClock(), name=args.name, role=Role(args.role))
    print(f"created a {caller.role.value} token for {caller.name} (shown once):", file=sys.stderr)
    print(token)
    return 0


def cmd_keys_generate(args: argparse.Namespace) -> int:
    from app.evidence.keys import generate_keypair

    directory = Path(args.dir) if args.dir else get_settings().keys_dir
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d")  # <purpose>-<date>.pem: the key ring's rotation format
    for purpose in ("report", "log"):
        path = directory / f"{purpose}-{stamp}.pem"
        if path.exists():
            print(f"{path} exists; keeping it", file=sys.stderr)
            continue
        generate_keypair(path)
        print(f"wrote {purpose} key {path}")
    return 0


def cmd_store_init(_: argparse.Namespace) -> int:
    from app.storage import init_store

    print(init_store(get_settings()))
    return 0


def _child_env(overrides: dict[str, str]) -> dict[str, str]:
    env = process_environment()
    env.update(overrides)
    return env


def _celery_worker_args(queues: list[str], concurrency: int, beat: bool) -> list[str]:
    args = [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker",
            "-Q", ",".join(queues), "--concurrency", str(concurrency), "-O", "fair",
            "--loglevel", "INFO", "--hostname", f"future-ts-{'-'.join(queues)[:40]}@%h"]
    if beat:
        schedule = get_settings().data_dir.resolve() / "celerybeat-schedule"
        args += ["-B", "--schedule", str(schedule)]
    return args


def _all_queues() -> list[str]:
    from app.hardware import HARDWARE_CLASSES

    return [hc.queue for hc in HARDWARE_CLASSES.values()] + ["runs.self-attested", "maintenance"]


def cmd_worker(args: argparse.Namespace) -> int:
    from app.hardware import get_hardware_class

    classes = [get_hardware_class(c) for c in args.hardware_class]
    queues = [hc.queue for hc in classes] + ["runs.self-attested", "maintenance"]
    concurrency = args.concurrency or _exact_slots(classes)
    argv = _celery_worker_args(queues, concurrency, beat=False)
    os.execvpe(argv[0], argv, _child_env({}))  # noqa: S606 - replaces this process by design
    return 0


def _exact_slots(classes: Sequence[Any]) -> int:
    """As many run slots as the host can provision exactly: whole pinned CPU sets for the
    largest class this worker serves (the runner's CPU allocator enforces the same split)."""
    settings = get_settings()
    cpus = len(_parse_cpus(settings.worker_cpus)) if settings.worker_cpus else \
        len(os.sched_getaffinity(0))
    slots: int = cpus // max(int(hc.cpus) for hc in classes)
    if slots < 1:
        raise SystemExit(f"this host has {cpus} CPUs; it cannot serve "
                         f"{', '.join(hc.id for hc in classes)} exactly")
    return slots


def _parse_cpus(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def cmd_beat(_: argparse.Namespace) -> int:
    schedule = get_settings().data_dir.resolve() / "celerybeat-schedule"
    argv = [sys.executable, "-m", "celery", "-A", "workers.celery_app", "beat", "--loglevel",
            "INFO", "--schedule", str(schedule)]
    os.execvpe(argv[0], argv, _child_env({}))  # noqa: S606
    return 0


def cmd_api(args: argparse.Namespace) -> int:
    from app.serving import serve_uvicorn

    return serve_uvicorn("app.main:create_app", args.host, args.port, args.workers)


def _ensure_dev_keys(settings: Settings) -> None:
    """Generate the dev keys once, before the API and the worker start (both load the ring);
    production refuses to start without configured keys."""
    import warnings

    from app.evidence.keys import load_keyring
    from app.warnings import DevOnlyWarning

    settings.keys_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DevOnlyWarning)
        load_keyring(settings)


def cmd_dev(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    os.environ["FUTURE_TS_DATA_DIR"] = str(data_dir)  # the children read it via Settings
    get_settings.cache_clear()
    settings = get_settings()
    _alembic_upgrade(settings)
    _ensure_dev_keys(settings)
    env = _child_env({"FUTURE_TS_DATA_DIR": str(data_dir)})
    os.environ.update(env)
    get_settings.cache_clear()
    token = _dev_token()
    procs = [
        subprocess.Popen([sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory",
                          "--host", "127.0.0.1", "--port", str(args.port)], env=env),
        subprocess.Popen(_celery_worker_args(_all_queues(), args.concurrency, beat=True),
                         env=env),
    ]
    print(f"\nFUTURE-TS dev: API http://127.0.0.1:{args.port}  data {data_dir}\n"
          f"staff token (dev): {token}\nCtrl-C stops everything.\n", flush=True)
    return _supervise(procs)


def _dev_token() -> str:
    from app.auth.models import Role
    from app.auth.service import create_token
    from app.clock import SystemClock
    from app.db import get_engine, get_sessionmaker, session_scope

    get_engine.cache_clear()
    get_sessionmaker.cache_clear()
    with session_scope() as session:
        _, token = create_token(session, SystemClock(), name="dev-staff", role=Role("staff"))
    return token


def _supervise(procs: Sequence[subprocess.Popen[bytes]]) -> int:
    stopping = False

    def _stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    while not stopping and all(p.poll() is None for p in procs):
        time.sleep(0.2)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 20
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
    return 0 if stopping else 1


def _client() -> Any:
    import httpx

    settings = get_settings()
    headers: dict[str, str] = {}
    if settings.token is not None:
        headers["Authorization"] = f"Bearer {settings.token.get_secret_value()}"
    return httpx.Client(base_url=settings.api_url, headers=headers, timeout=30, trust_env=False)


def _print_error(response: Any) -> int:
    print(f"error {response.status_code}: {response.text}", file=sys.stderr)
    return 2


def cmd_submit(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {
        "image": args.image, "artifact_uri": args.artifact_uri, "tasks": args.task or [],
        "suite": args.suite, "tier": args.tier, "execution_mode": args.execution_mode,
        "metadata": {"model_name": args.model_name, "organization": args.organization,
                     "training_cutoff": args.training_cutoff, "frozen_at": args.frozen_at},
    }
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}
    with _client() as client:
        response = client.post("/v1/submissions", json=body, headers=headers)
        if response.status_code != 202:
            return _print_error(response)
        sub = response.json()
        print(json.dumps(sub, indent=2))
        if not args.wait:
            return 0
        return _wait(client, sub["id"], args.timeout)


def _wait(client: Any, submission_id: str, timeout: float) -> int:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    terminal = {"completed", "failed", "cancelled"}
    etag = None
    sub: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  transient=False) as progress:
        bar = progress.add_task(f"{submission_id}: queued", total=None)
        while time.monotonic() < deadline:
            headers: dict[str, str] = {"If-None-Match": etag} if etag else {}
            response = client.get(f"/v1/submissions/{submission_id}", headers=headers)
            if response.status_code == 200:
                sub, etag = response.json(), response.headers.get("ETag")
                run = sub.get("latest_run") or {}
                progress.update(bar, description=f"{submission_id}: {sub['status']}"
                                f" (run {run.get('id', '-')}: {run.get('status', '-')})")
                if sub["status"] in terminal:
                    break
            elif response.status_code != 304:
                return _print_error(response)
            time.sleep(1.0)
    print(json.dumps(sub, indent=2))
    return 0 if sub.get("status") == "completed" else 1


def cmd_status(args: argparse.Namespace) -> int:
    with _client() as client:
        response = client.get(f"/v1/submissions/{args.id}")
        if response.status_code != 200:
            return _print_error(response)
        print(json.dumps(response.json(), indent=2))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from app.evidence.cli import run_verify
    from app.reports.recompute import verify_metrics_hook

    return run_verify(args.report, archive=args.archive, jwks=args.jwks,
                      recompute=args.recompute,
                      metrics_hook=verify_metrics_hook if args.recompute else None)


def cmd_recompute(args: argparse.Namespace) -> int:
    from app.reports.recompute import run_recompute_cli

    return run_recompute_cli(args.run_id, archive=args.archive)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="future-ts", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("dev", help="API and worker on embedded defaults (no server needed)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--data-dir", default=".data")
    p.add_argument("--concurrency", type=int, default=2)
    p.set_defaults(func=cmd_dev)

    p = sub.add_parser("api", help="the production API process (uvicorn)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=2)
    p.set_defaults(func=cmd_api)

    p = sub.add_parser("worker", help="a Celery worker for one or more hardware classes")
    p.add_argument("--hardware-class", action="append", required=True)
    p.add_argument("--concurrency", type=int, default=0,
                   help="run slots (default: as many exact CPU sets as the host has)")
    p.set_defaults(func=cmd_worker)

    sub.add_parser("beat", help="the periodic sweeper (stuck runs, lost messages)").set_defaults(
        func=cmd_beat)
    sub.add_parser("migrate", help="alembic upgrade head").set_defaults(func=cmd_migrate)

    tokens = sub.add_parser("tokens").add_subparsers(dest="tokens_command", required=True)
    p = tokens.add_parser("create", help="issue a bearer token (printed alone on the last line)")
    p.add_argument("--role", choices=["author", "reader", "staff"], required=True)
    p.add_argument("--name", required=True)
    p.set_defaults(func=cmd_tokens_create)

    keys = sub.add_parser("keys").add_subparsers(dest="keys_command", required=True)
    p = keys.add_parser("generate", help="write a new report key and log key (Ed25519 PEM)")
    p.add_argument("--dir")
    p.set_defaults(func=cmd_keys_generate)

    store = sub.add_parser("store").add_subparsers(dest="store_command", required=True)
    store.add_parser("init", help="create the archive bucket with Object Lock").set_defaults(
        func=cmd_store_init)

    p = sub.add_parser("submit", help="submit a model image (client)")
    p.add_argument("--image")
    p.add_argument("--artifact-uri")
    p.add_argument("--task", action="append")
    p.add_argument("--suite")
    p.add_argument("--tier", default="public_dev")
    p.add_argument("--execution-mode", default="sealed")
    p.add_argument("--model-name", required=True)
    p.add_argument("--organization", required=True)
    p.add_argument("--training-cutoff", required=True)
    p.add_argument("--frozen-at", required=True)
    p.add_argument("--idempotency-key")
    p.add_argument("--wait", action="store_true")
    p.add_argument("--timeout", type=float, default=1800)
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("status", help="show a submission (client)")
    p.add_argument("id")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("verify", help="verify a signed report offline")
    p.add_argument("report")
    p.add_argument("--archive", help="directory or s3://bucket/runs/<run_id>")
    p.add_argument("--jwks", help="JWKS file or URL")
    p.add_argument("--recompute", action="store_true", help="also recompute the metrics")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("recompute-metric", help="rescore a run from its archived predictions")
    p.add_argument("run_id")
    p.add_argument("--archive", help="directory holding the run's archived objects")
    p.add_argument("--report", help="report envelope to compare with")
    p.set_defaults(func=cmd_recompute)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.func
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
