"""`future-ts dev`, the README's first command: one process tree on embedded defaults (SQLite,
local store, filesystem broker), a real submission end to end, and Ctrl-C stops everything."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.workers.conftest import need_podman

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.podman


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_dev_runs_a_submission_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    need_podman()
    port = _port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUTURE_TS_")}
    env["FUTURE_TS_CONTAINERS_CONF"] = os.environ.get("FUTURE_TS_CONTAINERS_CONF", "")
    env = {k: v for k, v in env.items() if v}
    log = tmp_path / "dev.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "dev", "--port", str(port), "--data-dir",
             str(tmp_path / "data")], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        token = _wait_for_token(log, proc)
        _wait_ready(base)
        headers = {"Authorization": f"Bearer {token}"}
        r = httpx.post(f"{base}/v1/submissions", headers=headers, timeout=30, json={
            "image": "127.0.0.1:5000/future-ts/seasonal-naive:latest",
            "tasks": ["sunspots-yearly"], "tier": "public_dev",
            "metadata": {"model_name": "snaive", "organization": "dev",
                         "training_cutoff": "2020-01-01T00:00:00Z",
                         "frozen_at": "2020-01-02T00:00:00Z"}})
        assert r.status_code == 202, r.text
        url = f"{base}{r.headers['Location']}"
        deadline = time.monotonic() + 120
        status = "queued"
        while time.monotonic() < deadline and status not in {"completed", "failed"}:
            time.sleep(0.5)
            status = httpx.get(url, headers=headers, timeout=10).json()["status"]
        assert status == "completed", log.read_text()[-3000:]
        report = httpx.get(f"{base}{httpx.get(url, headers=headers).json()['report_url']}",
                           headers=headers)
        assert report.status_code == 200 and b"payloadType" in report.content
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    time.sleep(0.5)
    # Exited-but-unreaped (zombie) processes are not running; PID 1 here does not reap them.
    ps = subprocess.run(["ps", "-o", "pid=,stat=", "-g", str(proc.pid)], capture_output=True,
                        text=True, check=False).stdout.split("\n")
    leftovers = [line.split()[0] for line in ps if line.strip() and "Z" not in line.split()[1]]
    detail = subprocess.run(["ps", "-o", "pid,ppid,stat,cmd", "-g", str(proc.pid)],
                            capture_output=True, text=True, check=False).stdout
    assert leftovers == [], f"Ctrl-C left processes behind:\n{detail}"


def _wait_for_token(log: Path, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("staff token (dev):"):
                return line.split()[-1]
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.2)
    raise AssertionError("future-ts dev printed no token: " + log.read_text()[-3000:])


def _wait_ready(base: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("the dev API never became ready")
