"""The operator commands, run as a new user would (subprocess, fresh SQLite data dir)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUTURE_TS_")}
    env.update(FUTURE_TS_DATA_DIR=str(data), PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_migrate_tokens_keys_and_store(tmp_path: Path) -> None:
    assert _cli(tmp_path, "migrate").returncode == 0
    assert (tmp_path / "future-ts.sqlite3").exists()
    made = _cli(tmp_path, "tokens", "create", "--role", "author", "--name", "alice")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    assert token.startswith("fts_") and " " not in token
    assert "shown once" in made.stderr
    bad = _cli(tmp_path, "tokens", "create", "--role", "wizard", "--name", "x")
    assert bad.returncode != 0
    keys = _cli(tmp_path, "keys", "generate", "--dir", str(tmp_path / "k"))
    assert keys.returncode == 0, keys.stderr
    pems = sorted(p.name for p in (tmp_path / "k").iterdir())
    assert [p.split("-")[0] for p in pems] == ["log", "report"]
    assert all(oct((tmp_path / "k" / p).stat().st_mode)[-3:] == "600" for p in pems)
    again = _cli(tmp_path, "keys", "generate", "--dir", str(tmp_path / "k"))
    assert again.returncode == 0 and "keeping it" in again.stderr
    store = _cli(tmp_path, "store", "init")
    assert store.returncode == 0 and "not write-once" in store.stdout


def test_production_refuses_embedded_defaults(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUTURE_TS_")}
    env.update(FUTURE_TS_ENVIRONMENT="production", FUTURE_TS_DATA_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "app.cli", "migrate"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode != 0
    for problem in ("FUTURE_TS_DATABASE_URL", "FUTURE_TS_BROKER_URL", "FUTURE_TS_STORE",
                    "signing key"):
        assert problem in r.stderr
